"""The reproduction tolerance in the reader's view: whether the reader accepts the tolerance the
signer pre-registered (--max-tolerance, default the format's), and metrics.json
`reproduction_bounds` derived again (bundle/FORMAT.md "What equivalent can move", written here on
its own): the range the refitted temperature can reach, and each figure's worst-case change.

Where the job uses closed forms for a row's extremes, this module evaluates the perturbed logits
themselves: the corner that pushes the true label down and every other up (and the reverse) for
the NLL, the corner that pushes the top label down (and up) for the confidence."""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from bundle import layout
from verify import numerics
from verify.context import METRIC_TOL, POOL_NAMES, Context
from verify.reproduction import bounds_words, tolerance
from verify.result import Failed

LIMIT_CHECK: Final = "reproduction.tolerance"
BOUNDS_CHECK: Final = "metrics.reproduction-bounds"
FIGURES: Final = ("accuracy", "mean_confidence", "nll", "brier", "ece", "mce")
F64 = NDArray[np.float64]


def within_limit(ctx: Context) -> str:
    """The pre-registered logit tolerance is at most what the reader accepts (--max-tolerance)."""
    tau, source = tolerance(ctx)
    limit = ctx.max_tolerance
    if tau > limit:
        times = tau / layout.DEFAULT_LOGIT_TOLERANCE
        raise Failed(f"the protocol pre-registers a logit tolerance of {tau:g}, {times:g} "
                     f"times the format default {layout.DEFAULT_LOGIT_TOLERANCE:g}, above the {limit:g} you accept; "
                     f"pass --max-tolerance {tau:g} to accept it.")
    whose = "the format default" if source == "format default" else (
        "the protocol's, equal to the format default" if tau == layout.DEFAULT_LOGIT_TOLERANCE else "the protocol's")
    return f"logit tolerance {tau:g} ({whose}), within the {limit:g} accepted"


def _spread(z: F64) -> F64:
    return np.asarray(np.ptp(z, axis=1), dtype=np.float64)


def _slack(z: F64, beta: float, tau: float) -> float:
    """How far g of logits within tau of z can be from g at beta: tau (2 + beta mean_i s_i),
    s_i = min(exp(beta tau) sd_p(z_i), spread_i / 2), over row blocks."""
    total = 0.0
    for b in numerics.row_blocks(len(z), z.shape[1]):
        zb = z[b]
        p = numerics.probabilities(zb, beta)
        centred = zb - (p * zb).sum(axis=1, keepdims=True)
        sd = np.sqrt(np.einsum("ij,ij->i", p, centred * centred))
        total += float(np.minimum(np.exp(beta * tau) * sd, _spread(zb) / 2.0).sum())
    return tau * (2.0 + beta * total / len(z)) + 1e-12


def _first_excluded(rule: Any, start: float, end: float) -> float:
    """A point between start (rule false) and end (rule true) where the rule holds, as near start as
    halving finds; every point returned satisfies the rule, whatever it does in between."""
    while True:
        mid = 0.5 * (start + end)
        if not min(start, end) < mid < max(start, end):
            return end
        if rule(mid):
            end = mid
        else:
            start = mid


def temperature_range(z: F64, y: NDArray[np.int64], tau: float, beta: float,
                      protocol: dict[str, Any]) -> tuple[float, float]:
    """The betas a refit on logits within tau of z can reach: a beta where g - slack > 0 bounds it
    from above, one where g + slack < 0 from below (g of such logits is non-decreasing)."""
    fit = protocol["fit"]
    b_min, b_max, steps = 1.0 / fit["t_max"], 1.0 / fit["t_min"], fit["steps"]
    width = (b_max - b_min) / 2.0 ** steps

    def over(b: float) -> bool:
        return numerics.gradient(z, y, b) - _slack(z, b, tau) > 0

    def under(b: float) -> bool:
        return numerics.gradient(z, y, b) + _slack(z, b, tau) < 0

    high = _first_excluded(over, beta, b_max) if not over(beta) and over(b_max) else b_max
    low = _first_excluded(under, beta, b_min) if not under(beta) and under(b_min) else b_min
    return max(b_min, low - width), min(b_max, high + width)


def _corner(shape: tuple[int, int], at: NDArray[np.int64], a: F64, sign: float) -> F64:
    """+sign a on the column `at` of each row, -sign a on the others."""
    e = np.repeat((-sign * a)[:, None], shape[1], axis=1)
    e[np.arange(shape[0]), at] = sign * a
    return e


