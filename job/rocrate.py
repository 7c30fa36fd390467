"""data/ro-crate-metadata.json: RO-Crate 1.2 metadata that describes the run as a process run.

The crate root is data/ (every @id of a payload file is relative to data/). The run is one
CreateAction: instrument = this software (name, version, commit, container image), object = the
inputs (the pre-registered protocol.json, the model and the dataset with their pins), result = every
other payload file. The signer's public key fingerprint is a PropertyValue the root mentions.

No hashing cycle: the crate lists the size and sha256 of every payload file except itself and
environment.json, and no payload file holds the crate's hash. Write it last, after every other file
in data/. Deterministic: the same payload (environment.json aside: only its git commit and image
are read), fingerprint, date and publication give the same bytes; times are left to
environment.json. environment.json is not a data entity of the crate: RO-Crate recommends a size
for every File, and its size varies between runs; the bag manifests and the signature cover it.

Who publishes the bundle, under which licence and by whom it was written (Publication) is stated
on the root; the signed predicate restates it (bundle.statement.predicate_from_payload).

The crate follows the Process Run Crate pattern (CreateAction, instrument, object, result) but does
not declare conformance to Process Run Crate 0.5: that profile is defined on RO-Crate 1.1, and
rocrate-validator then applies the 1.1 rules (descriptor conformsTo 1.1) to this 1.2 crate.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundle import layout
from bundle.canonical import dumps, loads_strict
from bundle.crate_terms import (
    AUTHOR_PREFIX,
    CONTACT_POINT,
    CONTAINER_IMAGE,
    CONTEXT,
    CREATE_ACTION,
    CREATIVE_WORK,
    DATASET,
    DESCRIPTOR,
    FILE,
    FINGERPRINT_PROPERTY,
    INPUT_FILES,
    INPUTS,
    MEDIA_TYPES,
    ORGANIZATION,
    PERSON,
    PROFILE,
    PROFILE_TYPE,
    PROFILE_VERSION,
    PROPERTY_VALUE,
    PUBLISHER,
    ROOT,
    RUN,
    SIGNER_KEY,
    SOFTWARE_APPLICATION,
    SOFTWARE_COMMIT,
    SOFTWARE_ID,
    VOLATILE,
)
from bundle.layout import data_name
from job import __version__
from job.errors import JobError

CRATE = DESCRIPTOR
"""The crate's name inside data/."""
SOFTWARE_URL = "https://calibration-runs.example/"

ORCID_PREFIX = "https://orcid.org/"
ROR_PREFIX = "https://ror.org/"
DEFAULT_LICENSE = "https://spdx.org/licenses/CC-BY-4.0"
DEFAULT_PUBLISHER = f"calibration-runs <{SOFTWARE_URL}>"
_URL = re.compile(r"https?://[^\s/<>]+/[^\s<>]*")
_PARTY = re.compile(r"(?P<name>[^<>]+?)(?: <(?P<id>[^<>]+)>)?")
_EMAIL = re.compile(r"[^\s@<>]+@[^\s@<>]+\.[^\s@<>]+")
_NAME_MAX = 200


@dataclass(frozen=True)
class Party:
    """A publisher or an author: a name and, when known, an identifying URL (ROR for an
    organisation, ORCID for a person, or a home page)."""

    name: str
    id: str | None = None

    @classmethod
    def parse(cls, option: str, text: str) -> Party:
        """`NAME` or `NAME <URL>` (as git writes `Name <email>`); JobError when malformed."""
        m = _PARTY.fullmatch(text)
        name = m.group("name") if m else ""
        if not m or name != name.strip() or len(name) > _NAME_MAX or not name.isprintable() \
                or (m.group("id") is not None and not _URL.fullmatch(m.group("id"))):
            raise JobError(f"{option} {text[:80]!r} is not `NAME` or `NAME <URL>`; pass e.g. "
                           f"{option} 'Ada Lovelace <https://orcid.org/0000-0002-1825-0097>'.")
        return cls(name, m.group("id"))

    def is_person(self, default: bool) -> bool:
        """An ORCID names a person, a ROR an organisation; otherwise `default`."""
        if self.id is not None and self.id.startswith(ORCID_PREFIX):
            return True
        if self.id is not None and self.id.startswith(ROR_PREFIX):
            return False
        return default


DEFAULT_PUBLISHER_PARTY = Party.parse("--publisher", DEFAULT_PUBLISHER)


