"""The pre-registered estimators of metrics.json `estimators`, recomputed from the audit logits.

Numpy only, and by other methods than the job's (job/estimators.py) where the definition allows:

- binned: equal-mass edges by index arithmetic on the sorted values (the job splits the sorted
  array), bins by numpy.digitize(right=True) (the job: searchsorted), per-bin sums by bincount;
- ks: per distinct confidence by numpy.unique and bincount, then one cumulative sum;
- the bootstrap intervals: each resample as draw counts over the audit rows (the job gathers the
  drawn rows), scored on the rows sorted once, many resamples at a time: a bin's sums are
  differences of running sums along the sorted column at that resample's edges, its equal-mass
  edges found from its running draw counts; resamples drawn and scored block by block so that
  memory stays bounded at the format's limits (verify/bootstrap.py);
- smooth-ece: the reflected Gaussian smoothing of relplot evaluated directly, as a sum over the
  occupied grid points and their two mirror images, at only the grid points the interpolation
  reads (the job convolves the whole grid with numpy.convolve);
- bin-intervals: Clopper-Pearson bounds by bisection on binomial tail sums (the job: on the
  regularised incomplete beta function by continued fraction).

The definitions themselves are stated in docs/GUIDE.md, "The estimators"."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bundle import layout
from bundle.memo import memoized
from bundle.wording import NO_CLAIM, interval_verdict
from verify import bootstrap, numerics
from verify.context import METRIC_TOL, Context
from verify.numerics import F64, I64
from verify.result import Failed

NEEDS = {"binned": ("binning", "bins", "norm", "debias"), "ks": (),
         "smooth-ece": ("bandwidth", "eps", "refine", "mesh"), "bin-intervals": ("method", "level")}
SCORE_CELLS = 1 << 19
"""Draw counts scored at once (resamples x rows): each of the scorer's few temporaries is 4 MB."""
UNDEFINED = "no bin holds two rows, so the debiased estimate is undefined"


def wanted(ctx: Context) -> bool:
    """Whether the protocol pre-registers estimators or metrics.json holds some (when either
    document is unreadable its own check has failed, and the entry is reported as not run)."""
    protocol, metrics = ctx.docs.get(layout.PROTOCOL_JSON), ctx.docs.get(layout.METRICS_JSON)
    return (isinstance(protocol, dict) and bool(protocol.get("metrics", {}).get("estimators"))) or (
        isinstance(metrics, dict) and "estimators" in metrics) or protocol is None or metrics is None


# ---- binned ----------------------------------------------------------------------------------

def run_starts(n: int, bins: int) -> I64:
    """The sample position where each equal-mass run after the first starts: min(bins, n) runs of
    a sorted sample of n, the first n % runs of them one longer."""
    runs = min(bins, n)
    size, extra = divmod(n, runs)
    first = np.arange(1, runs, dtype=np.int64)  # run i + 1 starts after i + 1 runs
    starts: I64 = first * size + np.minimum(first, extra)
    return starts


def upper_edges(values: F64, entry: dict[str, Any]) -> F64:
    """Upper bin edges of `values` (a resample's are _Resampler._edges_block's): equal-width, or
    halfway between the last value of one equal-mass run and the first of the next, then 1.0."""
    bins = int(entry["bins"])
    if entry["binning"] == "equal-width":
        return np.arange(1, bins + 1) / float(bins)
    ordered = np.sort(values)
    starts = run_starts(len(ordered), bins)
    return np.unique(np.append((ordered[starts - 1] + ordered[starts]) / 2.0, 1.0))


def calibration_error(values: F64, outcomes: F64, edges: F64, norm: str, debias: bool) -> float | None:
    """The plug-in or debiased error of the rows (values, outcomes) in the bins with upper `edges`."""
    which = np.digitize(values, edges, right=True)
    count = np.bincount(which, minlength=len(edges)).astype(np.float64)
    sum_p = np.bincount(which, weights=values, minlength=len(edges))
    sum_y = np.bincount(which, weights=outcomes, minlength=len(edges))
    power = 1.0 if norm == "l1" else 2.0
    keep = count >= (2 if debias else 1)
    if debias and not keep.any():
        return None
    c, mp, my = count[keep], sum_p[keep] / count[keep], sum_y[keep] / count[keep]
    terms = np.abs(mp - my) ** power
    if debias:
        terms = terms - my * (1.0 - my) / (c - 1.0)
    total = float(np.sum(c * terms) / len(values))
    return math.sqrt(max(total, 0.0)) if debias else total ** (1.0 / power)