@np.errstate(over="ignore")  # a wide temperature range makes exp(2a) huge: sums reach inf, capped below
def row_extremes(z: F64, y: NDArray[np.int64], beta: float, a: F64) -> dict[str, F64]:
    """Per row: the largest NLL change, the confidence's range, the Brier bound, at half-width a."""
    n = len(y)
    rows = np.arange(n)
    s = beta * z
    top = numerics.first_argmax(z)
    base = numerics.log_probs(s, 1.0)
    down = numerics.log_probs(s + _corner(s.shape, y, a, -1.0), 1.0)[rows, y]
    up = numerics.log_probs(s + _corner(s.shape, y, a, 1.0), 1.0)[rows, y]
    nll = np.maximum(base[rows, y] - down, up - base[rows, y])
    conf = np.exp(base[rows, top])
    c_lo = np.exp(numerics.log_probs(s + _corner(s.shape, top, a, -1.0), 1.0)[rows, top])
    c_hi = np.exp(numerics.log_probs(s + _corner(s.shape, top, a, 1.0), 1.0)[rows, top])
    p = np.exp(base)
    factor = np.exp(np.minimum(2.0 * a, 700.0)) - 1.0  # finite; the Brier bound is capped at 2 anyway
    onehot = np.zeros_like(p)
    onehot[rows, y] = 1.0
    # |p'_j - p_j| <= factor p_j; |p'_j + p_j - 2 y_j| is at most p_j (2 + factor) off the label and
    # 2 - p_y (1 + exp(-2a)) on it.
    far = np.where(onehot > 0, 2.0 - p * (1.0 + np.exp(-2.0 * a))[:, None], p * (2.0 + factor)[:, None])
    with np.errstate(over="ignore", invalid="ignore"):
        brier = np.nan_to_num(factor * (p * far).sum(axis=1), nan=np.inf)
    return {"nll": nll, "conf": conf, "c_lo": c_lo, "c_hi": c_hi, "brier": brier, "top": top.astype(np.float64)}


@np.errstate(over="ignore")  # the per-row Brier bounds may be inf (see row_extremes); the mean is capped at 2
def figure_bounds(z: F64, y: NDArray[np.int64], beta: float, a: F64, tau: float, mce: float) -> dict[str, Any]:
    """Each figure's worst-case |change| for one pool and scale (FORMAT.md's rule)."""
    n = len(y)
    ex = row_extremes(z, y, beta, a)
    ordered = np.sort(z, axis=1)
    flips = (ordered[:, -1] - ordered[:, -2]) <= 2.0 * tau
    conf, c_lo, c_hi = ex["conf"], ex["c_lo"], ex["c_hi"]
    reach = np.maximum(c_hi - conf, conf - c_lo)
    lo_bin, hi_bin = numerics.bin_index(c_lo), numerics.bin_index(c_hi)
    edge = lo_bin != hi_bin
    moving = edge | flips
    right = (ex["top"].astype(np.int64) == y).astype(np.float64)
    after = np.where(flips, np.maximum(c_hi, 1.0 - c_lo), np.maximum(abs(right - c_lo), abs(right - c_hi)))
    ece = (reach[~moving].sum() + (abs(right - conf) + after)[moving].sum()) / n
    hi_gap, lo_gap = 0.0, 0.0
    for b in range(numerics.N_BINS):
        stays = ~moving & (lo_bin == b)
        m = int((moving & (lo_bin <= b) & (b <= hi_bin)).sum())
        size = int(stays.sum())
        if size == 0 and m == 0:
            continue
        g, d = abs(float((right - conf)[stays].sum())), float(reach[stays].sum())
        candidates = [(g + d + m) / (size + m)] + ([(g + d) / size] if size else [])
        hi_gap = max(hi_gap, min(1.0, max(candidates)))
        if size:
            lo_gap = max(lo_gap, max(0.0, g - d - m) / (size + m))
    # A figure cannot move further than its range: Brier lies in [0, 2], ECE, MCE and confidence in [0, 1].
    return {"accuracy": int(flips.sum()) / n, "mean_confidence": min(1.0, float(reach.mean())),
            "nll": float(ex["nll"].mean()), "brier": min(2.0, float(ex["brier"].mean())), "ece": min(1.0, float(ece)),
            "mce": float(max(hi_gap - mce, mce - lo_gap, 0.0)),
            "rows_that_could_flip": int(flips.sum()), "rows_near_bin_edge": int(edge.sum())}


def expected_bounds(ctx: Context) -> dict[str, Any]:
    """metrics.json's reproduction_bounds as this module derives them from the logits."""
    m = ctx.doc(layout.METRICS_JSON)
    tau, source = tolerance(ctx)
    beta = ctx.doc(layout.TEMPERATURE_JSON)["beta"]
    cal = ctx.table("calibration")
    low, high = temperature_range(cal.z, cal.y, tau, beta, ctx.doc(layout.PROTOCOL_JSON))
    moved = max(high - beta, beta - low)
    pools = {}
    for pool in POOL_NAMES:
        data = ctx.table(pool)
        raw_a = np.full(len(data.y), tau)
        cal_a = high * tau + moved * _spread(data.z) / 2.0
        published = m["pools"][pool]
        pools[pool] = {"raw": figure_bounds(data.z, data.y, 1.0, raw_a, tau, published["raw"]["mce"]),
                       "calibrated": figure_bounds(data.z, data.y, beta, cal_a, tau, published["calibrated"]["mce"])}
    return {"logit_tolerance": tau, "source": source,
            "temperature": {"beta_low": low, "beta_high": high, "t_low": 1.0 / high, "t_high": 1.0 / low},
            "pools": pools}


def bounds(ctx: Context) -> str:
    """metrics.json's reproduction_bounds are those the logits and the tolerance give."""
    expected = expected_bounds(ctx)
    m = ctx.doc(layout.METRICS_JSON)
    ctx.bounds = expected
    if "reproduction_bounds" not in m:
        return bounds_words(expected) + " (derived here; this bundle was written before reproduction_bounds)"
    diffs: list[str] = []
    numerics.compare(m["reproduction_bounds"], expected, "reproduction_bounds", METRIC_TOL, diffs, rel=METRIC_TOL)
    if diffs:
        ctx.bounds = None
        raise Failed("metrics.json reproduction_bounds differ from the logits: " + "; ".join(diffs[:3]) + ".")
    return bounds_words(expected)
