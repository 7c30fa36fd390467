"""The checks of the protocol itself: every record names the same data/protocol.json, it is the
pre-registered one when the user gave one, and its sizes are within the format's bounds
(bundle.limits)."""

from __future__ import annotations

from typing import Any

from bundle import layout, limits
from bundle.errors import ProtocolOutOfBounds
from verify.context import Context
from verify.result import DigestMismatch, Failed, ValueMismatch


def bounded_dimensions(protocol: Any) -> limits.Dimensions:
    """bundle.limits.dimensions for a check that needs them: a protocol beyond the format's
    bounds raises Failed (the check is not done; protocol.bounds says why)."""
    try:
        return limits.dimensions(protocol)
    except ProtocolOutOfBounds as exc:
        raise Failed(f"not checked: {exc} (see protocol.bounds).", **exc.details) from exc


def check_protocol_everywhere(protocol_sha: str, named: dict[str, str]) -> str:
    """`named` maps a place (record, field) to the protocol sha256 it names."""
    wrong = {where: value for where, value in named.items() if value != protocol_sha}
    if wrong:
        where, value = next(iter(wrong.items()))
        raise ValueMismatch(f"{where} names protocol {str(value)[:16]}…, but data/protocol.json "
                            f"hashes to {protocol_sha[:16]}… ({len(wrong)} place(s) disagree).",
                            file=where, field="protocol_sha256", expected=protocol_sha,
                            found=str(value))
    return f"sha256 {protocol_sha[:16]}… named by all {len(named)} records"


def protocol_hash(ctx: Context) -> str:
    """bag-info.txt, every record, every stage and the predicate name the sha256 of data/protocol.json."""
    sha = ctx.sha(layout.PROTOCOL_JSON)
    named: dict[str, str] = {}
    info = ctx.need(ctx.info, "bag.info")
    named["bag-info.txt Protocol-SHA256"] = info[layout.INFO_PROTOCOL_SHA256]
    for path in (layout.POOLS_JSON, layout.TEMPERATURE_JSON, layout.TRAJECTORY_JSON,
                 layout.METRICS_JSON, layout.STAGES_JSON):
        named[f"{path} protocol_sha256"] = ctx.doc(path)["protocol_sha256"]
    for path in layout.PROTOCOL_SECTION_PAYLOAD.values():
        if path in ctx.docs or (ctx.tree is not None and path in ctx.tree.files):
            named[f"{path} protocol_sha256"] = ctx.doc(path)["protocol_sha256"]
    for stage in ctx.doc(layout.STAGES_JSON)["stages"]:
        named[f"stages.json stage {stage['name']!r}"] = stage["protocol_sha256"]
    named["the signed predicate"] = ctx.doc("predicate")["protocol_sha256"]
    return check_protocol_everywhere(sha, named)


def has_pre_registered_protocol(ctx: Context) -> bool:
    """Whether the user gave a pre-registered protocol (--protocol)."""
    return ctx.expected_protocol_sha256 is not None


def pre_registered(ctx: Context) -> str:
    """data/protocol.json is byte-identical to the pre-registered protocol."""
    pinned = ctx.need(ctx.expected_protocol_sha256, "input.pre-registered-protocol")
    sha = ctx.sha(layout.PROTOCOL_JSON)
    if sha != pinned:
        raise DigestMismatch(f"data/protocol.json hashes to {sha[:16]}…, the pre-registered "
                             f"protocol to {pinned[:16]}….", path=layout.PROTOCOL_JSON,
                             algorithm="sha256", expected=pinned, found=sha)
    return f"data/protocol.json is the pre-registered protocol ({sha[:16]}…)"


def protocol_bounds(ctx: Context) -> str:
    """The protocol's rows, classes, steps and resamples are within the verifier's bounds."""
    try:
        dims = limits.dimensions(ctx.doc(layout.PROTOCOL_JSON))
    except ProtocolOutOfBounds as exc:
        raise Failed(f"{exc}; the verifier refuses a bundle it cannot check in bounded time and "
                     "memory (FORMAT.md, Limits).") from exc
    return (f"{dims.rows:,} rows, {dims.classes} classes, {dims.steps} steps, "
            f"{dims.resamples:,} resamples: within the verifier's bounds")
