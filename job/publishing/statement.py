"""The in-toto Statement v1 a bundle signs, and the predicate it carries (FORMAT.md "Statement")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bundle import layout
from bundle.canonical import dumps
from bundle.layout import PREDICATE_TYPE, STATEMENT_TYPE
from bundle.schemas import schema_id, schema_sha256, validate

__all__ = [
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "build_statement",
    "restated_predicate",
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


def restated_predicate(*, protocol_sha256: str, resources: Mapping[str, Any], temperature: Mapping[str, Any],
                       temperature_sha256: str, metrics: Mapping[str, Any],
                       publication: Mapping[str, Any]) -> dict[str, Any]:
    """The predicate restated from the records, without `schemas` and `signer_fingerprint`.

    resources, temperature, metrics: the documents written as resources.json, temperature.json
    and metrics.json; temperature_sha256: temperature.json's; publication: licence, publisher,
    authors and contact as the crate's root states them (FORMAT.md "Predicate"). `format` is the
    format this code writes. The job signs it as is; a verifier recomputes it from the payload
    and compares.
    """
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
            "sha256": temperature_sha256,
        },
        "audit": {
            "n": audit["raw"]["n"],
            "raw": {k: audit["raw"][k] for k in _HEADLINE},
            "calibrated": {k: audit["calibrated"][k] for k in _HEADLINE},
        },
        "publication": dict(publication),
    }


def statement_bytes(statement: Mapping[str, Any]) -> bytes:
    """The canonical JSON bytes that are signed."""
    return dumps(statement, source="The statement")
