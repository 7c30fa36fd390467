"""data/ro-crate-metadata.json (RO-Crate 1.2, bundle/FORMAT.md "ro-crate-metadata.json") and the
figures, checked against the bag.

The crate must be canonical JSON with the RO-Crate 1.2 context and a flat @graph; every local
reference must name an entity of the graph; its File entities must be exactly the payload files
other than the crate, with the sha256 and size of the bytes in the bag (environment.json, which
varies between runs, may be left out, or described without both); the run (#run) must read
protocol.json and the model and dataset of resources.json (#input-model, #input-dataset, one part
per file with its sha256 and size) and produce every other file it describes; the signer entity
must hold the fingerprint of the key that signed the bag; the licence, publisher, contact and
authors the root names must be those of the signed predicate. Written from FORMAT.md, not from the job's code.

Those checks name what is wrong; `regenerated` then requires the whole file to be the crate
bundle.views.crate renders from the checked records, the payload's bytes, the signer, the
Bagging-Date and the signed publication, so that no description or extra entity states what the
records do not."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from bundle import layout
from bundle.canonical import dumps, loads_strict
from bundle.crate_graph import refs, types_of
from bundle.crate_graph import stated_publication as read_publication
from bundle.crate_terms import (
    CONTEXT,
    DESCRIPTOR,
    FINGERPRINT_PROPERTY,
    INPUTS,
    MEDIA_TYPES,
    PROFILE,
    ROOT,
    RUN,
    SOFTWARE_ID,
)
from bundle.crate_terms import VOLATILE as MAY_OMIT_HASH
from bundle.errors import CanonicalJSONError, CrateError
from bundle.views.crate import Described, crate_bytes
from verify import renderer
from verify.context import Context
from verify.result import Failed

PROTOCOL = layout.data_name(layout.PROTOCOL_JSON)
_ABSOLUTE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")

Graph = dict[str, dict[str, Any]]


def _all_refs(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        if set(value) == {"@id"} and isinstance(value["@id"], str):
            yield value["@id"]
            return
        for v in value.values():
            yield from _all_refs(v)
    elif isinstance(value, list):
        for v in value:
            yield from _all_refs(v)


def _entity(graph: Graph, ident: str, kind: str) -> dict[str, Any]:
    entity = graph.get(ident)
    if entity is None:
        raise Failed(f"the crate has no entity {ident!r}.")
    if kind not in types_of(entity):
        raise Failed(f"the crate's {ident!r} is a {types_of(entity)}, not a {kind}.")
    return entity


def parse(data: bytes) -> tuple[str, Graph]:
    """The crate's entities by @id, after the structural checks."""
    try:
        doc = loads_strict(data, source=layout.RO_CRATE_JSON)
    except CanonicalJSONError as exc:
        raise Failed(str(exc)) from exc
    if dumps(doc) != data:
        raise Failed(f"{layout.RO_CRATE_JSON} is valid JSON but not canonical; it was edited by "
                     "hand.")
    if not isinstance(doc, dict) or set(doc) != {"@context", "@graph"}:
        raise Failed("the crate must be an object with exactly @context and @graph.")
    if doc["@context"] != CONTEXT:
        raise Failed(f"@context is {str(doc['@context'])[:80]!r}, expected {CONTEXT!r}.")
    items = doc["@graph"]
    if not isinstance(items, list) or not items:
        raise Failed("@graph must be a non-empty list of entities.")
    graph: Graph = {}
    for n, entity in enumerate(items):
        if not isinstance(entity, dict) or not isinstance(entity.get("@id"), str) \
                or not entity["@id"]:
            raise Failed(f"@graph[{n}] is not an entity with an @id.")
        types = entity.get("@type")
        if not (isinstance(types, str) and types) and not (
                isinstance(types, list) and types and all(isinstance(t, str) and t for t in types)):
            raise Failed(f"entity {entity['@id']!r} has no valid @type.")
        if entity["@id"] in graph:
            raise Failed(f"the @id {entity['@id']!r} appears twice in @graph.")
        graph[entity["@id"]] = entity
    descriptor = _entity(graph, DESCRIPTOR, "CreativeWork")
    if PROFILE not in refs(descriptor.get("conformsTo")):
        raise Failed(f"the metadata descriptor does not conform to {PROFILE}.")
    if refs(descriptor.get("about")) != [ROOT]:
        raise Failed("the metadata descriptor is not about the root './'.")
    root = _entity(graph, ROOT, "Dataset")
    for key in ("name", "description"):
        if not isinstance(root.get(key), str) or not root[key]:
            raise Failed(f"the root has no {key}.")
    if not isinstance(root.get("datePublished"), str) or not _DATE.fullmatch(root["datePublished"]):
        raise Failed(f"the root's datePublished is {str(root.get('datePublished'))[:40]!r}, "
                     "expected YYYY-MM-DD.")
    if not refs(root.get("license")):
        raise Failed("the root names no license entity.")
    dangling = sorted({r for e in graph.values() for k, v in e.items() if k != "@id"
                       for r in _all_refs(v) if r not in graph and not _ABSOLUTE.match(r)})
    if dangling:
        raise Failed(f"the crate refers to {dangling[:5]}, which are not entities of @graph.")
    return f"RO-Crate 1.2 context, {len(graph)} entities, every local reference resolves", graph


