"""data/ro-crate-metadata.json from the payload (bundle/FORMAT.md "ro-crate-metadata.json"):
RO-Crate 1.2 metadata that describes the run as a process run.

The crate root is data/ (every @id of a payload file is relative to data/). The run is one
CreateAction: instrument = the job (name, version, commit, container image), object = the
inputs (the pre-registered protocol.json, the model and the dataset with their pins), result = every
other payload file. The signer's public key fingerprint is a PropertyValue the root mentions; the
licence, publisher, contact and authors are the root's (the signed predicate's `publication`).

No hashing cycle: the crate lists the size and sha256 of every payload file except itself and
environment.json (VOLATILE: its size varies between runs, and RO-Crate recommends a size for every
File; the bag manifests and the signature cover it), and no payload file holds the crate's hash.
Deterministic: the same payload (environment.json aside: only its git commit and image are read),
fingerprint, date, publication and software version give the same bytes.

The crate follows the Process Run Crate pattern (CreateAction, instrument, object, result) but does
not declare conformance to Process Run Crate 0.5: that profile is defined on RO-Crate 1.1, and
rocrate-validator then applies the 1.1 rules (descriptor conformsTo 1.1) to this 1.2 crate.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any, NamedTuple, Protocol

from bundle import layout
from bundle.canonical import dumps
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
from bundle.views import STATED_REVISION

SOFTWARE_URL = "https://calibration-runs.example/"
ORCID_PREFIX = "https://orcid.org/"
ROR_PREFIX = "https://ror.org/"


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


def _ref(i: str) -> dict[str, str]:
    return {"@id": i}


def _refs(ids: list[str]) -> dict[str, str] | list[dict[str, str]]:
    """One reference, or a list of them when there are several (RO-Crate 1.2: no singleton arrays)."""
    return _ref(ids[0]) if len(ids) == 1 else [_ref(i) for i in ids]


def schema_id(rel: str) -> str | None:
    """The $id of the schema the payload file `rel` (a name inside data/) follows, if any."""
    name = layout.PAYLOAD_SCHEMAS.get(f"{layout.DATA_DIR}/{rel}")
    return None if name is None else layout.schema_id_for(name)


def _input_entities(kind: str, repo: Mapping[str, Any]) -> list[dict[str, Any]]:
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
                       f"revision {repo['revision']}, source {repo['source']})."
                       + (f" The revision is the {STATED_REVISION}; no hub confirmed it."
                          if repo.get("revision_checked_by_hub") is False else ""),
        "version": repo["revision"], "hasPart": _refs([p["@id"] for p in parts]),
    }
    if hub:
        entity["url"] = f"{base}/tree/{repo['revision']}"
    return [entity, *parts]


def is_person(party: Mapping[str, Any], default: bool) -> bool:
    """An ORCID names a person, a ROR an organisation; otherwise `default` (a publisher is an
    organisation, an author a person)."""
    ident = party.get("id")
    if ident is not None and ident.startswith(ORCID_PREFIX):
        return True
    if ident is not None and ident.startswith(ROR_PREFIX):
        return False
    return default


def _party_entity(party: Mapping[str, Any], local_id: str, *, person: bool) -> dict[str, Any]:
    entity: dict[str, Any] = {"@id": party["id"] or local_id, "@type": PERSON if is_person(party, person)
                              else ORGANIZATION, "name": party["name"]}
    if party["id"] is not None and not is_person(party, person):
        entity["url"] = party["id"]
    return entity


def _publication_entities(publication: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The root's licence, publisher and author properties, and the entities they name."""
    license_url = publication["license"]
    publisher = _party_entity(publication["publisher"], PUBLISHER, person=False)
    props: dict[str, Any] = {"license": _ref(license_url), "publisher": _ref(publisher["@id"])}
    entities: dict[str, dict[str, Any]] = {
        license_url: {"@id": license_url, "@type": CREATIVE_WORK,
                      "name": license_name(license_url),
                      "description": "The licence of this bundle's files; the model and the "
                                     "dataset keep their own licences."},
        publisher["@id"]: publisher,
    }
    if publication["contact"] is not None:
        contact = f"mailto:{publication['contact']}"
        publisher["contactPoint"] = _ref(contact)
        entities[contact] = {"@id": contact, "@type": CONTACT_POINT, "name": f"Contact for {publisher['name']}",
                             "contactType": "publisher", "email": publication["contact"]}
    authors = [_party_entity(a, f"{AUTHOR_PREFIX}{n}", person=True)
               for n, a in enumerate(publication["authors"], start=1)]
    if publisher["@type"] == ORGANIZATION:  # authors write for the organisation that publishes
        for author in authors:
            if author["@type"] == PERSON:
                author["affiliation"] = _ref(publisher["@id"])
    if authors:
        props["author"] = _refs([a["@id"] for a in authors])
    for author in authors:  # an author who also publishes is one entity, the publisher's
        entities.setdefault(author["@id"], author)
    return props, list(entities.values())


