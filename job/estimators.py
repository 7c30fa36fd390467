"""The pre-registered calibration estimators of one pool (job.estimator_spec), raw and calibrated.

Definitions follow the reference implementations they are tested against
(tests/job/test_estimator_references.py; docs/GUIDE.md, "The estimators"):

- binned (Kumar, Liang & Ma 2019, `uncertainty-calibration`'s `_get_ce`): bins are right-closed,
  (e_{b-1}, e_b], the first also holding 0 (`bisect_left` on the upper edges). Equal-width upper
  edges are b / B; equal-mass ones (`get_equal_bins`) split the sorted values into min(B, n) runs
  (numpy.array_split) and put an edge halfway between consecutive runs, then 1.0 (repeats merged).
  Plug-in: (sum_b n_b/n |mean p_b - mean y_b|^q)^(1/q), q = 1 (l1) or 2 (l2). Debiased (l2 only):
  sqrt(max(0, sum_b n_b/n ((mean p_b - mean y_b)^2 - ybar_b (1 - ybar_b) / (n_b - 1)))), a bin of
  fewer than two rows adding 0. `top-label` scores the top probability against correctness (the
  predicted class is the first argmax of the logits); `classwise` averages over classes k the error
  of p_k against 1[y = k] (q-th powers averaged, then the q-th root: Kumar's `marginal` mode).
- ks (Gupta et al. 2021): max over thresholds t of |(1/n) sum_i (correct_i - conf_i) 1[conf_i <= t]|,
  the thresholds being the distinct confidences (so ties are taken together, in any order).
- smooth-ece (Blasiok & Nakkiran 2024, `relplot` 1.0.3's `smECE` and `smooth_ece`, reproduced step
  for step, its grid discretisation included): residuals conf - correct are spread linearly onto a
  grid of G = max(2000, round(20 / sigma)) // 2 + 1 points, convolved with a Gaussian of width
  sigma reflected at 0 and 1 (numpy.convolve), read back by linear interpolation at
  max(round(10 / sigma), mesh) points; the value is the density-weighted mean absolute smoothed
  residual (density + 1e-4). The bandwidth is fixed, or relplot's fixed point: with
  narrow(s) = s < eps or s < smECE_s, sigma = 1 if narrow(1), else `refine` bisection steps on
  [0, 1] keeping the upper end where narrow is false.
- bin-intervals: the Clopper-Pearson interval of each of the protocol's 10 ECE bins' accuracy at
  `level` (beta quantiles, by bisection on the regularised incomplete beta function).

Intervals: the paired percentile bootstrap over the protocol's `bootstrap` resamples (the very
matrix of data/bootstrap.json), each resample scored raw and calibrated; the difference is
calibrated minus raw, with the verdict rule of data/bootstrap.json.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from bundle.wording import NO_CLAIM, interval_verdict
from job.bootstrap import resample_blocks
from job.calibration import softmax
from job.estimator_spec import EstimatorSpec
from job.metrics import BINS, bin_index

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]


# ---- binned estimators (Kumar et al.) ---------------------------------------------------------

def equal_width_edges(bins: int) -> F64:
    """Upper bin edges b / B, b = 1..B."""
    return np.array([b * 1.0 / bins for b in range(1, bins + 1)])


def equal_mass_edges(values: F64, bins: int) -> F64:
    """Upper edges of min(bins, n) runs of the sorted values: halfway between runs, then 1.0.

    The runs are numpy.array_split's: the first n % runs of them one row longer."""
    ordered = np.sort(values)
    runs = min(bins, len(ordered))
    size, longer = divmod(len(ordered), runs)
    ends = np.arange(1, runs) * size + np.minimum(np.arange(1, runs), longer)
    edges = (ordered[ends - 1] + ordered[ends]) / 2.0
    return np.unique(np.append(edges, 1.0))


