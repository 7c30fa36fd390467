"""Reproduction attestations (FORMAT.md "Reproduction attestation"): an in-toto Statement v1 about a
bundle, made by whoever re-ran its inference, signed in a DSSE envelope and written atomically.

This module writes attestations; verify/reproduction.py is their reader."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle import layout
from bundle.dsse import Envelope
from bundle.errors import BundleError, OutputExistsError
from bundle.schemas import validate
from job.publishing.publish import write_atomic
from job.publishing.statement import statement_bytes


def build_reproduction_statement(statement_sha256: str, predictions: Mapping[str, str],
                                 predicate: Mapping[str, Any]) -> dict[str, Any]:
    """The Statement about one bundle, schema-checked: its subjects are the bundle's signed statement
    (sha256 of the envelope's decoded payload) and its predictions files (bag path -> sha256)."""
    subjects = {layout.SIGNED_STATEMENT_SUBJECT: statement_sha256, **predictions}
    statement = {
        "_type": layout.STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": subjects[name]}} for name in sorted(subjects)],
        "predicateType": layout.REPRODUCTION_PREDICATE_TYPE,
        "predicate": dict(predicate),
    }
    validate(statement, "reproduction", source="The reproduction statement")
    return statement


def attestation_bytes(statement: Mapping[str, Any], private_key: Ed25519PrivateKey) -> bytes:
    """The canonical JSON of a DSSE envelope over the statement, signed like a bundle's (keyid = fingerprint)."""
    envelope = Envelope(statement_bytes(statement), layout.PAYLOAD_TYPE).sign(private_key)
    return envelope.to_json(source="The reproduction attestation")


def refuse_existing_attestation(path: Path) -> None:
    """OutputExistsError when anything, a link included, is at `path`: attestations are never
    overwritten. The one check, made by write_attestation and by a command before its work starts."""
    if os.path.lexists(path):
        raise OutputExistsError(f"{path} already exists and attestations are never overwritten; choose "
                                "another --out.", path=str(path))


def write_attestation(path: Path, data: bytes) -> None:
    """Write `data` at `path` all at once or not at all, never over an existing file.

    The bytes go to a hidden temporary file in the same folder, are flushed to disk, and are then
    renamed into place by job.publishing.publish.write_atomic with rename_noreplace, the same no-replace
    rename that publishes a bag (it fails when `path` exists, so nothing is overwritten even in a race)."""
    path = Path(path)
    refuse_existing_attestation(path)
    try:
        write_atomic(path, data, replace=False)
    except FileExistsError as exc:
        raise OutputExistsError(f"{path} appeared while the attestation was written; choose another "
                                "--out.", path=str(path)) from exc
    except OSError as exc:
        raise BundleError(f"Cannot write the attestation {path} ({exc.strerror}); check free space and "
                          "permissions there (no attestation was written).") from exc