def check_files(graph: Graph, files: dict[str, bytes], sha256: dict[str, str]) -> str:
    """File entities = payload minus the crate, hashes and sizes of the bag's bytes, reachable
    from the root through hasPart."""
    payload = {p.removeprefix("data/") for p in files if p != layout.RO_CRATE_JSON}
    described = {i for i, e in graph.items() if "File" in types_of(e)}
    problems = []
    if described - payload:
        problems.append(f"it describes files the bag lacks: {sorted(described - payload)[:5]}")
    if payload - described - MAY_OMIT_HASH:
        problems.append(f"it does not describe {sorted(payload - described - MAY_OMIT_HASH)[:5]}")
    for rel in sorted(described & payload):
        e = graph[rel]
        data = files[f"data/{rel}"]
        want_type = MEDIA_TYPES.get("." + rel.rsplit(".", 1)[-1], "application/octet-stream")
        if e.get("encodingFormat") != want_type:
            problems.append(f"{rel}: encodingFormat {e.get('encodingFormat')!r}, expected "
                            f"{want_type!r}")
        if rel in MAY_OMIT_HASH and "sha256" not in e and "contentSize" not in e:
            continue
        if e.get("sha256") != sha256[f"data/{rel}"]:
            problems.append(f"{rel}: sha256 {str(e.get('sha256'))[:16]!r}…, the file hashes to "
                            f"{sha256[f'data/{rel}'][:16]}…")
        if e.get("contentSize") != str(len(data)):
            problems.append(f"{rel}: contentSize {e.get('contentSize')!r}, the file has "
                            f"{len(data)} bytes")
    reached: set[str] = set()
    todo = [ROOT]
    while todo:
        ident = todo.pop()
        if ident in reached or ident not in graph:
            continue
        reached.add(ident)
        todo += refs(graph[ident].get("hasPart"))
    unreached = sorted(described - reached)
    if unreached:
        problems.append(f"{unreached[:5]} are not parts of the root (hasPart)")
    if problems:
        raise Failed("the crate does not describe the payload: " + "; ".join(problems[:3])
                     + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else "") + ".")
    return (f"{len(described)} File entities = the payload without the crate"
            f"{' and ' + ', '.join(sorted(payload - described)) if payload - described else ''}; "
            f"sha256 and size of {len(described - MAY_OMIT_HASH)} match the bag")


def _parts(graph: Graph, entity: dict[str, Any]) -> list[tuple[Any, Any, Any]]:
    out = []
    for ident in refs(entity.get("hasPart")):
        part = graph.get(ident, {})
        out.append((part.get("name"), part.get("sha256"), part.get("contentSize")))
    return sorted(out, key=repr)