def binned(entry: dict[str, Any], p: F64, y: I64, pred: I64) -> float | None:
    rows = np.arange(len(y))
    if entry.get("confidence", "top-label") == "top-label":
        conf = p[rows, pred]
        return calibration_error(conf, (pred == y) * 1.0, upper_edges(conf, entry), entry["norm"], entry["debias"])
    power = 1.0 if entry["norm"] == "l1" else 2.0
    total = 0.0
    for k in range(p.shape[1]):
        err = calibration_error(p[:, k], (y == k) * 1.0, upper_edges(p[:, k], entry), entry["norm"], entry["debias"])
        if err is None:
            return None
        total += err ** power
    return float((total / p.shape[1]) ** (1.0 / power))


# ---- KS --------------------------------------------------------------------------------------

def ks(conf: F64, correct: F64) -> float:
    distinct, inverse = np.unique(conf, return_inverse=True)
    per_value = np.bincount(inverse, weights=correct - conf, minlength=len(distinct))
    return float(np.max(np.abs(np.cumsum(per_value))) / len(conf))


# ---- smooth ECE ------------------------------------------------------------------------------

def smoothed_at(f: F64, weights: list[F64], x: F64, sigma: float) -> list[F64]:
    """relplot's reflected-Gaussian smoothing of each weight vector at points x, by direct sums."""
    g = max(2000, round(20 / sigma)) // 2 + 1
    half = (g - 1) // 2
    cell = np.clip(np.floor(f * (g - 1)).astype(np.int64), 0, g - 2)
    frac = f * (g - 1) - cell
    grids = [np.bincount(cell, weights=(1 - frac) * w, minlength=g) + np.bincount(cell + 1, weights=frac * w,
                                                                                   minlength=g) for w in weights]
    occupied = np.flatnonzero(np.any(np.stack(grids) != 0, axis=0))
    at = np.clip(np.floor(x * (g - 1)).astype(np.int64), 0, g - 2)
    needed = np.unique(np.concatenate([at, at + 1]))
    norm = math.sqrt(2 * math.pi) * sigma
    smooth = [np.zeros(g) for _ in weights]
    for start in range(0, len(needed), 512):
        i = needed[start:start + 512, None].astype(np.float64)
        kernel = np.zeros((i.shape[0], len(occupied)))
        # Each occupied point j, its mirror -j at 0 (j >= 1) and 4h - j at 1 (j <= 2h - 1).
        images = ((occupied, occupied >= 0), (-occupied, occupied >= 1),
                  (4 * half - occupied, occupied <= 2 * half - 1))
        for image, valid in images:
            d = i - image[None, :].astype(np.float64)
            inside = (np.abs(d) <= half) & valid[None, :]
            kernel += np.where(inside, np.exp(-(d / (g - 1)) ** 2 / (2 * sigma ** 2)) / norm, 0.0)
        for out, grid in zip(smooth, grids):
            out[needed[start:start + 512]] = kernel @ grid[occupied]
    frac_x = x * (g - 1) - at
    return [s[at] * (1 - frac_x) + s[at + 1] * frac_x for s in smooth]


def smooth_ece_at(conf: F64, correct: F64, sigma: float, mesh: int) -> float:
    x = np.linspace(0, 1, max(round(10 / sigma), mesh))
    residual_sum, density = smoothed_at(conf, [conf - correct, np.ones_like(conf)], x, sigma)
    density = density + 0.0001
    return float(np.sum(np.abs(residual_sum / density) * density) / np.sum(density))


def smooth_ece(entry: dict[str, Any], conf: F64, correct: F64) -> tuple[float, float]:
    mesh = int(entry["mesh"])
    if entry["bandwidth"] != "fixed-point":
        sigma = float(entry["bandwidth"])
        return smooth_ece_at(conf, correct, sigma, mesh), sigma

    def narrow(s: float) -> bool:
        return s < entry["eps"] or s < smooth_ece_at(conf, correct, s, mesh)

    sigma, below = 1.0, 0.0
    if not narrow(sigma):
        for _ in range(int(entry["refine"])):
            mid = (sigma + below) / 2
            sigma, below = (sigma, mid) if narrow(mid) else (mid, below)
    return smooth_ece_at(conf, correct, sigma, mesh), sigma


# ---- Clopper-Pearson -------------------------------------------------------------------------

