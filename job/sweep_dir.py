"""The sweep directory on the driver: the plan written and signed before any member runs, a member
archive verified against the plan and published atomically, the index and views at the end.

    DIR/sweep.json          the sweep file, byte for byte
    DIR/plan.intoto.json    the signed plan
    DIR/members/NAME/       one complete, signed bundle per done member (never a partial one)
    DIR/index.intoto.json   the signed index, written when the sweep ends
    DIR/sweep.md, DIR/figures/*.png   the comparison views, rendered from the index

Every file appears by rename, so a reader (or a killed driver's next run) sees it whole or not at
all."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle import layout
from bundle.dsse import Envelope
from job.errors import JobError
from job.publishing.publish import cleanup_stale_partials, publish, staging_dir, write_atomic
from job.publishing.sweep_statements import index_statement, plan_statement, signed_record
from job.sweep_spec import Member, Sweep
from verify import Trust, VerifyError, extract_bag, verify_path


def plan_bytes(sweep: Sweep, key: Ed25519PrivateKey) -> tuple[bytes, str]:
    """(the signed plan envelope, the sha256 of its statement). Ed25519 signs deterministically, so
    the same sweep and key give the same bytes: that is how a rerun recognises its own plan."""
    statement = plan_statement(sweep.name, sweep.sha256,
                               [{"name": m.name, "protocol_sha256": m.protocol_sha256, "resources": m.pins}
                                for m in sweep.members])
    return signed_record(statement, key)


def open_sweep_dir(out: Path, sweep: Sweep, key: Ed25519PrivateKey) -> str:
    """Write the sweep file and the signed plan into `out` (a new or empty directory), or accept
    `out` when it already holds this very plan (a rerun resumes); return the plan's statement sha256."""
    envelope, plan_sha256 = plan_bytes(sweep, key)
    if len(envelope) > layout.SWEEP_MAX_PLAN_BYTES:
        raise JobError(f"The sweep's plan would be {len(envelope):,} bytes, more than the "
                       f"{layout.SWEEP_MAX_PLAN_BYTES:,} a verifier reads; split it into smaller sweeps.")
    sweep_file, plan_file = out / layout.SWEEP_FILE, out / layout.SWEEP_PLAN
    if sweep_file.exists() or plan_file.exists():
        if not sweep_file.is_file() or sweep_file.read_bytes() != sweep.raw:
            raise JobError(f"{out} holds a different sweep file; pass the sweep it was planned from, or a new --out.")
        if plan_file.exists():
            if not plan_file.is_file() or plan_file.read_bytes() != envelope:
                raise JobError(f"{out} holds a plan that this sweep file, its protocol, its locks and this key do "
                               "not give; restore them as they were planned, or use a new --out.")
            return plan_sha256
        # sweep.json is there but the plan is not: a run was stopped between the two; finish the plan
    elif out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise JobError(f"{out} exists and is not a sweep directory; choose a new --out or remove it.")
    else:
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(sweep_file, sweep.raw, replace=False)
    write_atomic(plan_file, envelope, replace=False)
    (out / layout.SWEEP_MEMBERS).mkdir(exist_ok=True)
    return plan_sha256


def forget_index(out: Path) -> None:
    """Remove a previous run's index and views before members run again: a directory mid-sweep
    has no index, so it never shows a stale one as the sweep's outcome."""
    for rel in (layout.SWEEP_INDEX, *layout.SWEEP_VIEWS):
        (out / rel).unlink(missing_ok=True)


def clean_partials(out: Path) -> list[Path]:
    """Staging directories a killed driver left under members/; none is ever a member."""
    return cleanup_stale_partials(out / layout.SWEEP_MEMBERS)


def member_summary(documents: Mapping[str, Any]) -> dict[str, Any]:
    """The index's summary of a verified member bundle (sweep-index/v1), from its records as the
    verifier parsed them (`documents`: bag path -> record)."""
    metrics, temperature = documents[layout.METRICS_JSON], documents[layout.TEMPERATURE_JSON]
    bootstrap = documents.get(layout.BOOTSTRAP_JSON)
    audit = metrics["pools"]["audit"]
    differences = bootstrap["differences"] if bootstrap is not None else {}
    return {
        "temperature": temperature["temperature"], "boundary": temperature["boundary"], "n": audit["raw"]["n"],
        "interval_level": bootstrap["interval"]["level"] if bootstrap is not None else None,
        "metrics": {k: {"raw": audit["raw"][k], "calibrated": audit["calibrated"][k],
                        "difference": ({x: differences[k][x] for x in ("point", "lower", "upper")}
                                       if k in differences else None)}
                    for k in layout.SWEEP_SUMMARY_METRICS},
    }


def verified_member(bag: Path, member: Member, key: Ed25519PrivateKey) -> dict[str, Any]:
    """The index row of the member bundle at `bag`: it must verify under the sweep's key with the
    planned protocol; raise JobError saying which check failed otherwise."""
    outcome = verify_path(bag, Trust(key=key.public_key(), source="the sweep's signing key"),
                          expected_protocol_sha256=member.protocol_sha256)
    if outcome.exit_code != 0:
        bad = next((c for c in outcome.checks if c.status != "pass"), None)
        why = f"{bad.id}: {bad.detail}" if bad is not None else "no check passed"
        raise JobError(f"Member {member.name}'s bundle does not verify against the plan ({why}).")
    assert outcome.envelope is not None, "a verified bundle has an envelope"
    return {"name": member.name, "status": "done",
            "statement_sha256": hashlib.sha256(outcome.envelope.payload).hexdigest(),
            "summary": member_summary(outcome.documents)}


def publish_member(out: Path, member: Member, archive_bytes: bytes, key: Ed25519PrivateKey) -> dict[str, Any]:
    """Extract the worker's archive beside members/NAME, verify it against the plan, and rename it
    into place; return its index row. Nothing appears at members/NAME unless it verified."""
    target = out / layout.SWEEP_MEMBERS / member.name
    staging = staging_dir(target)
    try:
        archive = staging / "member.tar.gz"
        archive.write_bytes(archive_bytes)
        extracted = staging / "bag"
        extracted.mkdir()
        try:
            bag = extract_bag(archive, extracted)
        except VerifyError as exc:
            raise JobError(f"Member {member.name}'s archive cannot be extracted ({exc}).") from exc
        if bag.name != member.name:
            raise JobError(f"Member {member.name}'s archive holds the bag {bag.name!r}; the worker answered "
                           "for another member.")
        row = verified_member(bag, member, key)
        _readable(bag)
        publish(bag, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return row


def _readable(bag: Path) -> None:
    """Give the extracted bag the archive's modes (0755 folders, 0644 files): extraction wrote them
    private, and a published member is read by whoever verifies the sweep."""
    bag.chmod(0o755)
    for path in bag.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def write_index(out: Path, plan_sha256: str, rows: list[dict[str, Any]], key: Ed25519PrivateKey) -> None:
    """Sign the index over `rows` (plan order), then render the views from it; each file by rename."""
    # deferred: matplotlib (about 1 s) only to draw the views
    from bundle.views.sweep_comparison import render_sweep_views

    statement = index_statement(plan_sha256, rows)
    envelope, _digest = signed_record(statement, key)
    plan = json.loads(Envelope.from_json((out / layout.SWEEP_PLAN).read_bytes(), layout.SWEEP_PLAN).payload)
    for rel, data in render_sweep_views(plan["predicate"], statement["predicate"]).items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out / rel, data, replace=True)
    write_atomic(out / layout.SWEEP_INDEX, envelope, replace=True)
