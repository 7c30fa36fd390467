"""The in-toto Statement v1 a bundle signs, and the predicate it carries (FORMAT.md "Statement")."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bundle import layout
from bundle.canonical import dumps, loads_strict
from bundle.crate_graph import entities, stated_publication
from bundle.errors import BundleError
from bundle.layout import PREDICATE_TYPE, STATEMENT_TYPE
from bundle.schemas import schema_id, schema_sha256, validate

__all__ = [
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "build_statement",
    "predicate_from_payload",
    "schemas_map",
    "statement_bytes",
]

_HEADLINE = ("accuracy", "nll", "brier", "ece", "mce")


def build_statement(subjects: Mapping[str, str], predicate: Mapping[str, Any]) -> dict[str, Any]:
    """Statement over `subjects` (payload path -> sha256 hex), sorted by name; schema-checked."""
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": name, "digest": {"sha256": subjects[name]}} for name in sorted(subjects)
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": dict(predicate),
    }
    validate(statement["predicate"], "predicate", source="The predicate")
    validate(statement, "statement", source="The statement")
    return statement


def schemas_map(payload_paths: list[str]) -> dict[str, dict[str, str]]:
    """{payload path: {"id", "sha256"}} for every payload file whose schema is known."""
    return {
        path: {"id": schema_id(name), "sha256": schema_sha256(name)}
        for path, name in sorted(layout.PAYLOAD_SCHEMAS.items())
        if path in payload_paths
    }


def _read(bag: Path, rel: str) -> bytes:
    try:
        return (bag / rel).read_bytes()
    except OSError as exc:
        raise BundleError(
            f"Cannot read {rel} in {bag} ({exc.strerror}); the payload is "
            "incomplete, so re-run the job."
        ) from exc


def publication_from_crate(crate: Mapping[str, Any]) -> dict[str, Any]:
    """The predicate's `publication`: the licence, publisher, authors and contact the crate's
    root states (FORMAT.md "Predicate"), read as every reader of the format reads them
    (bundle.crate_graph.stated_publication); null or empty where it states none."""
    return stated_publication(entities(crate))


def predicate_from_payload(bag: Path) -> dict[str, Any]:
    """The predicate restated from the payload files, without `schemas` and `signer_fingerprint`.

    `format` is the format this code writes; `publication` restates the crate's root, so the
    crate must be written first. The job may sign it as is; a verifier recomputes it from the
    payload and compares.
    """
    bag = Path(bag)
    protocol_sha256 = hashlib.sha256(_read(bag, layout.PROTOCOL_JSON)).hexdigest()
    resources = loads_strict(_read(bag, layout.RESOURCES_JSON), source=layout.RESOURCES_JSON)
    temperature_raw = _read(bag, layout.TEMPERATURE_JSON)
    temperature = loads_strict(temperature_raw, source=layout.TEMPERATURE_JSON)
    metrics = loads_strict(_read(bag, layout.METRICS_JSON), source=layout.METRICS_JSON)
    validate(resources, "resources", source=layout.RESOURCES_JSON)
    validate(temperature, "temperature", source=layout.TEMPERATURE_JSON)
    validate(metrics, "metrics", source=layout.METRICS_JSON)
    crate = loads_strict(_read(bag, layout.RO_CRATE_JSON), source=layout.RO_CRATE_JSON)
    audit = metrics["pools"]["audit"]
    return {
        "format": {"version": layout.FORMAT_VERSION, "oldest_verifier": layout.OLDEST_VERIFIER},
        "protocol_sha256": protocol_sha256,
        "profile": resources["profile"],
        "resources": {
            part: {
                "repo_id": resources[part]["repo_id"],
                "revision": resources[part]["revision"],
                "source": resources[part]["source"],
                "files": [
                    {k: f[k] for k in ("path", "sha256", "pinned_sha256", "pin", "matches_pin")}
                    for f in resources[part]["files"]
                ],
            }
            for part in ("model", "dataset")
        },
        "temperature": {
            "temperature": temperature["temperature"],
            "beta": temperature["beta"],
            "boundary": temperature["boundary"],
            "sha256": hashlib.sha256(temperature_raw).hexdigest(),
        },
        "audit": {
            "n": audit["raw"]["n"],
            "raw": {k: audit["raw"][k] for k in _HEADLINE},
            "calibrated": {k: audit["calibrated"][k] for k in _HEADLINE},
        },
        "publication": publication_from_crate(crate),
    }


def statement_bytes(statement: Mapping[str, Any]) -> bytes:
    """The canonical JSON bytes that are signed."""
    return dumps(statement, source="The statement")