@dataclass(frozen=True)
class Publication:
    """Under which licence a bundle is published, by whom, who wrote it and whom to contact: the
    root's `license`, `publisher` (with `contactPoint`) and `author` (affiliated with the
    publisher when it is an organisation). Invalid values raise JobError, one sentence for the
    user. The crate meets RO-Crate's recommendations when the publisher has a ROR or ORCID
    identifier, a contact is given and every author has an ORCID."""

    license: str = DEFAULT_LICENSE  # an absolute http(s) URL, ideally SPDX's
    publisher: Party = DEFAULT_PUBLISHER_PARTY
    authors: tuple[Party, ...] = ()  # in the order given; none is stated when empty
    contact: str | None = None  # the publisher's e-mail address

    def __post_init__(self) -> None:
        if not _URL.fullmatch(self.license):
            raise JobError(f"--license {self.license[:80]!r} is not an absolute http(s) URL; pass the "
                           f"licence's SPDX URL, e.g. {DEFAULT_LICENSE}.")
        if self.contact is not None and not _EMAIL.fullmatch(self.contact):
            raise JobError(f"--contact {self.contact[:80]!r} is not an e-mail address; pass one like "
                           "calibration@example.org.")
        names = {p.id: p.name for p in (self.publisher, *self.authors) if p.id is not None}
        for party in (self.publisher, *self.authors):
            if party.id is not None and names[party.id] != party.name:
                raise JobError(f"{party.id} is given with two names ({names[party.id]!r} and "
                               f"{party.name!r}); give one identifier one name.")


def license_name(url: str) -> str:
    """The licence's short name: the SPDX identifier of an spdx.org URL, else the URL."""
    m = re.fullmatch(r"https?://spdx\.org/licenses/([A-Za-z0-9.+-]+?)(?:\.html|\.json)?", url)
    return m.group(1) if m else url


def _folder(path: str) -> str:
    """The crate @id of the folder inside data/ that holds payload file `path` ("predictions/")."""
    return data_name(path).rsplit("/", 1)[0] + "/"


DESCRIPTIONS = {data_name(path): text for path, text in {
    layout.PROTOCOL_JSON: "The pre-registered protocol, byte for byte (its sha256 is the protocol's identity).",
    layout.RESOURCES_JSON: ("The model and dataset files actually used, their hashes and whether they match "
                            "the pins."),
    layout.POOLS_JSON: "Identity manifests of the explore, calibration and audit pools.",
    layout.CALIBRATION_PREDICTIONS: "Calibration-pool logits, probabilities and labels.",
    layout.AUDIT_PREDICTIONS: "Audit-pool logits, probabilities and labels.",
    layout.TEMPERATURE_JSON: "The fitted temperature.",
    layout.TRAJECTORY_JSON: "Every bisection step of the fit.",
    layout.METRICS_JSON: "Raw and calibrated metrics of the audit pool (evidence) and the calibration pool.",
    layout.STAGES_JSON: "What each stage consumed and produced, by sha256.",
    layout.BOOTSTRAP_JSON: "Pre-registered paired bootstrap intervals of the calibrated-minus-raw change.",
    layout.STABILITY_JSON: "Pre-registered, descriptive calibration-size study.",
    layout.REPORT_MD: "The run explained for a reader, generated from these files.",
    layout.RELIABILITY_FIGURE: "Reliability diagrams of the audit pool, raw and calibrated.",
    layout.CONFIDENCE_FIGURE: "Histogram of top-label confidence on the audit pool.",
}.items()}
DIR_DESCRIPTIONS = {
    _folder(layout.CALIBRATION_PREDICTIONS): "Per-pool predictions (Parquet).",
    _folder(layout.RELIABILITY_FIGURE): "Figures rendered from the metrics and the audit predictions.",
}


def _read(data_dir: Path, path: str) -> Any:
    """The parsed JSON payload file `path` (a layout name) of data_dir."""
    return loads_strict((data_dir / data_name(path)).read_bytes(), source=path)


def _ref(i: str) -> dict[str, str]:
    return {"@id": i}


def _refs(ids: list[str]) -> dict[str, str] | list[dict[str, str]]:
    """One reference, or a list of them when there are several (RO-Crate 1.2: no singleton arrays)."""
    return _ref(ids[0]) if len(ids) == 1 else [_ref(i) for i in ids]


def payload_files(data_dir: Path) -> list[str]:
    """The files the crate describes: every regular file under data_dir except the crate itself
    and the files that vary between runs (VOLATILE), POSIX paths, sorted."""
    return sorted(rel for p in data_dir.rglob("*")
                  if p.is_file() and (rel := p.relative_to(data_dir).as_posix()) != CRATE
                  and rel not in VOLATILE)


def schema_id(rel: str) -> str | None:
    """The $id of the schema the payload file `rel` (a name inside data/) follows, if any."""
    name = layout.PAYLOAD_SCHEMAS.get(f"{layout.DATA_DIR}/{rel}")
    return None if name is None else layout.schema_id_for(name)


