"""A reproduction's batch-kind groups (bundle/FORMAT.md, "Reproduction attestation", `batch_kinds`):
each re-run batch paired with the CPU kind that produced the bundle's logits for it and the kind
that re-ran it, grouped by that pair.

The verifier restates what it can without the reproducer's logits: the groups hold exactly the
batches re-run, each batch's signing kind is the one the bundle's environment.json records, its
re-run kind the one the attestation's workers (or its own arithmetic) record, each group's rows
are those of its batches, the groups add up to the attestation's own row counts and largest
difference, and each group's level follows from its numbers. It then shows the groups and flags
a group re-run on the kind that signed it whose logits are not bit-identical: suspicious, since
the same arithmetic on the same batch gives the same bits, though the overall verdict stands."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from bundle import layout
from bundle.views.arithmetic import claim_warning, group_words, suspicious
from verify.context import Context
from verify.reproduction import SAME_ARITHMETIC
from verify.result import Failed

UNRECORDED = "unrecorded"


def kind_of(record: Mapping[str, Any] | None) -> str:
    """An arithmetic record's CPU kind, spelled as a worker's `cpu_kind`: "vendor | model | ATen ISA"."""
    if not record:
        return UNRECORDED
    return (f"{record.get('cpu_vendor') or 'unknown'} | {record.get('cpu_model') or 'unknown'} | "
            f"{record.get('aten_capability') or 'unknown'}")


def _owners(cluster: Mapping[str, Any] | None, pool: str) -> dict[int, str]:
    if cluster is None:
        return {}
    return {int(b): str(w["cpu_kind"]) for w in cluster["workers"] for b in w["batches"].get(pool, [])}


def _level(group: Mapping[str, Any], tolerance: float) -> str:
    if group["identical"] == group["rows"]:
        return "bit-identical"
    if group["largest_difference"]["abs"] <= tolerance and group["predictions_changed"] == 0:
        return "equivalent"
    return "mismatch"




def _rerun_batches(ctx: Context, p: Mapping[str, Any], pool: str) -> set[int]:
    if p["mode"] == "full":
        return {int(b) for b in np.unique(ctx.table(pool).batch)}
    return {int(b) for b in p["sample"]["batches"][pool]}


def _check_pool(ctx: Context, p: Mapping[str, Any], pool: str, found: list[Mapping[str, Any]]) -> None:
    """The groups of one pool against the bundle and the attestation's own workers and arithmetic."""
    env = ctx.docs.get(layout.ENVIRONMENT_JSON) or {}
    signer_of, signer_default = _owners(env.get("cluster"), pool), kind_of(env.get("arithmetic"))
    workers = p["batch_kinds"]["workers"]
    mine = p["environment"].get("arithmetic")
    rerun_of = {} if workers is None else _owners({"workers": workers}, pool)
    rerun_default = kind_of(mine)
    batch_of_row = np.asarray(ctx.table(pool).batch, dtype=np.int64)
    seen: set[int] = set()
    for g in found:
        batches = [int(b) for b in g["batches"]]
        twice = sorted(seen & set(batches)) or sorted(b for b in set(batches) if batches.count(b) > 1)
        if twice:
            raise Failed(f"{pool} batch {twice[0]} is in more than one batch-kind group; each re-run batch "
                         "belongs to exactly one.")
        seen |= set(batches)
        for b in batches:
            signed, rerun = signer_of.get(b, signer_default), rerun_of.get(b, rerun_default)
            if g["signed_on"] != signed:
                raise Failed(f"the attestation says {pool} batch {b} was signed on {g['signed_on']!r}; the "
                             f"bundle's environment.json records {signed!r}.")
            if g["rerun_on"] != rerun:
                raise Failed(f"the attestation says {pool} batch {b} was re-run on {g['rerun_on']!r}; its own "
                             f"{'workers' if workers is not None else 'arithmetic'} record {rerun!r}.")
        both_one_process = env.get("cluster") is None and workers is None
        same = g["signed_on"] == g["rerun_on"] != UNRECORDED and not (
            both_one_process and env.get("arithmetic") and mine
            and any(env["arithmetic"].get(k) != mine.get(k) for k in SAME_ARITHMETIC))
        if g["same_kind"] != same:
            raise Failed(f"a {pool} batch-kind group says same_kind {g['same_kind']} for {g['signed_on']!r} and "
                         f"{g['rerun_on']!r}; their records say {same}.")
        rows = int(np.isin(batch_of_row, batches).sum())
        if g["rows"] != rows:
            raise Failed(f"a {pool} batch-kind group counts {g['rows']} rows, but its batches hold {rows}.")
        if g["identical"] > g["rows"] or g["predictions_changed"] > g["rows"]:
            raise Failed(f"a {pool} batch-kind group counts more identical or changed rows than it has.")
        if g["level"] != _level(g, p["tolerance"]["abs"]):
            raise Failed(f"a {pool} batch-kind group says {g['level']}, but its own numbers give "
                         f"{_level(g, p['tolerance']['abs'])}.")
    want = _rerun_batches(ctx, p, pool)
    if seen != want:
        odd = sorted(seen ^ want)
        raise Failed(f"the batch-kind groups do not hold exactly the {pool} batches re-run ({len(odd)} differ, "
                     f"first {odd[0]}).")