@dataclass(frozen=True)
class BinMeans:
    """The rows of each right-closed bin: its size, and the mean value and mean outcome of every
    non-empty bin (None for an empty one), in bin order, over n rows in all."""

    n: int
    sizes: tuple[int, ...]
    value_means: tuple[float | None, ...]
    outcome_means: tuple[float | None, ...]


def bin_means(values: F64, outcomes: F64, edges: F64) -> BinMeans:
    """`values` and their 0/1 `outcomes` in the right-closed bins with upper `edges`."""
    n = len(values)
    which = np.searchsorted(edges, values, side="left")
    order = np.argsort(which, kind="stable")
    # each bin's rows in row order, as slices of the ordered columns; a bin's mean is its
    # (pairwise) sum over its size, exactly numpy.mean's arithmetic
    bounds = [0, *np.searchsorted(which[order], np.arange(1, len(edges))).tolist(), n]
    ordered_values, ordered_outcomes = values[order], outcomes[order]
    sizes, value_means, outcome_means = [], [], []
    for start, stop in itertools.pairwise(bounds):
        size = stop - start
        sizes.append(size)
        value_means.append(float(np.add.reduce(ordered_values[start:stop]) / size) if size else None)
        outcome_means.append(float(np.add.reduce(ordered_outcomes[start:stop]) / size) if size else None)
    return BinMeans(n, tuple(sizes), tuple(value_means), tuple(outcome_means))


def error_of_bins(bins: BinMeans, norm: str, debias: bool) -> float | None:
    """The plug-in or debiased calibration error of binned rows; None for a debiased estimate with
    no bin of two rows."""
    power = 1 if norm == "l1" else 2
    total = 0.0
    usable = False
    for size, vbar, ybar in zip(bins.sizes, bins.value_means, bins.outcome_means, strict=True):
        if vbar is None or ybar is None or (debias and size < 2):  # empty, or too small to debias
            continue
        usable = True
        term = abs(vbar - ybar) ** power
        if debias:
            term -= ybar * (1.0 - ybar) / (size - 1.0)
        total += size / bins.n * term
    if debias:
        return math.sqrt(max(total, 0.0)) if usable else None
    return float(total ** (1.0 / power))


def binned_error(values: F64, outcomes: F64, edges: F64, norm: str, debias: bool) -> float | None:
    """The plug-in or debiased calibration error of `values` against 0/1 `outcomes` in the
    right-closed bins with upper `edges`; None for a debiased estimate with no bin of two rows."""
    return error_of_bins(bin_means(values, outcomes, edges), norm, debias)


Shared = dict[Any, Any]
"""What the estimators scored on the same rows share, filled as they need it: the top-label
columns, and the bins of each column under each binning. Estimators that differ only in the norm
(the protocol's plug-in l1 and debiased l2 on equal-mass bins) bin the rows once."""


def _top_label(probs: F64, labels: I64, pred: I64, shared: Shared | None) -> tuple[F64, F64]:
    """Each row's top-label confidence and 0/1 correctness (kept in `shared` when given)."""
    shared = {} if shared is None else shared
    if "top-label" not in shared:
        shared["top-label"] = (probs[np.arange(len(labels)), pred], (pred == labels).astype(np.float64))
    top: tuple[F64, F64] = shared["top-label"]
    return top


def _combined(spec: EstimatorSpec, classes: int, bins_of: Callable[[int], BinMeans]) -> float | None:
    """The binned estimator from the bins of each column it scores: `bins_of(-1)` for the top-label
    column, `bins_of(k)` for class k's."""
    if spec.confidence == "top-label":
        return error_of_bins(bins_of(-1), spec.norm, spec.debias)
    power = 1 if spec.norm == "l1" else 2
    per_class = []
    for k in range(classes):
        err = error_of_bins(bins_of(k), spec.norm, spec.debias)
        if err is None:
            return None
        per_class.append(err ** power)
    return float(float(np.mean(per_class)) ** (1.0 / power))


def _bins_key(spec: EstimatorSpec, column: int) -> tuple[Any, ...]:
    return ("bins", column, spec.binning, spec.bins)