def _tail(log_pmf_terms: Any, p: float, k_from: int, k_to: int, n: int) -> float:
    """P(k_from <= X <= k_to) for X ~ Binomial(n, p), by summing pmf terms."""
    i = np.arange(k_from, k_to + 1, dtype=np.float64)
    logs = log_pmf_terms[k_from:k_to + 1] + i * math.log(p) + (n - i) * math.log1p(-p)
    return float(np.exp(logs).sum())


def clopper_pearson(k: int, n: int, level: float) -> tuple[float, float]:
    alpha = 1.0 - level
    log_choose = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(n + 1)])

    def solve(below_target: Any) -> float:
        lo, hi = 0.0, 1.0
        for _ in range(100):
            mid = lo + (hi - lo) / 2
            lo, hi = (mid, hi) if below_target(mid) else (lo, mid)
        return lo + (hi - lo) / 2

    lower = 0.0 if k == 0 else solve(lambda p: _tail(log_choose, p, k, n, n) < alpha / 2)
    upper = 1.0 if k == n else solve(lambda p: _tail(log_choose, p, 0, k, n) > alpha / 2)
    return lower, upper


def bin_intervals(conf: F64, correct: F64, level: float) -> list[dict[str, Any]]:
    which = numerics.bin_index(conf)
    out: list[dict[str, Any]] = []
    for b in range(10):
        count, hits = int(np.sum(which == b)), int(np.sum(correct[which == b]))
        if count == 0:
            out.append({"count": 0, "correct": 0, "lower": None, "upper": None, "reason": "empty bin"})
            continue
        lower, upper = clopper_pearson(hits, count, level)
        out.append({"count": count, "correct": hits, "lower": lower, "upper": upper})
    return out


# ---- the record ------------------------------------------------------------------------------

def _score(entry: dict[str, Any], p: F64, y: I64, pred: I64) -> float | None:
    rows = np.arange(len(y))
    if entry["kind"] == "binned":
        return binned(entry, p, y, pred)
    conf, correct = p[rows, pred], (pred == y) * 1.0
    return ks(conf, correct) if entry["kind"] == "ks" else smooth_ece(entry, conf, correct)[0]


def _quantiles(values: list[float | None], level: float) -> tuple[float, float] | None:
    if any(v is None for v in values):
        return None
    q = np.quantile(np.array(values, dtype=np.float64), [(1.0 - level) / 2.0, (1.0 + level) / 2.0], method="linear")
    return float(q[0]), float(q[1])