def _check_totals(p: Mapping[str, Any], groups: list[Mapping[str, Any]]) -> None:
    rows = p["rows"]
    for pool in layout.REPRODUCTION_POOLS:
        if sum(g["rows"] for g in groups if g["pool"] == pool) != rows["pools"][pool]["count"]:
            raise Failed(f"the batch-kind groups' {pool} rows do not add up to the {pool} rows compared.")
    for field, total in (("identical", rows["identical"]), ("predictions_changed", rows["predictions_changed"])):
        if sum(g[field] for g in groups) != total:
            raise Failed(f"the batch-kind groups' {field.replace('_', ' ')} rows do not add up to the "
                         f"attestation's {total}.")
    worst = p["largest_difference"]
    for unit in ("abs", "ulps"):
        largest = max((g["largest_difference"][unit] for g in groups), default=0)
        if largest != worst[unit]:
            raise Failed(f"the batch-kind groups' largest difference ({unit}) is {largest}, the attestation's "
                         f"{worst[unit]}.")


def grouped(ctx: Context, n: str) -> str:
    """Its batch-kind groups restate the bundle's records and its own numbers; same-kind differences flagged."""
    found: dict[str, Any] = ctx.need(ctx.reproductions.get(n), "reproduction.statements",
                                     f"attestation {n}'s signed statement")
    p = found["statement"]["predicate"]
    if "batch_kinds" not in p:
        return "no batch-kind groups recorded (an attestation written before them)"
    if p["verdict"] == layout.LEGACY_REPRODUCED or "tolerance" not in p:
        raise Failed("batch-kind groups come only with a graded verdict and its tolerance.")
    groups = p["batch_kinds"]["groups"]
    for pool in layout.REPRODUCTION_POOLS:
        _check_pool(ctx, p, pool, [g for g in groups if g["pool"] == pool])
    _check_totals(p, groups)
    flagged = [g for g in groups if suspicious(g)]
    claim = _claim(ctx, p)
    if "verdict" in found:
        found["verdict"]["suspicious"] = len(flagged) + (claim is not None)
    signed_kinds = {g["signed_on"] for g in groups}
    head = (f"{len(groups)} group(s) by the kind that signed and the kind that re-ran each batch"
            + (f"; the bundle's batches re-run here were signed on {len(signed_kinds)} CPU kinds (MIXED)"
               if len(signed_kinds) > 1 else ""))
    if flagged:
        head += (f"; {len(flagged)} group(s) re-run on the kind that signed them are NOT bit-identical "
                 "(suspicious; the verdict stands by every row)")
    return f"{head}: " + "; ".join(group_words(g) for g in groups) + (f"; {claim}" if claim else "")


def _claim(ctx: Context, p: Mapping[str, Any]) -> str | None:
    """The warning the bundle's worker records cannot remove: judged here from the arithmetic the
    reproducer measured in its own process against the one the bundle records for its signer
    (bundle.views.arithmetic.claim_warning), whatever kinds the workers claim."""
    env = ctx.docs.get(layout.ENVIRONMENT_JSON) or {}
    signer, mine = env.get("arithmetic"), p["environment"].get("arithmetic")
    measured_same = (p["batch_kinds"]["workers"] is None and signer is not None and mine is not None
                     and bool(signer) and bool(mine) and all(signer.get(k) == mine.get(k) for k in SAME_ARITHMETIC))
    cluster = env.get("cluster")
    claimed = sorted({str(w["cpu_kind"]) for w in cluster["workers"] if any(w["batches"].values())}
                     if cluster else set())
    return claim_warning(p["verdict"], claimed, measured_same)