def binned(spec: EstimatorSpec, probs: F64, labels: I64, pred: I64, shared: Shared | None = None) -> float | None:
    """One binned estimator of probabilities `probs` (n, K); `shared`: what estimators on the
    same rows share (Shared), or None."""
    shared = {} if shared is None else shared

    def bins_of(column: int) -> BinMeans:
        key = _bins_key(spec, column)
        if key not in shared:
            if column < 0:
                values, outcomes = _top_label(probs, labels, pred, shared)
            else:
                values, outcomes = probs[:, column], (labels == column).astype(np.float64)
            mass = spec.binning == "equal-mass"
            edges = equal_mass_edges(values, spec.bins) if mass else equal_width_edges(spec.bins)
            shared[key] = bin_means(values, outcomes, edges)
        found: BinMeans = shared[key]
        return found

    return _combined(spec, probs.shape[1], bins_of)


# ---- KS calibration error ---------------------------------------------------------------------

def ks_error(conf: F64, correct: F64) -> float:
    """max over distinct confidences t of |(1/n) sum_{conf_i <= t} (correct_i - conf_i)|."""
    order = np.argsort(conf, kind="stable")
    sorted_conf = conf[order]
    cumulative = np.cumsum(correct[order] - sorted_conf) / len(conf)
    last_of_tie = np.append(sorted_conf[1:] != sorted_conf[:-1], True)
    return float(np.abs(cumulative[last_of_tie]).max())


# ---- smooth ECE (relplot 1.0.3) ----------------------------------------------------------------

def _round_to_grid(f: F64, y: F64, points: int) -> F64:
    values = np.zeros(points)
    cell = (f * (points - 1)).astype(int).clip(0, points - 2)
    frac = f * (points - 1) - cell
    np.add.at(values, cell, (1 - frac) * y)
    np.add.at(values, cell + 1, frac * y)
    return values


