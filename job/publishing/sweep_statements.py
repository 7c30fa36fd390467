"""The signed records of a sweep (FORMAT.md "Sweeps"): the plan, signed before any member runs,
and the index, signed when the sweep ends. Both are in-toto Statements v1 in DSSE envelopes signed
like a bundle's (bundle.dsse), with their own predicate types and schemas."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle import layout
from bundle.canonical import dumps
from bundle.dsse import Envelope
from bundle.schemas import validate


def _statement(subjects: Mapping[str, str], predicate_type: str, predicate: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "_type": layout.STATEMENT_TYPE,
        "subject": [{"name": n, "digest": {"sha256": subjects[n]}} for n in sorted(subjects)],
        "predicateType": predicate_type,
        "predicate": dict(predicate),
    }


def plan_statement(sweep_name: str, sweep_sha256: str, members: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The plan: the sweep file's digest and, per member in plan order, its name, protocol sha256
    and resource pins (sweep-plan/v1). Subjects: the sweep file and every member's protocol."""
    predicate = {"sweep": {"name": sweep_name, "sha256": sweep_sha256},
                 "members": [dict(m) for m in members]}
    validate(predicate, "sweep-plan", source="The sweep plan")
    subjects = {layout.SWEEP_FILE: sweep_sha256,
                **{layout.member_protocol_subject(m["name"]): m["protocol_sha256"] for m in members}}
    return _statement(subjects, layout.SWEEP_PLAN_PREDICATE_TYPE, predicate)


def index_statement(plan_sha256: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The index: every planned member once, done (its bundle's statement digest and summary) or
    failed (its error) (sweep-index/v1). Subjects: the plan's statement and each done member's."""
    predicate = {"plan_sha256": plan_sha256, "members": [dict(r) for r in rows]}
    validate(predicate, "sweep-index", source="The sweep index")
    subjects = {layout.SWEEP_PLAN + "#payload": plan_sha256,
                **{layout.member_statement_subject(r["name"]): r["statement_sha256"]
                   for r in rows if r["status"] == "done"}}
    return _statement(subjects, layout.SWEEP_INDEX_PREDICATE_TYPE, predicate)


def signed_record(statement: Mapping[str, Any], private_key: Ed25519PrivateKey) -> tuple[bytes, str]:
    """(the DSSE envelope's canonical JSON bytes, sha256 of the signed statement bytes)."""
    payload = dumps(statement, source="The sweep statement")
    envelope = Envelope(payload, layout.PAYLOAD_TYPE).sign(private_key)
    return envelope.to_json(source="The sweep envelope"), hashlib.sha256(payload).hexdigest()