class Described(NamedTuple):
    """What the crate states of one payload file: its size in bytes and its sha256 (hex)."""

    size: int
    sha256: str

    @classmethod
    def of(cls, data: bytes) -> Described:
        return cls(len(data), hashlib.sha256(data).hexdigest())


class FileFacts(Protocol):
    """A payload file's size and sha256: a Described, or a job.publishing.ledger.Written."""

    @property
    def size(self) -> int: ...

    @property
    def sha256(self) -> str: ...


def _file_entity(rel: str, facts: FileFacts) -> dict[str, Any]:
    entity: dict[str, Any] = {
        "@id": rel, "@type": FILE, "name": rel,
        "encodingFormat": MEDIA_TYPES.get(PurePosixPath(rel).suffix, "application/octet-stream"),
    }
    entity["contentSize"] = str(facts.size)
    entity["sha256"] = facts.sha256
    if rel in DESCRIPTIONS:
        entity["description"] = DESCRIPTIONS[rel]
    if (sid := schema_id(rel)) is not None:
        entity["conformsTo"] = _ref(sid)
    return entity


def described_files(payload: Mapping[str, FileFacts]) -> list[str]:
    """The files the crate describes, sorted: every payload file (names inside data/) except the
    crate itself and the files that vary between runs (VOLATILE)."""
    return sorted(rel for rel in payload if rel != DESCRIPTOR and rel not in VOLATILE)


def crate_document(payload: Mapping[str, FileFacts], *, protocol: Mapping[str, Any], resources: Mapping[str, Any],
                   environment: Mapping[str, Any], signer_fingerprint: str | None, date_published: str,
                   publication: Mapping[str, Any], software_version: str) -> dict[str, Any]:
    """The crate of a payload.

    payload: name inside data/ -> size and sha256 of every payload file (Described.of(bytes), or
    the job.publishing.ledger.Written of the file as written; the crate itself, if present, and
    environment.json are left out of the description); protocol, resources, environment: the
    parsed protocol.json, resources.json and environment.json; date_published: YYYY-MM-DD, the
    Bagging-Date; publication: the signed predicate's shape (`license` URL, `publisher` and
    `authors` as {"name", "id"}, `contact` e-mail or None); software_version: the job's release."""
    credits, credited = _publication_entities(publication)
    files = described_files(payload)
    protocol_sha256 = payload[data_name(layout.PROTOCOL_JSON)].sha256

    graph: list[dict[str, Any]] = [{
        "@id": DESCRIPTOR, "@type": CREATIVE_WORK, "conformsTo": _ref(PROFILE), "about": _ref(ROOT),
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
    graph += [_file_entity(rel, payload[rel]) for rel in files]
    for sid in sorted({e for rel in files if (e := schema_id(rel)) is not None}):
        graph.append({"@id": sid, "@type": CREATIVE_WORK, "name": f"JSON Schema {sid[len(layout.SCHEMA_ID_PREFIX):]}",
                      "encodingFormat": "application/schema+json"})

    software: dict[str, Any] = {
        "@id": SOFTWARE_ID, "@type": SOFTWARE_APPLICATION, "name": "calibration-runs",
        "version": software_version, "url": SOFTWARE_URL,
        "description": "The calibration job (python -m job run) that wrote this payload.",
    }
    extra: list[dict[str, Any]] = []
    if environment.get("git_commit"):
        software["identifier"] = _ref(SOFTWARE_COMMIT)
        extra.append({"@id": SOFTWARE_COMMIT, "@type": PROPERTY_VALUE, "name": "git commit",
                      "propertyID": "git commit", "value": environment["git_commit"]})
    if environment.get("image"):
        software["additionalProperty"] = _ref(CONTAINER_IMAGE)
        extra.append({"@id": CONTAINER_IMAGE, "@type": PROPERTY_VALUE, "name": "container image",
                      "propertyID": "CALIBRATION_IMAGE", "value": environment["image"]})
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


def crate_bytes(payload: Mapping[str, FileFacts], *, protocol: Mapping[str, Any], resources: Mapping[str, Any],
                environment: Mapping[str, Any], signer_fingerprint: str | None, date_published: str,
                publication: Mapping[str, Any], software_version: str) -> bytes:
    """Canonical JSON bytes of crate_document(...): the file ro-crate-metadata.json."""
    return dumps(crate_document(payload, protocol=protocol, resources=resources, environment=environment,
                                signer_fingerprint=signer_fingerprint, date_published=date_published,
                                publication=publication, software_version=software_version))