def _convolved(x: F64, kernel: F64, start: int, count: int) -> F64:
    """numpy.convolve(x, kernel, "valid")[start: start + count], as each window's elementwise
    products summed by numpy's pairwise sum. numpy.convolve takes its dot products from the BLAS
    kernel OpenBLAS selects for the machine (or OPENBLAS_CORETYPE names), whose rounding differs
    between kernels; this sum's bits are the same wherever it runs."""
    windows = np.lib.stride_tricks.sliding_window_view(x, len(kernel))[start: start + count]
    reversed_kernel = kernel[::-1].copy()
    out = np.empty(len(windows))
    step = max(1, (1 << 20) // len(kernel))  # about 8 MB of products at a time
    for s in range(0, len(windows), step):
        out[s: s + step] = (windows[s: s + step] * reversed_kernel).sum(axis=1)
    return out


def _reflected_smooth(f: F64, y: F64, x_eval: F64, sigma: float) -> F64:
    points = max(2000, round(20 / sigma)) // 2 + 1
    values = _round_to_grid(f, y, points)
    t = np.linspace(0, 1, points)
    kernel = np.exp(-(t - 0.5) * (t - 0.5) / (2 * sigma ** 2)) / (np.sqrt(2 * np.pi) * sigma)
    extended = np.concatenate([np.flip(values)[:-1], values, np.flip(values)[1:]])
    smoothed = _convolved(extended, kernel, points // 2, points)
    # Linear interpolation of grid point i / (points - 1) -> smoothed[i] at x_eval.
    cell = (x_eval * (points - 1)).astype(int).clip(0, points - 2)
    frac = (x_eval - cell * (1 / (points - 1))) / (1 / (points - 1))
    out: F64 = smoothed[cell] * (1 - frac) + smoothed[cell + 1] * frac
    return out


def smooth_ece_at(conf: F64, correct: F64, sigma: float, mesh: int) -> float:
    """relplot's smooth_ece(conf, correct, sigma) with `mesh` evaluation points at least."""
    t = np.linspace(0, 1, max(round(10 / sigma), mesh))
    residual = conf - correct
    ys = _reflected_smooth(conf, residual, t, sigma)
    density = _reflected_smooth(conf, np.ones_like(residual), t, sigma) + 0.0001
    return float(np.sum(np.abs(ys / density) * density) / np.sum(density))


def smooth_ece(spec: EstimatorSpec, conf: F64, correct: F64) -> tuple[float, float]:
    """(smooth ECE, its bandwidth sigma) under the spec's bandwidth rule."""
    if spec.bandwidth is not None:
        return smooth_ece_at(conf, correct, spec.bandwidth, spec.mesh), spec.bandwidth

    def too_narrow(sigma: float) -> bool:
        return sigma < spec.eps or sigma < smooth_ece_at(conf, correct, sigma, spec.mesh)

    if too_narrow(1.0):  # relplot's search_param starts by accepting its start, 1, on this test
        return smooth_ece_at(conf, correct, 1.0, spec.mesh), 1.0
    hi, lo = 1.0, 0.0
    for _ in range(spec.refine):
        mid = (hi + lo) / 2
        if too_narrow(mid):
            lo = mid
        else:
            hi = mid
    return smooth_ece_at(conf, correct, hi, spec.mesh), hi


# ---- Clopper-Pearson --------------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return h


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the beta distribution's CDF at x."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def beta_quantile(q: float, a: float, b: float) -> float:
    """The x in [0, 1] with I_x(a, b) = q, by 100 bisection steps (2^-100 wide)."""
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if regularized_beta(a, b, mid) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def clopper_pearson(successes: int, n: int, level: float) -> tuple[float, float]:
    """The exact two-sided interval of a binomial proportion: Beta(k, n-k+1) and Beta(k+1, n-k)
    quantiles at (1 - level)/2 and (1 + level)/2, 0 and 1 at the ends."""
    alpha = 1.0 - level
    lower = 0.0 if successes == 0 else beta_quantile(alpha / 2, successes, n - successes + 1)
    upper = 1.0 if successes == n else beta_quantile(1 - alpha / 2, successes + 1, n - successes)
    return lower, upper


def bin_intervals(conf: F64, correct: F64, level: float) -> list[dict[str, Any]]:
    """Per protocol ECE bin: count, correct and the Clopper-Pearson interval of its accuracy (null,
    with the reason, for an empty bin)."""
    which = bin_index(conf)
    out: list[dict[str, Any]] = []
    for b in range(BINS):
        members = which == b
        count, hits = int(members.sum()), int(correct[members].sum())
        if count == 0:
            out.append({"count": 0, "correct": 0, "lower": None, "upper": None, "reason": "empty bin"})
        else:
            lower, upper = clopper_pearson(hits, count, level)
            out.append({"count": count, "correct": hits, "lower": lower, "upper": upper})
    return out


# ---- one pool, raw and calibrated -------------------------------------------------------------

class Scorer(Protocol):
    """A scalar estimator: (probs, labels, pred, shared) -> value; `shared` (Shared, or None) is
    what the estimators scored on the same rows share."""

    def __call__(self, probs: F64, labels: I64, pred: I64, shared: Shared | None = None) -> float | None: ...


def scorer(spec: EstimatorSpec) -> Scorer:
    """The Scorer of a scalar estimator."""
    def score(probs: F64, labels: I64, pred: I64, shared: Shared | None = None) -> float | None:
        if spec.kind == "binned":
            return binned(spec, probs, labels, pred, shared)
        conf, correct = _top_label(probs, labels, pred, shared)
        return ks_error(conf, correct) if spec.kind == "ks" else smooth_ece(spec, conf, correct)[0]

    return score


NULL_REASON = "no bin holds two rows, so the debiased estimate is undefined"


def _scalar(value: float | None) -> dict[str, Any]:
    return {"value": value} if value is not None else {"value": None, "reason": NULL_REASON}


def _percentiles(draws: list[float | None], quantiles: tuple[float, float]) -> tuple[float, float] | None:
    if any(d is None for d in draws):
        return None
    q = np.quantile(np.asarray(draws, dtype=np.float64), list(quantiles), method="linear")
    return float(q[0]), float(q[1])


def estimator_results(specs: tuple[EstimatorSpec, ...], logits: F64, labels: I64, beta: float,
                      resamples: int, seed: int) -> dict[str, Any]:
    """metrics.json `estimators.results`: every estimator raw (beta = 1) and calibrated, with its
    paired bootstrap interval where the spec asks for one (`resamples` draws from `seed`)."""
    pred = logits.argmax(axis=1)
    probs = {"raw": softmax(logits), "calibrated": softmax(beta * logits)}
    shared: dict[str, Shared] = {which: {} for which in probs}  # the whole pool's, per scale
    results: dict[str, Any] = {}
    for spec in specs:
        entry: dict[str, Any] = {"kind": spec.kind}
        for which, p in probs.items():
            conf, correct = _top_label(p, labels, pred, shared[which])
            if spec.kind == "bin-intervals":
                entry[which] = {"bins": bin_intervals(conf, correct, spec.level)}
            elif spec.kind == "smooth-ece":
                value, sigma = smooth_ece(spec, conf, correct)
                entry[which] = {"value": value, "bandwidth": sigma}
            else:
                entry[which] = _scalar(scorer(spec)(p, labels, pred, shared[which]))
        results[spec.id] = entry
    drawn = _resample_scores(tuple(spec for spec in specs if spec.interval is not None), probs, labels, pred,
                             resamples, seed)
    for spec in specs:
        if spec.interval is not None:
            entry, draws = results[spec.id], drawn[spec.id]
            q = spec.interval.quantiles
            for which in ("raw", "calibrated"):
                bounds = _percentiles(draws[which], q)
                entry[which]["interval"] = (None if bounds is None else {"lower": bounds[0], "upper": bounds[1]})
            bounds = _percentiles(draws["difference"], q)
            point = (None if entry["raw"]["value"] is None or entry["calibrated"]["value"] is None
                     else entry["calibrated"]["value"] - entry["raw"]["value"])
            entry["difference"] = (
                {"point": point, "lower": None, "upper": None, "verdict": NO_CLAIM,
                 "reason": "a resample left the estimate undefined"}
                if bounds is None or point is None else
                {"point": point, "lower": bounds[0], "upper": bounds[1], "verdict": interval_verdict(*bounds)})
    return results


# ---- many resamples at once ---------------------------------------------------------------------
# A block of resamples is scored with whole-block array operations that give the bits of scoring
# each resample's gathered rows alone (bin_means, ks_error), which tests/job/test_estimator_blocks.py
# checks against them: sorting and elementwise arithmetic do not depend on the other rows, and
# numpy's pairwise sum depends only on the values summed and their count, so the bins of one size,
# from every resample, are summed as the rows of one C-contiguous matrix (a sum along its last axis
# is the same pairwise sum per row as `add.reduce` of that row alone). `add.reduceat` is not used:
# it sums each segment's first value and then the rest, whose bits differ.

def _segment_sums(flat: F64, starts: I64, sizes: I64) -> F64:
    """numpy.add.reduce(flat[s: s + m]) of each segment (start s, size m >= 1), bit for bit."""
    out = np.empty(len(starts))
    for m in np.unique(sizes).tolist():
        pick = np.flatnonzero(sizes == m)
        out[pick] = flat[starts[pick, None] + np.arange(m)].sum(axis=1)
    return out


def _stable_order(keys: NDArray[np.integer[Any]], n: int) -> I64:
    """np.argsort(keys, axis=1, kind="stable") for non-negative integer keys (resamples, n): a
    plain sort of key * n + position, whose values are all distinct."""
    tagged = keys.astype(np.int64) * n + np.arange(n)
    tagged.sort(axis=1)
    tagged %= n
    return tagged


def block_bin_means(values: F64, outcomes: F64, binning: str, bins: int) -> list[BinMeans]:
    """bin_means of each row of `values` (resamples, n) against the same row of `outcomes`, on that
    row's own equal-mass edges (equal_mass_edges) or the common equal-width ones, the same bits as
    row by row. A value's bin is the number of the row's edges below it (searchsorted); a value above
    the last edge joins the last bin after that bin's own rows, where bin_means's stable sort puts
    it; the bin above a repeated edge, which np.unique would have merged, never holds a row and is
    left out."""
    r, n = values.shape
    if binning == "equal-mass":
        ordered = np.sort(values, axis=1)
        runs = min(bins, n)
        size, longer = divmod(n, runs)
        ends = np.arange(1, runs) * size + np.minimum(np.arange(1, runs), longer)
        edges = np.concatenate([(ordered[:, ends - 1] + ordered[:, ends]) / 2.0, np.ones((r, 1))], axis=1)
        edges.sort(axis=1)  # as np.unique sorts them: values above 1.0 put midpoints above the final 1.0
    else:
        edges = np.broadcast_to(equal_width_edges(bins), (r, bins))
    width = edges.shape[1]
    distinct = np.ones((r, width), dtype=bool)  # the edges are sorted: a repeat follows its first
    distinct[:, 1:] = edges[:, 1:] != edges[:, :-1]
    if width <= 32:  # a comparison per edge over the block is cheaper than a search per row
        below = np.zeros((r, n), dtype=np.int8)
        for e in range(width):
            below += values > edges[:, e: e + 1]
    else:
        below = np.empty((r, n), dtype=np.int64)
        for row in range(r):
            below[row] = np.searchsorted(edges[row], values[row], side="left")
    order = _stable_order(below, n)  # above the last edge sorts after the last bin's rows
    last = width - 1 - np.argmax(distinct[:, ::-1], axis=1)  # the first of the last edge's repeats
    which = np.minimum(below, last[:, None].astype(below.dtype))
    base = np.arange(r)[:, None]
    counts = np.bincount((which + base * width).ravel(), minlength=r * width).reshape(r, width)
    starts = (np.cumsum(counts, axis=1) - counts + base * n).ravel()
    sizes = counts.ravel()
    full = np.flatnonzero(sizes)
    value_sums, outcome_sums = np.zeros(r * width), np.zeros(r * width)
    value_sums[full] = _segment_sums(np.take_along_axis(values, order, axis=1).ravel(), starts[full], sizes[full])
    outcome_sums[full] = _segment_sums(np.take_along_axis(outcomes, order, axis=1).ravel(), starts[full], sizes[full])
    divisor = np.maximum(sizes, 1)
    value_means = (value_sums / divisor).reshape(r, width).tolist()
    outcome_means = (outcome_sums / divisor).reshape(r, width).tolist()
    out = []
    for keep, row_sizes, v, o in zip(distinct.tolist(), counts.tolist(), value_means, outcome_means, strict=True):
        kept = [b for b in range(width) if keep[b]]
        out.append(BinMeans(n, tuple(row_sizes[b] for b in kept), tuple(v[b] if row_sizes[b] else None for b in kept),
                            tuple(o[b] if row_sizes[b] else None for b in kept)))
    return out


def block_ks(conf: F64, correct: F64, rank: I64) -> list[float]:
    """ks_error of each row of `conf` (resamples, n) against the same row of `correct`, the same
    bits as row by row (a stable sort, then a running sum along each row); `rank` gives each value's
    place among the distinct values (equal values, equal ranks), so that sorting the ranks stably is
    sorting the values stably."""
    order = _stable_order(rank, conf.shape[1])
    sorted_conf = np.take_along_axis(conf, order, axis=1)
    cumulative = np.cumsum(np.take_along_axis(correct, order, axis=1) - sorted_conf, axis=1) / conf.shape[1]
    last_of_tie = np.ones(conf.shape, dtype=bool)
    last_of_tie[:, :-1] = sorted_conf[:, 1:] != sorted_conf[:, :-1]
    found: list[float] = np.where(last_of_tie, np.abs(cumulative), 0.0).max(axis=1).tolist()
    return found


def _resample_of(per_column: dict[int, list[BinMeans]], b: int) -> Callable[[int], BinMeans]:
    """Resample b's bins of each column, as `_combined` asks for them."""
    return lambda column: per_column[column][b]


@dataclass(frozen=True)
class _PoolColumns:
    """What every block of one scale reads from the whole pool, computed once: the probabilities,
    each row's top-label confidence and correctness, and the confidence's rank among the distinct
    confidences (block_ks)."""

    probs: F64
    top: F64
    hits: F64
    rank: I64


def _pool_columns(probs: F64, labels: I64, pred: I64) -> _PoolColumns:
    top, hits = _top_label(probs, labels, pred, None)
    return _PoolColumns(probs, top, hits, np.unique(top, return_inverse=True)[1])


def _block_values(specs: tuple[EstimatorSpec, ...], pool: _PoolColumns, labels: I64,
                  block: I64) -> dict[str, list[float | None]]:
    """Each spec's value on every resample (row of `block`) of one scale's probabilities."""
    probs = pool.probs
    conf, correct = pool.top[block], pool.hits[block]
    bins: dict[tuple[Any, ...], list[BinMeans]] = {}  # shared by the specs that bin alike

    def bins_of(spec: EstimatorSpec, column: int) -> list[BinMeans]:
        key = _bins_key(spec, column)
        if key not in bins:
            values, outcomes = ((conf, correct) if column < 0 else
                                (probs[:, column][block], (labels == column).astype(np.float64)[block]))
            bins[key] = block_bin_means(values, outcomes, spec.binning, spec.bins)
        return bins[key]

    found: dict[str, list[float | None]] = {}
    for spec in specs:
        if spec.kind == "binned":
            columns = [-1] if spec.confidence == "top-label" else list(range(probs.shape[1]))
            per_column = {column: bins_of(spec, column) for column in columns}
            found[spec.id] = [_combined(spec, probs.shape[1], _resample_of(per_column, b)) for b in range(len(block))]
        elif spec.kind == "ks":
            found[spec.id] = list(block_ks(conf, correct, pool.rank[block]))
        else:
            found[spec.id] = [smooth_ece(spec, conf[b], correct[b])[0] for b in range(len(block))]
    return found


def _resample_scores(specs: tuple[EstimatorSpec, ...], probs: dict[str, F64], labels: I64, pred: I64,
                     resamples: int, seed: int) -> dict[str, dict[str, list[float | None]]]:
    """Every spec's value raw and calibrated on each resample, and their difference, in resample
    order: {id: {"raw": [...], "calibrated": [...], "difference": [...]}}; the same values as each
    scorer on the resample's gathered rows, computed a block of resamples at a time."""
    drawn: dict[str, dict[str, list[float | None]]] = {
        spec.id: {"raw": [], "calibrated": [], "difference": []} for spec in specs}
    if not specs:
        return drawn
    pools = {which: _pool_columns(probs[which], labels, pred) for which in ("raw", "calibrated")}
    for block in resample_blocks(len(labels), resamples, seed):
        raw = _block_values(specs, pools["raw"], labels, block)
        calibrated = _block_values(specs, pools["calibrated"], labels, block)
        for spec in specs:
            draws = drawn[spec.id]
            for r, c in zip(raw[spec.id], calibrated[spec.id], strict=True):
                draws["raw"].append(r)
                draws["calibrated"].append(c)
                draws["difference"].append(None if r is None or c is None else c - r)
    return drawn


def estimators_record(specs: tuple[EstimatorSpec, ...], pool: str, logits: F64, labels: I64, beta: float,
                      resamples: int, seed: int) -> dict[str, Any]:
    """metrics.json `estimators`: the pool they are computed on, the bootstrap they draw from and
    every pre-registered estimator's result."""
    return {"pool": pool, "resamples": resamples, "seed": seed,
            "statistic": "calibrated minus raw",
            "results": estimator_results(specs, logits, labels, beta, resamples, seed)}
