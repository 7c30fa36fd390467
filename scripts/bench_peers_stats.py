"""The forward benchmark's arithmetic (scripts/bench_peers.py): pure functions from measurements to figures.

Kept apart from the driver so that each figure the table shows is computed in one place and
tested on its own (tests/test_bench_peers.py)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np


def spread(walls: Sequence[float]) -> dict[str, float]:
    """Median, fastest and slowest of the timed passes, and (slowest - fastest) / median."""
    if not walls:
        raise ValueError("spread needs at least one timed pass")
    med = statistics.median(walls)
    return {"median": med, "min": min(walls), "max": max(walls), "spread": (max(walls) - min(walls)) / med,
            "passes": len(walls)}


def logit_difference(a: Any, b: Any) -> dict[str, Any]:
    """How far logits `a` lie from `b` (same rows, same order): the largest absolute difference
    (float64, so no rounding hides a difference), the largest in units in the last place of `b`
    (float32 ulps), how many rows differ in any bit, how many predicted classes change, and how
    many rows hold a NaN or an infinity on either side (left out of the largest differences).

    A difference of exactly 0 means every logit has the same bits: bit_identical says so, so that
    a zero is read as a fact about the arithmetic, never as a difference that was not computed."""
    a32, b32 = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    if a32.shape != b32.shape:
        raise ValueError(f"logits of shapes {a32.shape} and {b32.shape} cannot be compared")
    if a32 is b32 or np.shares_memory(a32, b32):
        raise ValueError("the two logit arrays are the same memory; compare two runs' outputs")
    nonfinite = ~np.isfinite(a32).all(axis=1) | ~np.isfinite(b32).all(axis=1)
    diff = np.abs(a32.astype(np.float64) - b32.astype(np.float64))[~nonfinite]
    ulp = np.spacing(np.abs(b32[~nonfinite])).astype(np.float64)
    rows = (a32.view(np.uint32) != b32.view(np.uint32)).any(axis=1)
    return {"max_abs": float(diff.max(initial=0.0)), "max_ulps": float((diff / ulp).max(initial=0.0)),
            "rows_differing": int(rows.sum()), "rows": len(rows), "bit_identical": not bool(rows.any()),
            "nonfinite_rows": int(nonfinite.sum()),
            "argmax_changes": int((a32.argmax(axis=1) != b32.argmax(axis=1)).sum())}


def gemm_fraction(useful: float, wall: float, gemm_flops: float, gemm_seconds: float) -> float:
    """The useful FLOP rate of a pass (useful / wall) over the GEMM rate measured in the same run."""
    return (useful / wall) / (gemm_flops / gemm_seconds)


def relative(walls: dict[str, float], reference: str) -> dict[str, float]:
    """Each path's time over the reference path's (below 1: faster than the reference)."""
    return {path: wall / walls[reference] for path, wall in walls.items()}


def fmt_diff(d: dict[str, Any] | None) -> str:
    """The logit difference as the table prints it."""
    if d is None:
        return "-"
    if d["bit_identical"]:
        return f"0 (all {d['rows']} rows bit-identical)"
    if d["nonfinite_rows"]:
        return f"NaN or inf in {d['nonfinite_rows']}/{d['rows']} rows"
    return (f"{d['max_abs']:.1e} ({d['max_ulps']:.0f} ulp; {d['rows_differing']}/{d['rows']} rows"
            + (f", {d['argmax_changes']} argmax" if d["argmax_changes"] else "") + ")")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