class _Resampler:
    """Scores the audit rows' resamples for one scale (raw or calibrated) from draw counts: each
    probability column sorted once, each resample a weight vector over the rows, so that no drawn
    copy of the (n, K) probabilities is ever made."""

    def __init__(self, p: F64, y: I64, pred: I64) -> None:
        rows = np.arange(len(y))
        self.p, self.y, self.pred = p, y, pred
        self.conf, self.correct = p[rows, pred], (pred == y) * 1.0
        self._sorted: dict[int, tuple[I64, F64, F64]] = {}

    def column(self, k: int) -> tuple[I64, F64, F64]:
        """(order, sorted values, outcomes in that order) of the top-label column (k = -1) or class k."""
        if k not in self._sorted:
            values, outcomes = (self.conf, self.correct) if k < 0 else (self.p[:, k], (self.y == k) * 1.0)
            order = np.argsort(values, kind="stable")
            self._sorted[k] = (order, values[order], outcomes[order])
        return self._sorted[k]

    def smooth(self, entry: dict[str, Any], rows: I64) -> float | None:
        """Smooth ECE of the resample that drew `rows`: the bandwidth search compares floats, so the
        drawn rows themselves are scored, in draw order."""
        return smooth_ece(entry, self.conf[rows], self.correct[rows])[0]

    def block(self, entry: dict[str, Any], draws: F64) -> list[float | None] | None:
        """The estimator on every resample of a block at once (`draws`: B x n draw counts), or None
        for an estimator scored one resample at a time (smooth ECE). The bins' sums are differences
        of prefix sums along the sorted column, at the positions of each resample's edges."""
        if entry["kind"] == "ks":
            return [float(v) for v in self._ks_block(draws)]
        if entry["kind"] != "binned":
            return None
        if entry.get("confidence", "top-label") == "top-label":
            return _optional(self._binned_block(entry, -1, draws))
        power = 1.0 if entry["norm"] == "l1" else 2.0
        total = np.zeros(draws.shape[0])
        for k in range(self.p.shape[1]):
            total += self._binned_block(entry, k, draws) ** power  # NaN (undefined) stays NaN
        return _optional((total / self.p.shape[1]) ** (1.0 / power))

    def _ks_block(self, draws: F64) -> F64:
        order, values, outcomes = self.column(-1)
        last = np.append(np.flatnonzero(values[1:] != values[:-1]), len(values) - 1)  # each distinct value's last row
        drift = np.cumsum(draws[:, order] * (outcomes - values), axis=1)[:, last]
        result: F64 = np.max(np.abs(drift), axis=1) / draws.shape[1]
        return result

    def _binned_block(self, entry: dict[str, Any], k: int, draws: F64) -> F64:
        """Each resample's binned error of column k (NaN where the debiased estimate is undefined)."""
        order, values, outcomes = self.column(k)
        w = draws[:, order]
        cum_w = np.cumsum(w, axis=1)
        edges = self._edges_block(values, entry, cum_w)
        # Bin j holds the sorted rows [at[j], at[j + 1]): the values in (edge j-1, edge j], as
        # numpy.digitize(right=True) bins them, and a last bin for anything above the top edge.
        b, n = w.shape
        at = np.concatenate([np.zeros((b, 1), np.int64), np.searchsorted(values, edges, side="right"),
                             np.full((b, 1), n, np.int64)], axis=1)
        zero = np.zeros((b, 1))
        sums = [np.diff(np.take_along_axis(np.concatenate([zero, s], axis=1), at, axis=1), axis=1)
                for s in (cum_w, np.cumsum(w * values, axis=1), np.cumsum(w * outcomes, axis=1))]
        count, sum_p, sum_y = sums
        power = 1.0 if entry["norm"] == "l1" else 2.0
        keep = count >= (2 if entry["debias"] else 1)
        safe = np.where(keep, count, 1.0)
        mp, my = sum_p / safe, sum_y / safe
        terms = np.abs(mp - my) ** power
        if entry["debias"]:
            terms = terms - my * (1.0 - my) / np.where(keep, count - 1.0, 1.0)
        total = np.sum(np.where(keep, count * terms, 0.0), axis=1) / cum_w[:, -1]
        if entry["debias"]:
            out: F64 = np.where(keep.any(axis=1), np.sqrt(np.maximum(total, 0.0)), np.nan)
            return out
        out = total ** (1.0 / power)
        return out

    @staticmethod
    def _edges_block(values: F64, entry: dict[str, Any], cum_w: F64) -> F64:
        """upper_edges of each resample (rows of cum_w: the running draw counts along the sorted
        values), as a B x m matrix; a repeated edge makes an empty bin, which no error counts."""
        b = cum_w.shape[0]
        bins = int(entry["bins"])
        if entry["binning"] == "equal-width":
            return np.broadcast_to(np.arange(1, bins + 1) / float(bins), (b, bins))
        n = cum_w.shape[1]  # every resample draws as many rows as the pool has
        starts = run_starts(n, bins).astype(np.float64)
        # The rows at sample positions s - 1 and s of each resample, found in one search: row r of
        # the running counts is lifted by r * (n + 1), above every value of the rows before it.
        lift = np.arange(b, dtype=np.float64)[:, None] * (n + 1)
        flat = (cum_w + lift).ravel()
        where = [np.searchsorted(flat, (q + lift).ravel(), side="right").reshape(b, -1) - np.arange(b)[:, None] * n
                 for q in (starts - 1.0, starts)]
        middle = (values[where[0]] + values[where[1]]) / 2.0
        return np.concatenate([middle, np.ones((b, 1))], axis=1)


def _optional(values: F64) -> list[float | None]:
    return [None if np.isnan(v) else float(v) for v in values]


