"""data/ro-crate-metadata.json: RO-Crate 1.2 metadata that describes the run as a process run.

The crate root is data/ (every @id of a payload file is relative to data/). The run is one
CreateAction: instrument = this software (name, version, commit, container image), object = the
inputs (the pre-registered protocol.json, the model and the dataset with their pins), result = every
other payload file. The signer's public key fingerprint is a PropertyValue the root mentions.

No hashing cycle: the crate lists the sha256 of every payload file except itself and
environment.json, and no payload file holds the crate's hash. Write it last, after every other file
in data/. Deterministic: the same payload (environment.json aside: only its git commit and image
are read), fingerprint and date give the same bytes; times are left to environment.json.

The crate follows the Process Run Crate pattern (CreateAction, instrument, object, result) but does
not declare conformance to Process Run Crate 0.5: that profile is defined on RO-Crate 1.1, and
rocrate-validator then applies the 1.1 rules (descriptor conformsTo 1.1) to this 1.2 crate.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from bundle.canonical import dumps, loads_strict
from job import __version__

CRATE = "ro-crate-metadata.json"
RO_CRATE = "https://w3id.org/ro/crate/1.2"
CONTEXT = "https://w3id.org/ro/crate/1.2/context"
SOFTWARE_ID = "https://calibration-runs.example/software/calibration-runs"
SOFTWARE_URL = "https://calibration-runs.example/"
SCHEMA_PREFIX = "https://calibration-runs.example/schemas/"
SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"
FINGERPRINT_PROPERTY = "https://calibration-runs.example/terms/ed25519-public-key-sha256"
NO_LICENSE = "#license-not-stated"

MEDIA_TYPES = {".json": "application/json", ".parquet": "application/vnd.apache.parquet",
               ".png": "image/png", ".md": "text/markdown"}
DESCRIPTIONS = {
    "protocol.json": "The pre-registered protocol, byte for byte (its sha256 is the protocol's identity).",
    "resources.json": "The model and dataset files actually used, their hashes and whether they match the pins.",
    "pools.json": "Identity manifests of the explore, calibration and audit pools.",
    "predictions/calibration.parquet": "Calibration-pool logits, probabilities and labels.",
    "predictions/audit.parquet": "Audit-pool logits, probabilities and labels.",
    "temperature.json": "The fitted temperature.",
    "trajectory.json": "Every bisection step of the fit.",
    "metrics.json": "Raw and calibrated metrics of the audit pool (evidence) and the calibration pool.",
    "stages.json": "What each stage consumed and produced, by sha256.",
    "environment.json": ("Machine, versions, threads, stage timings and peak memory of the run; it "
                         "varies between runs, so its size and hash are only in the bag manifests."),
    "bootstrap.json": "Pre-registered paired bootstrap intervals of the calibrated-minus-raw change.",
    "stability.json": "Pre-registered, descriptive calibration-size study.",
    "report.md": "The run explained for a reader, generated from these files.",
    "figures/reliability-audit.png": "Reliability diagrams of the audit pool, raw and calibrated.",
    "figures/confidence-audit.png": "Histogram of top-label confidence on the audit pool.",
}
DIR_DESCRIPTIONS = {"predictions/": "Per-pool predictions (Parquet).",
                    "figures/": "Figures rendered from the metrics and the audit predictions."}
INPUTS = ("protocol.json",)
VOLATILE = frozenset({"environment.json"})
"""Files that differ between two runs on the same inputs: listed without size or hash (the bag
manifests hash them), so that the crate itself stays byte-identical between such runs."""


def _ref(i: str) -> dict[str, str]:
    return {"@id": i}


def _refs(ids: list[str]) -> dict[str, str] | list[dict[str, str]]:
    """One reference, or a list of them when there are several (RO-Crate 1.2: no singleton arrays)."""
    return _ref(ids[0]) if len(ids) == 1 else [_ref(i) for i in ids]


def payload_files(data_dir: Path) -> list[str]:
    """Every regular file under data_dir except the crate itself, POSIX paths, sorted."""
    return sorted(p.relative_to(data_dir).as_posix() for p in data_dir.rglob("*")
                  if p.is_file() and p.relative_to(data_dir).as_posix() != CRATE)


def schema_id(rel: str) -> str | None:
    """The $id of the schema a JSON payload file follows (schemas/<stem>.schema.json), if any."""
    if not rel.endswith(".json") or "/" in rel:
        return None
    stem = rel[: -len(".json")]
    return f"{SCHEMA_PREFIX}{stem}/v1" if (SCHEMA_DIR / f"{stem}.schema.json").is_file() else None


def _file_entity(data_dir: Path, rel: str) -> dict[str, Any]:
    entity: dict[str, Any] = {
        "@id": rel, "@type": "File", "name": rel,
        "encodingFormat": MEDIA_TYPES.get(Path(rel).suffix, "application/octet-stream"),
    }
    if rel not in VOLATILE:
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
    rid = f"#input-{kind}"
    hub = repo["source"] == "hub"
    base = f"https://huggingface.co/{'datasets/' if kind == 'dataset' else ''}{repo['repo_id']}"
    parts = []
    for f in repo["files"]:
        part: dict[str, Any] = {
            "@id": f"{rid}/{f['path']}", "@type": "CreativeWork", "name": f["path"],
            "contentSize": str(f["size"]), "sha256": f["sha256"],
            "description": (f"pin: {f['pin']}; pinned sha256: {f['pinned_sha256'] or 'none'}; "
                            f"matches pin: {'yes' if f['matches_pin'] else 'no'}"),
        }
        if hub:
            part["url"] = f"{base}/resolve/{repo['revision']}/{f['path']}"
        parts.append(part)
    entity: dict[str, Any] = {
        "@id": rid, "@type": "CreativeWork", "name": f"{repo['repo_id']}@{repo['revision']}",
        "description": f"The {kind} read by the run ({repo['repo_type']} repository {repo['repo_id']}, "
                       f"revision {repo['revision']}, source {repo['source']}).",
        "version": repo["revision"], "hasPart": _refs([p["@id"] for p in parts]),
    }
    if hub:
        entity["url"] = f"{base}/tree/{repo['revision']}"
    return [entity, *parts]


def crate_metadata(data_dir: Path, *, signer_fingerprint: str | None, date_published: str,
                   license_id: str | None = None) -> dict[str, Any]:
    """The crate for the payload in data_dir, describing every file except the crate itself.

    date_published: YYYY-MM-DD (use bundle.bag.bagging_date() so that it equals Bagging-Date).
    license_id: @id of the bundle's license (e.g. an SPDX URL); None says "not stated"."""
    files = payload_files(data_dir)
    protocol = loads_strict((data_dir / "protocol.json").read_bytes(), source="protocol.json")
    resources = loads_strict((data_dir / "resources.json").read_bytes(), source="resources.json")
    env = loads_strict((data_dir / "environment.json").read_bytes(), source="environment.json")
    protocol_sha256 = hashlib.sha256((data_dir / "protocol.json").read_bytes()).hexdigest()

    graph: list[dict[str, Any]] = [{
        "@id": CRATE, "@type": "CreativeWork", "conformsTo": _ref(RO_CRATE), "about": _ref("./"),
    }]
    dirs = sorted({rel.rsplit("/", 1)[0] + "/" for rel in files if "/" in rel})
    top = [rel for rel in files if "/" not in rel] + dirs
    root: dict[str, Any] = {
        "@id": "./", "@type": "Dataset",
        "name": f"Temperature-scaling calibration run: {protocol['name']}",
        "description": (f"A signed calibration bundle's payload: one temperature fitted on a "
                        f"calibration pool and audited on a separate pool under the pre-registered "
                        f"protocol {protocol_sha256} (profile {resources['profile']}). "
                        f"Question: {protocol['question']}"),
        "datePublished": date_published,
        "license": _ref(license_id or NO_LICENSE),
        "conformsTo": _ref(RO_CRATE),
        "hasPart": _refs(top),
        "mentions": _refs(["#run"] + (["#signer-key"] if signer_fingerprint else [])),
    }
    graph.append(root)
    graph += [
        {"@id": RO_CRATE, "@type": ["CreativeWork", "Profile"], "name": "RO-Crate", "version": "1.2"},
    ]
    if license_id is None:
        graph.append({"@id": NO_LICENSE, "@type": "CreativeWork", "name": "No license stated",
                      "description": "The publisher of this bundle has not stated a license; the "
                                     "model and the dataset keep their own licenses."})
    for d in dirs:
        graph.append({"@id": d, "@type": "Dataset", "name": d.rstrip("/"),
                      "description": DIR_DESCRIPTIONS.get(d, f"The files under {d}."),
                      "hasPart": _refs([r for r in files if r.startswith(d)])})
    graph += [_file_entity(data_dir, rel) for rel in files]
    for sid in sorted({e for rel in files if (e := schema_id(rel)) is not None}):
        graph.append({"@id": sid, "@type": "CreativeWork", "name": f"JSON Schema {sid[len(SCHEMA_PREFIX):]}",
                      "encodingFormat": "application/schema+json"})

    software: dict[str, Any] = {
        "@id": SOFTWARE_ID, "@type": "SoftwareApplication", "name": "calibration-runs",
        "version": __version__, "url": SOFTWARE_URL,
        "description": "The calibration job (python -m job run) that wrote this payload.",
    }
    extra: list[dict[str, Any]] = []
    if env.get("git_commit"):
        software["identifier"] = _ref("#software-commit")
        extra.append({"@id": "#software-commit", "@type": "PropertyValue", "name": "git commit",
                      "propertyID": "git commit", "value": env["git_commit"]})
    if env.get("image"):
        software["additionalProperty"] = _ref("#container-image")
        extra.append({"@id": "#container-image", "@type": "PropertyValue", "name": "container image",
                      "propertyID": "CALIBRATION_IMAGE", "value": env["image"]})
    graph += [software, *extra]

    inputs = [*_input_entities("model", resources["model"]), *_input_entities("dataset", resources["dataset"])]
    graph += inputs
    action: dict[str, Any] = {
        "@id": "#run", "@type": "CreateAction",
        "name": f"Calibration run under protocol {protocol_sha256[:16]}",
        "description": "Split, calibration-pool inference, temperature fit, audit-pool inference, "
                       "metrics and the derived files, as the protocol orders them; start and end "
                       "of each stage are in environment.json.",
        "instrument": _ref(SOFTWARE_ID),
        "object": [_ref(r) for r in INPUTS] + [_ref("#input-model"), _ref("#input-dataset")],
        "result": _refs([r for r in files if r not in INPUTS]),
    }
    graph.append(action)
    if signer_fingerprint:
        graph.append({
            "@id": "#signer-key", "@type": "PropertyValue", "name": "signer public key fingerprint",
            "propertyID": FINGERPRINT_PROPERTY, "value": signer_fingerprint,
            "description": "sha256 hex of the raw 32-byte Ed25519 public key that signs this bundle "
                           "(signer.pub.pem and the DSSE keyid, next to data/).",
        })
    return {"@context": CONTEXT, "@graph": graph}


def crate_bytes(data_dir: Path, *, signer_fingerprint: str | None, date_published: str,
                license_id: str | None = None) -> bytes:
    """Canonical JSON bytes of crate_metadata(...), for Artifacts.write_bytes(CRATE, ...)."""
    return dumps(crate_metadata(data_dir, signer_fingerprint=signer_fingerprint,
                                date_published=date_published, license_id=license_id))