def check_run(graph: Graph, files: list[str], resources: dict[str, Any],
              environment: dict[str, Any]) -> str:
    """#run reads protocol.json and the resources, produces every other file; the software
    names environment.json's commit and image."""
    run = _entity(graph, RUN, "CreateAction")
    problems = []
    objects = refs(run.get("object"))
    if sorted(objects) != sorted([PROTOCOL, *INPUTS.values()]) or len(objects) != 3:
        problems.append(f"#run reads {objects}, expected {[PROTOCOL, *INPUTS.values()]}")
    results = set(refs(run.get("result")))
    want = {p.removeprefix("data/") for p in files} - {PROTOCOL, DESCRIPTOR}
    want -= {p for p in MAY_OMIT_HASH if p not in graph}  # left out of the crate: no result
    if results != want:
        problems.append(f"#run produced {sorted(results ^ want)[:4]} differ from the payload")
    for kind, ident in INPUTS.items():
        repo = resources[kind]
        entity = graph.get(ident)
        if entity is None:
            problems.append(f"no entity {ident}")
            continue
        if entity.get("version") != repo["revision"] or \
                entity.get("name") != f"{repo['repo_id']}@{repo['revision']}":
            problems.append(f"{ident} is {entity.get('name')!r} version "
                            f"{entity.get('version')!r}, resources.json has "
                            f"{repo['repo_id']}@{repo['revision']}")
        listed = sorted(((f["path"], f["sha256"], str(f["size"])) for f in repo["files"]), key=repr)
        if _parts(graph, entity) != listed:
            problems.append(f"{ident}'s parts (name, sha256, size) are not resources.json's "
                            f"{kind} files")
    software = [graph[i] for i in refs(run.get("instrument")) if i in graph]
    if len(software) != 1 or "SoftwareApplication" not in types_of(software[0]):
        problems.append("#run's instrument is not one SoftwareApplication")
    else:
        for key, prop in (("git_commit", "identifier"), ("image", "additionalProperty")):
            values = [graph[i].get("value") for i in refs(software[0].get(prop)) if i in graph]
            recorded = environment.get(key)
            if values != ([recorded] if recorded else []):
                problems.append(f"the software's {prop} is {values}, environment.json's {key} "
                                f"is {recorded!r}")
    if problems:
        raise Failed("the crate's run does not match the payload: " + "; ".join(problems[:3])
                     + ".")
    return ("#run reads protocol.json and resources.json's model and dataset files, produces "
            "every other payload file")


def check_signer(graph: Graph, signer_fingerprint: str, bagging_date: str) -> str:
    """The signer entity holds the bag's signer; datePublished is the Bagging-Date."""
    keys = [e for e in graph.values() if e.get("propertyID") == FINGERPRINT_PROPERTY]
    if len(keys) != 1:
        raise Failed(f"the crate has {len(keys)} signer key entities "
                     f"(propertyID {FINGERPRINT_PROPERTY}), expected 1.")
    value = keys[0].get("value")
    if value != signer_fingerprint:
        raise Failed(f"the crate names signer {str(value)[:16]}…, the bag is signed by "
                     f"{signer_fingerprint[:16]}….")
    if keys[0]["@id"] not in refs(graph[ROOT].get("mentions")):
        raise Failed("the root does not mention the signer key entity.")
    published = graph[ROOT]["datePublished"]
    if published != bagging_date:
        raise Failed(f"datePublished {published!r} is not the Bagging-Date {bagging_date!r}.")
    return f"signer {signer_fingerprint[:16]}… as in the bag; datePublished {published}"


def stated_publication(graph: Graph) -> dict[str, Any]:
    """The publication the crate's root states, read as the format defines it
    (bundle.crate_graph.stated_publication); Failed on a graph the format never writes."""
    try:
        return read_publication(graph)
    except CrateError as exc:
        raise Failed(str(exc)) from exc


def check_publication(graph: Graph, signed: Any) -> str:
    """The root's licence, publisher, contact and authors equal the signed predicate's."""
    stated = stated_publication(graph)
    if stated != signed:
        diffs = [k for k in stated if not isinstance(signed, dict) or signed.get(k) != stated[k]]
        raise Failed(f"the crate states {diffs or 'a publication'} other than the signed predicate: "
                     f"crate {str({k: stated[k] for k in diffs})[:120]}, signed "
                     f"{str({k: signed.get(k) for k in diffs} if isinstance(signed, dict) else signed)[:120]}.")
    who = stated["publisher"]["name"] if stated["publisher"] else "no publisher"
    return (f"license {stated['license'] or 'not stated'}, {who}, {len(stated['authors'])} author(s) "
            "as signed")