def resample_scores(entries: list[dict[str, Any]], scales: dict[str, F64], y: I64, pred: I64, seed: int,
                    resamples: int) -> dict[str, dict[str, list[float | None]]]:
    """id -> scale -> the estimator on each resample, in resample order, for every entry; drawn and
    scored block by block (bounded memory)."""
    n = len(y)
    scorers = {which: _Resampler(p, y, pred) for which, p in scales.items()}
    out: dict[str, dict[str, list[float | None]]] = {e["id"]: {which: [] for which in scales} for e in entries}
    cells = bootstrap.BLOCK_CELLS
    counts = np.empty((min(resamples, max(1, cells // max(n, 1))), n))
    step = max(1, SCORE_CELLS // max(n, 1))
    for block in bootstrap.resample_blocks(seed, resamples, n, cells):
        draws = bootstrap.draw_counts(block, n, counts)
        for start in range(0, block.shape[0], step):
            part = draws[start:start + step]
            for entry in entries:
                for which, scorer in scorers.items():
                    scores = scorer.block(entry, part)
                    if scores is None:
                        scores = [scorer.smooth(entry, rows) for rows in block[start:start + step]]
                    out[entry["id"]][which].extend(scores)
    return out


def expected_record(protocol: dict[str, Any], z: F64, y: I64, beta: float) -> dict[str, Any]:
    """metrics.json `estimators` as the protocol and the audit logits make it."""
    entries = protocol["metrics"]["estimators"]
    boot = protocol.get("bootstrap")
    resamples, seed = (int(boot["resamples"]), int(boot["seed"])) if boot else (0, 0)
    pred = numerics.first_argmax(z)
    scales = {"raw": numerics.probabilities(z, 1.0), "calibrated": numerics.probabilities(z, beta)}
    rows = np.arange(len(y))
    correct = (pred == y) * 1.0
    for index, entry in enumerate(entries):
        missing = [name for name in NEEDS[entry["kind"]] if name not in entry]
        if missing:
            raise Failed(f"the protocol's metrics.estimators[{index}] ({entry['kind']}) has no {missing[0]}.")
        if entry.get("debias") and entry.get("norm") != "l2":
            raise Failed(f"the protocol's metrics.estimators[{index}] debiases norm {entry.get('norm')!r}; "
                         "only l2 has a debiased estimator.")
        if "interval" in entry and boot is None:
            raise Failed(f"the protocol's estimator {entry['id']!r} asks for a bootstrap interval without a "
                         "bootstrap section.")
    with_interval = [e for e in entries if "interval" in e]
    scored = resample_scores(with_interval, scales, y, pred, seed, resamples) if with_interval else {}
    results: dict[str, Any] = {}
    for entry in entries:
        out: dict[str, Any] = {"kind": entry["kind"]}
        for which, p in scales.items():
            if entry["kind"] == "bin-intervals":
                out[which] = {"bins": bin_intervals(p[rows, pred], correct, float(entry["level"]))}
            elif entry["kind"] == "smooth-ece":
                smooth, sigma = smooth_ece(entry, p[rows, pred], correct)
                out[which] = {"value": smooth, "bandwidth": sigma}
            else:
                value = _score(entry, p, y, pred)
                out[which] = {"value": value} if value is not None else {"value": None, "reason": UNDEFINED}
        if "interval" in entry:
            level = float(entry["interval"]["level"])
            draws = scored[entry["id"]]
            diffs = [None if a is None or b is None else b - a for a, b in zip(draws["raw"], draws["calibrated"])]
            for which in scales:
                q = _quantiles(draws[which], level)
                out[which]["interval"] = None if q is None else {"lower": q[0], "upper": q[1]}
            q = _quantiles(diffs, level)
            point = (None if out["raw"]["value"] is None or out["calibrated"]["value"] is None
                     else out["calibrated"]["value"] - out["raw"]["value"])
            if q is None or point is None:
                out["difference"] = {"point": point, "lower": None, "upper": None, "verdict": NO_CLAIM,
                                     "reason": "a resample left the estimate undefined"}
            else:
                out["difference"] = {"point": point, "lower": q[0], "upper": q[1],
                                     "verdict": interval_verdict(q[0], q[1])}
        results[entry["id"]] = out
    return {"pool": "audit", "resamples": resamples, "seed": seed, "statistic": "calibrated minus raw",
            "results": results}


_expected = memoized(expected_record)
"""expected_record, computed once per process for the same protocol, logits and beta (bundle/memo.py)."""


def recomputed(ctx: Context) -> str:
    """Every pre-registered estimator recomputed, raw and calibrated, with its intervals."""
    protocol = ctx.doc(layout.PROTOCOL_JSON)
    found = ctx.doc(layout.METRICS_JSON).get("estimators")
    if not protocol["metrics"].get("estimators"):
        raise Failed("metrics.json holds estimators the protocol does not pre-register.")
    if found is None:
        raise Failed("the protocol pre-registers estimators but metrics.json has none.")
    data = ctx.table("audit")
    expected = _expected(protocol, data.z, data.y, float(ctx.doc(layout.TEMPERATURE_JSON)["beta"]))
    diffs: list[str] = []
    numerics.compare(found, expected, "estimators", METRIC_TOL, diffs)
    if diffs:
        more = f" (+{len(diffs) - 3} more)" if len(diffs) > 3 else ""
        raise Failed("metrics.json estimators differ from the logits: " + "; ".join(diffs[:3]) + more + ".")
    return (f"{len(expected['results'])} estimators, raw and calibrated, with their intervals, "
            f"within {METRIC_TOL:g}")
