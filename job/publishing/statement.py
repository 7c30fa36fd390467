"""The in-toto Statement v1 a bundle signs (FORMAT.md "Statement"); the predicate it carries has
its shape in bundle/predicate.py."""

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
    "schemas_map",
    "statement_bytes",
]

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


def statement_bytes(statement: Mapping[str, Any]) -> bytes:
    """The canonical JSON bytes that are signed."""
    return dumps(statement, source="The statement")
