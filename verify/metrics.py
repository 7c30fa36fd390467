"""metrics.json: its header names this temperature and these prediction files, every metric is
recomputed from the logits, and the temperature changes no prediction."""

from __future__ import annotations

import re
from typing import Any

from bundle import layout
from verify import numerics
from verify.context import METRIC_TOL, POOL_NAMES, Context
from verify.result import Failed, Scalar, ValueMismatch

ROLES = {"audit": "evidence", "calibration": "fit pool, not evidence"}


def record(ctx: Context) -> str:
    """The metrics name this temperature (hash, beta, T) and these prediction files; roles."""
    m = ctx.doc(layout.METRICS_JSON)
    t = ctx.doc(layout.TEMPERATURE_JSON)
    problems = []
    if m["temperature_sha256"] != ctx.sha(layout.TEMPERATURE_JSON):
        problems.append("temperature_sha256 is not the temperature.json in the bag")
    if m["beta"] != t["beta"] or m["temperature"] != t["temperature"]:
        problems.append(f"beta/temperature {m['beta']!r}/{m['temperature']!r}, "
                        f"temperature.json has {t['beta']!r}/{t['temperature']!r}")
    if sorted(m["pools"]) != sorted(POOL_NAMES):
        problems.append(f"pools {sorted(m['pools'])}, expected {sorted(POOL_NAMES)}")
    for pool in POOL_NAMES:
        entry = m["pools"].get(pool)
        if entry is None:
            continue
        if entry["role"] != ROLES[pool]:
            problems.append(f"pool {pool!r} role {entry['role']!r}, expected {ROLES[pool]!r}")
        if entry["predictions_sha256"] != ctx.sha(f"data/predictions/{pool}.parquet"):
            problems.append(f"pool {pool!r} predictions_sha256 is not the file in the bag")
    if problems:
        raise Failed("metrics.json: " + "; ".join(problems) + ".")
    return "metrics name this temperature and these prediction files; roles as specified"


def each_pool_and_scale(ctx: Context) -> list[dict[str, str]]:
    """One {pool, which} per pool and probability scale (raw, calibrated), in report order."""
    return [{"pool": pool, "which": which} for pool in POOL_NAMES
            for which in ("raw", "calibrated")]


def _leaf(value: Any, path: str) -> Scalar:
    """The JSON scalar at `path` (`.b[2].c`) under `value`, or None when it is absent or not a
    scalar."""
    for key, index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        try:
            value = value[key] if key else value[int(index)]
        except (KeyError, IndexError, TypeError):
            return None
    return value if value is None or isinstance(value, (str, int, float, bool)) else None


def recomputed(ctx: Context, pool: str, which: str) -> str:
    """Every field of one pool's raw or calibrated metrics recomputed from the logits."""
    m = ctx.doc(layout.METRICS_JSON)
    t = ctx.doc(layout.TEMPERATURE_JSON)
    threshold = ctx.doc(layout.PROTOCOL_JSON)["metrics"]["threshold"]["value"]
    data = ctx.table(pool)
    beta = 1.0 if which == "raw" else t["beta"]
    expected = numerics.metric_set(data.z, data.y, beta, threshold)
    if pool not in m["pools"]:
        raise Failed(f"metrics.json has no {pool!r} pool.")
    found = m["pools"][pool][which]
    diffs: list[str] = []
    numerics.compare(found, expected, f"{pool}.{which}", METRIC_TOL, diffs)
    if diffs:
        more = f" (+{len(diffs) - 3} more)" if len(diffs) > 3 else ""
        path = diffs[0].split(": ", 1)[0].removeprefix(f"{pool}.{which}")
        raise ValueMismatch("metrics differ from the logits: " + "; ".join(diffs[:3]) + more + ".",
                            file=layout.METRICS_JSON, field=f"pools.{pool}.{which}{path}",
                            expected=_leaf(expected, path), found=_leaf(found, path))
    return (f"n {expected['n']}, accuracy {expected['accuracy']:.4f}, NLL "
            f"{expected['nll']:.4f}, ECE {expected['ece']:.4f}: all fields, 10 bins, "
            f"threshold counts within {METRIC_TOL:g}")


def argmax(ctx: Context) -> str:
    """The temperature changes no prediction, and argmax_unchanged says so."""
    m = ctx.doc(layout.METRICS_JSON)
    t = ctx.doc(layout.TEMPERATURE_JSON)
    changed = 0
    for pool in POOL_NAMES:
        data = ctx.table(pool)
        for b in numerics.row_blocks(len(data.z), data.z.shape[1]):
            scaled = numerics.first_argmax(numerics.probabilities(data.z[b], t["beta"]))
            changed += int((scaled != numerics.first_argmax(data.z[b])).sum())
    if m["argmax_unchanged"] != (changed == 0):
        raise Failed(f"argmax_unchanged is {m['argmax_unchanged']}, but the temperature "
                     f"changes {changed} predictions.")
    if changed:
        raise Failed(f"the temperature changes the argmax of {changed} rows; a temperature "
                     "> 0 cannot.")
    return "argmax of every row unchanged by the temperature"