def _file_entity(data_dir: Path, rel: str) -> dict[str, Any]:
    entity: dict[str, Any] = {
        "@id": rel, "@type": FILE, "name": rel,
        "encodingFormat": MEDIA_TYPES.get(Path(rel).suffix, "application/octet-stream"),
    }
    data = (data_dir / rel).read_bytes()
    entity["contentSize"] = str(len(data))
    entity["sha256"] = hashlib.sha256(data).hexdigest()
    if rel in DESCRIPTIONS:
        entity["description"] = DESCRIPTIONS[rel]
    if (sid := schema_id(rel)) is not None:
        entity["conformsTo"] = _ref(sid)
    return entity


def _input_entities(kind: str, repo: dict[str, Any]) -> list[dict[str, Any]]:
    """The model or dataset the run read, as a contextual entity with one part per file."""
    rid = INPUTS[kind]
    hub = repo["source"] == "hub"
    base = f"https://huggingface.co/{'datasets/' if kind == 'dataset' else ''}{repo['repo_id']}"
    parts = []
    for f in repo["files"]:
        part: dict[str, Any] = {
            "@id": f"{rid}/{f['path']}", "@type": CREATIVE_WORK, "name": f["path"],
            "contentSize": str(f["size"]), "sha256": f["sha256"],
            "description": (f"pin: {f['pin']}; pinned sha256: {f['pinned_sha256'] or 'none'}; "
                            f"matches pin: {'yes' if f['matches_pin'] else 'no'}"),
        }
        if hub:
            part["url"] = f"{base}/resolve/{repo['revision']}/{f['path']}"
        parts.append(part)
    entity: dict[str, Any] = {
        "@id": rid, "@type": CREATIVE_WORK, "name": f"{repo['repo_id']}@{repo['revision']}",
        "description": f"The {kind} read by the run ({repo['repo_type']} repository {repo['repo_id']}, "
                       f"revision {repo['revision']}, source {repo['source']}).",
        "version": repo["revision"], "hasPart": _refs([p["@id"] for p in parts]),
    }
    if hub:
        entity["url"] = f"{base}/tree/{repo['revision']}"
    return [entity, *parts]


def _party_entity(party: Party, local_id: str, *, person: bool) -> dict[str, Any]:
    entity: dict[str, Any] = {"@id": party.id or local_id, "@type": PERSON if party.is_person(person)
                              else ORGANIZATION, "name": party.name}
    if party.id is not None and not party.is_person(person):
        entity["url"] = party.id
    return entity


def _publication_entities(publication: Publication) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The root's licence, publisher and author properties, and the entities they name."""
    publisher = _party_entity(publication.publisher, PUBLISHER, person=False)
    props: dict[str, Any] = {"license": _ref(publication.license), "publisher": _ref(publisher["@id"])}
    entities: dict[str, dict[str, Any]] = {
        publication.license: {"@id": publication.license, "@type": CREATIVE_WORK,
                              "name": license_name(publication.license),
                              "description": "The licence of this bundle's files; the model and the "
                                             "dataset keep their own licences."},
        publisher["@id"]: publisher,
    }
    if publication.contact is not None:
        contact = f"mailto:{publication.contact}"
        publisher["contactPoint"] = _ref(contact)
        entities[contact] = {"@id": contact, "@type": CONTACT_POINT, "name": f"Contact for {publisher['name']}",
                             "contactType": "publisher", "email": publication.contact}
    authors = [_party_entity(a, f"{AUTHOR_PREFIX}{n}", person=True)
               for n, a in enumerate(publication.authors, start=1)]
    if publisher["@type"] == ORGANIZATION:  # authors write for the organisation that publishes
        for author in authors:
            if author["@type"] == PERSON:
                author["affiliation"] = _ref(publisher["@id"])
    if authors:
        props["author"] = _refs([a["@id"] for a in authors])
    for author in authors:  # an author who also publishes is one entity, the publisher's
        entities.setdefault(author["@id"], author)
    return props, list(entities.values())