# -- the checks (verify/checks.py lists them in order) ---------------------------------------

def structure(ctx: Context) -> str:
    """ro-crate-metadata.json is canonical strict JSON and a flat RO-Crate 1.2 graph."""
    detail, ctx.crate_graph = parse(ctx.file(layout.RO_CRATE_JSON))
    return detail


def files(ctx: Context) -> str:
    """The crate's File entities are the payload files with their sha256, size and format."""
    graph = ctx.need(ctx.crate_graph, "crate.graph")
    tree = ctx.bag()
    payload = tree.payload()
    return check_files(graph, {p: tree.files[p] for p in payload},
                       {p: tree.sha256(p) for p in payload})


def run(ctx: Context) -> str:
    """The crate's run reads the protocol and the inputs and produces every other file."""
    graph = ctx.need(ctx.crate_graph, "crate.graph")
    tree = ctx.bag()
    return check_run(graph, tree.payload(), ctx.doc(layout.RESOURCES_JSON),
                     ctx.doc(layout.ENVIRONMENT_JSON))


def signer(ctx: Context) -> str:
    """The crate names the key that signed the bag; datePublished equals Bagging-Date."""
    graph = ctx.need(ctx.crate_graph, "crate.graph")
    info = ctx.need(ctx.info, "bag.info")
    return check_signer(graph, ctx.need(ctx.signer_fingerprint, "signature.statement"),
                        info[layout.INFO_BAGGING_DATE])


def publication(ctx: Context) -> str:
    """The crate's licence, publisher and authors are those of the signed predicate."""
    graph = ctx.need(ctx.crate_graph, "crate.graph")
    return check_publication(graph, ctx.doc("predicate").get("publication"))


def regenerated(ctx: Context) -> str:
    """ro-crate-metadata.json is byte for byte the crate the verifier renders from the checked records."""
    data = ctx.file(layout.RO_CRATE_JSON)
    graph = ctx.need(ctx.crate_graph, "crate.graph")
    version = renderer.renderer(ctx)
    tree = ctx.bag()
    info = ctx.need(ctx.info, "bag.info")
    # The job's release is recorded nowhere but in the crate; like every record it is the
    # signer's statement, so it is the one value taken from the file under check.
    software = graph.get(SOFTWARE_ID, {}).get("version")
    if not isinstance(software, str):
        raise Failed(f"the crate's software {SOFTWARE_ID} states no version.")
    expected = crate_bytes(
        {p.removeprefix("data/"): Described.of(tree.files[p]) for p in tree.payload()},
        protocol=ctx.doc(layout.PROTOCOL_JSON), resources=ctx.doc(layout.RESOURCES_JSON),
        environment=ctx.doc(layout.ENVIRONMENT_JSON),
        signer_fingerprint=ctx.need(ctx.signer_fingerprint, "signature.statement"),
        date_published=info[layout.INFO_BAGGING_DATE], publication=ctx.doc("predicate")["publication"],
        software_version=software)
    if data != expected:
        found, want = loads_strict(data), loads_strict(expected)
        raise Failed(f"the crate is not the crate of these records (renderer {version}): "
                     f"{_first_entity_difference(found['@graph'], want['@graph'])}.")
    return (f"{len(data)} bytes, equal to the verifier's rendering from the records, the signer, "
            f"the Bagging-Date and the signed publication (renderer {version}, software {software})")


def _first_entity_difference(found: list[dict[str, Any]], expected: list[dict[str, Any]]) -> str:
    """The first entity, in graph order, that the crate states otherwise than the records give."""
    for n, (a, b) in enumerate(zip(found, expected, strict=False)):
        if a != b:
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            return (f"@graph[{n}] ({str(b.get('@id'))[:60]!r}) differs in {keys[:4]}: "
                    f"{str({k: a.get(k) for k in keys[:2]})[:120]}, the records give "
                    f"{str({k: b.get(k) for k in keys[:2]})[:120]}")
    return f"it has {len(found)} entities, the records give {len(expected)}"