def crate_metadata(data_dir: Path, *, signer_fingerprint: str | None, date_published: str,
                   publication: Publication | None = None) -> dict[str, Any]:
    """The crate for the payload in data_dir, describing every file except the crate itself and
    environment.json.

    date_published: YYYY-MM-DD (use bundle.bag.bagging_date() so that it equals Bagging-Date).
    publication: licence, publisher and authors (default: Publication())."""
    credits, credited = _publication_entities(publication or Publication())
    files = payload_files(data_dir)
    protocol_raw = (data_dir / data_name(layout.PROTOCOL_JSON)).read_bytes()
    protocol = loads_strict(protocol_raw, source=layout.PROTOCOL_JSON)
    resources = _read(data_dir, layout.RESOURCES_JSON)
    env = _read(data_dir, layout.ENVIRONMENT_JSON)
    protocol_sha256 = hashlib.sha256(protocol_raw).hexdigest()

    graph: list[dict[str, Any]] = [{
        "@id": CRATE, "@type": CREATIVE_WORK, "conformsTo": _ref(PROFILE), "about": _ref(ROOT),
    }]
    dirs = sorted({rel.rsplit("/", 1)[0] + "/" for rel in files if "/" in rel})
    top = [rel for rel in files if "/" not in rel] + dirs
    root: dict[str, Any] = {
        "@id": ROOT, "@type": DATASET,
        "name": f"Temperature-scaling calibration run: {protocol['name']}",
        "description": (f"A signed calibration bundle's payload: one temperature fitted on a "
                        f"calibration pool and audited on a separate pool under the pre-registered "
                        f"protocol {protocol_sha256} (profile {resources['profile']}). "
                        f"Question: {protocol['question']}"),
        "datePublished": date_published,
        **credits,
        "conformsTo": _ref(PROFILE),
        "hasPart": _refs(top),
        "mentions": _refs([RUN] + ([SIGNER_KEY] if signer_fingerprint else [])),
    }
    graph.append(root)
    graph += [
        {"@id": PROFILE, "@type": [CREATIVE_WORK, PROFILE_TYPE], "name": "RO-Crate", "version": PROFILE_VERSION},
    ]
    graph += credited
    for d in dirs:
        graph.append({"@id": d, "@type": DATASET, "name": d.rstrip("/"),
                      "description": DIR_DESCRIPTIONS.get(d, f"The files under {d}."),
                      "hasPart": _refs([r for r in files if r.startswith(d)])})
    graph += [_file_entity(data_dir, rel) for rel in files]
    for sid in sorted({e for rel in files if (e := schema_id(rel)) is not None}):
        graph.append({"@id": sid, "@type": CREATIVE_WORK, "name": f"JSON Schema {sid[len(layout.SCHEMA_ID_PREFIX):]}",
                      "encodingFormat": "application/schema+json"})

    software: dict[str, Any] = {
        "@id": SOFTWARE_ID, "@type": SOFTWARE_APPLICATION, "name": "calibration-runs",
        "version": __version__, "url": SOFTWARE_URL,
        "description": "The calibration job (python -m job run) that wrote this payload.",
    }
    extra: list[dict[str, Any]] = []
    if env.get("git_commit"):
        software["identifier"] = _ref(SOFTWARE_COMMIT)
        extra.append({"@id": SOFTWARE_COMMIT, "@type": PROPERTY_VALUE, "name": "git commit",
                      "propertyID": "git commit", "value": env["git_commit"]})
    if env.get("image"):
        software["additionalProperty"] = _ref(CONTAINER_IMAGE)
        extra.append({"@id": CONTAINER_IMAGE, "@type": PROPERTY_VALUE, "name": "container image",
                      "propertyID": "CALIBRATION_IMAGE", "value": env["image"]})
    graph += [software, *extra]

    inputs = [*_input_entities("model", resources["model"]), *_input_entities("dataset", resources["dataset"])]
    graph += inputs
    action: dict[str, Any] = {
        "@id": RUN, "@type": CREATE_ACTION,
        "name": f"Calibration run under protocol {protocol_sha256[:16]}",
        "description": "Split, calibration-pool inference, temperature fit, audit-pool inference, "
                       "metrics and the derived files, as the protocol orders them; start and end "
                       "of each stage are in environment.json.",
        "instrument": _ref(SOFTWARE_ID),
        "object": [_ref(r) for r in INPUT_FILES] + [_ref(INPUTS["model"]), _ref(INPUTS["dataset"])],
        "result": _refs([r for r in files if r not in INPUT_FILES]),
    }
    graph.append(action)
    if signer_fingerprint:
        graph.append({
            "@id": SIGNER_KEY, "@type": PROPERTY_VALUE, "name": "signer public key fingerprint",
            "propertyID": FINGERPRINT_PROPERTY, "value": signer_fingerprint,
            "description": "sha256 hex of the raw 32-byte Ed25519 public key that signs this bundle "
                           "(signer.pub.pem and the DSSE keyid, next to data/).",
        })
    return {"@context": CONTEXT, "@graph": graph}


def crate_bytes(data_dir: Path, *, signer_fingerprint: str | None, date_published: str,
                publication: Publication | None = None) -> bytes:
    """Canonical JSON bytes of crate_metadata(...), for Artifacts.write_bytes(CRATE, ...)."""
    return dumps(crate_metadata(data_dir, signer_fingerprint=signer_fingerprint,
                                date_published=date_published, publication=publication))
