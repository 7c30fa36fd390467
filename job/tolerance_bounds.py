"""What `equivalent` can move: worst-case changes of the headline figures when every logit may
differ from the stored one by at most the reproduction tolerance tau.

A reproducer's logits z' satisfy |z'_ij - z_ij| <= tau; it refits the temperature on its own
calibration logits and recomputes every figure. The bounds here hold for every such z' (proofs in
bundle/FORMAT.md, "What equivalent can move"); they are computed from the stored logits alone.

1. The temperature. g(beta) = mean_i(E_p[z_i] - z_iy) is the NLL's derivative in beta and is
   non-decreasing. For z', |g'(beta) - g(beta)| <= eps(beta) = tau (2 + beta mean_i(s_i)):
   |delta_y| <= tau, |E_p'[delta]| <= tau, and E_p[z] moves by at most the covariance
   beta tau sd(z) along the way from z to z', where sd(z) <= s_i = min(exp(beta tau) sd_p(z_i),
   R_i / 2), R_i = max_j z_ij - min_j z_ij (the weights change by at most exp(2 beta tau)). So
   the refitted beta' lies below any beta where g - eps > 0 and above any where g + eps < 0:
   beta_low and beta_high are such points, found by bisection from the published beta, widened
   by the bisection's final bracket.
2. One row at the published beta: beta' z' equals beta z plus a perturbation of each coordinate by
   at most a_i = beta_high tau + dbeta R_i / 2 after removing a constant (softmax ignores it),
   dbeta = max(beta_high - beta, beta - beta_low); a_i = tau for raw probabilities. Each
   probability then moves by a factor within [exp(-2a), exp(2a)] and the true label's
   log-probability at most by the corner values below, which are attained.
3. The figures: NLL and Brier by the per-row extremes; accuracy by the rows whose top two logits
   are within 2 tau (only they can change their predicted class; a temperature never does);
   mean confidence by the confidence's range; ECE and MCE by the rows within reach of a bin edge
   (their confidence range spans two bins) and the rows that could flip, which may change bins
   and correctness, every other row moving its bin's gap by at most its confidence range."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from job.calibration import log_softmax, nll_gradient
from job.metrics import BINS, bin_index

if TYPE_CHECKING:
    from job.protocol import Protocol

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]
ROUNDING = 1e-12
"""Added to eps: the float64 rounding of g, far below any tolerance a protocol may set."""
FIGURES = ("accuracy", "mean_confidence", "nll", "brier", "ece", "mce")


def logit_ranges(z: F64) -> F64:
    """R_i: the spread of each row's logits."""
    out: F64 = z.max(axis=1) - z.min(axis=1)
    return out


def flippable(z: F64, tau: float) -> NDArray[np.bool_]:
    """Rows whose predicted class could change: another logit within 2 tau of the top one."""
    top = z.max(axis=1, keepdims=True)
    close = (top - z) <= 2.0 * tau
    out: NDArray[np.bool_] = close.sum(axis=1) > 1
    return out


def gradient_slack(z: F64, beta: float, tau: float) -> float:
    """eps(beta): how far g of logits within tau of z can be from g(beta) (step 1 of the module)."""
    p = np.exp(log_softmax(beta * z))
    mean = (p * z).sum(axis=1, keepdims=True)
    sd = np.sqrt((p * (z - mean) ** 2).sum(axis=1))
    spread = np.minimum(np.exp(beta * tau) * sd, logit_ranges(z) / 2.0)
    return tau * (2.0 + beta * float(spread.mean())) + ROUNDING


def _excluded(fn: Any, inside: float, outside: float) -> float:
    """A point as close to `inside` as bisection finds where fn > 0, starting from fn(inside) <= 0
    < fn(outside): every point it returns has fn > 0, whatever fn does in between."""
    for _ in range(200):
        mid = (inside + outside) / 2
        if mid in (inside, outside):
            break
        inside, outside = (inside, mid) if fn(mid) > 0 else (mid, outside)
    return outside


def beta_range(z: F64, y: I64, tau: float, beta: float, beta_min: float, beta_max: float,
               steps: int) -> tuple[float, float]:
    """[beta_low, beta_high]: every beta a reproducer's refit can reach (step 1 of the module).

    g of the reproducer's logits is >= g - eps and <= g + eps and non-decreasing, so a beta_u with
    g(beta_u) - eps(beta_u) > 0 has its root below it, and a beta_l with g + eps < 0 above it; the
    published beta (g near 0) starts both searches. The bisection's final bracket widens both."""
    pad = (beta_max - beta_min) / 2.0 ** steps

    def above(b: float) -> float:
        return nll_gradient(z, y, b) - gradient_slack(z, b, tau)

    def below(b: float) -> float:
        return -(nll_gradient(z, y, b) + gradient_slack(z, b, tau))

    high = beta_max if above(beta) > 0 or above(beta_max) <= 0 else _excluded(above, beta, beta_max)
    low = beta_min if below(beta) > 0 or below(beta_min) <= 0 else _excluded(below, beta, beta_min)
    return max(beta_min, low - pad), min(beta_max, high + pad)


def _mce_range(bins_lo: I64, bins_hi: I64, gap: F64, reach: F64, moving: NDArray[np.bool_]) -> tuple[float, float]:
    """The smallest and largest MCE any perturbation can give: per bin, the rows certain to stay
    move its gap by their confidence reach; each row that may enter or leave adds a term in [-1, 1]."""
    lo_max, hi_max = 0.0, 0.0
    for b in range(BINS):
        stay = (~moving) & (bins_lo == b)
        touch = int((moving & (bins_lo <= b) & (bins_hi >= b)).sum())
        size = int(stay.sum())
        if size + touch == 0:
            continue
        a, d = abs(float(gap[stay].sum())), float(reach[stay].sum())
        up = min(1.0, max((a + d) / size if size else 0.0, (a + d + touch) / (size + touch)))
        hi_max = max(hi_max, up)
        if size:
            lo_max = max(lo_max, max(0.0, a - d - touch) / (size + touch))
    return lo_max, hi_max


@np.errstate(over="ignore")  # exp(2a) can be huge: the products overflow to inf, which the caps absorb
def figure_bounds(z: F64, y: I64, beta: float, half_width: F64, flips: NDArray[np.bool_],
                  published: dict[str, Any]) -> dict[str, Any]:
    """Worst-case |change| of each figure of softmax(beta z) when each row's scaled logits move by
    at most half_width[i] (and the rows `flips` may change their predicted class), with the
    published figures (metrics.json) to measure the MCE's movement from."""
    n = len(y)
    rows = np.arange(n)
    lp = log_softmax(beta * z)
    p = np.exp(lp)
    # exp(2a) stays finite (a wide temperature range can make a large); the caps below hold anyway
    two_a = np.minimum(2.0 * half_width, 700.0)
    grow = np.exp(two_a)
    shrink = np.exp(-two_a)
    py = p[rows, y]
    with np.errstate(divide="ignore"):
        log_rest = np.log1p(-py)
    nll_rows = np.maximum(np.logaddexp(np.log(py), log_rest + 2.0 * half_width),
                          -np.log(py + (1.0 - py) * shrink))
    other_sq = (p ** 2).sum(axis=1) - py ** 2
    brier_rows = (grow - 1.0) * ((1.0 + grow) * other_sq + py * (2.0 - py * (1.0 + shrink)))
    pred = z.argmax(axis=1)
    conf = p[rows, pred]
    c_lo = conf * shrink / (conf * shrink + 1.0 - conf)
    c_hi = conf * grow / (conf * grow + 1.0 - conf)
    reach = np.maximum(c_hi - conf, conf - c_lo)
    right = (pred == y).astype(np.float64)
    bins_lo, bins_hi = bin_index(c_lo), bin_index(c_hi)
    near_edge = bins_lo != bins_hi
    moving = near_edge | flips
    stay_part = reach[~moving].sum()
    own = np.abs(right - conf)
    after = np.where(flips, np.maximum(c_hi, 1.0 - c_lo), np.maximum(np.abs(right - c_lo), np.abs(right - c_hi)))
    ece = (stay_part + (own + after)[moving].sum()) / n
    mce_lo, mce_hi = _mce_range(bins_lo, bins_hi, right - conf, reach, moving)
    mce = published["mce"]
    return {
        "accuracy": int(flips.sum()) / n,
        # no figure moves further than its range: Brier in [0, 2]; ECE, MCE and confidence in [0, 1]
        "mean_confidence": min(1.0, float(reach.mean())),
        "nll": float(nll_rows.mean()),
        "brier": min(2.0, float(np.nan_to_num(brier_rows, nan=np.inf).mean())),
        "ece": min(1.0, float(ece)),
        "mce": float(max(mce_hi - mce, mce - mce_lo, 0.0)),
        "rows_that_could_flip": int(flips.sum()),
        "rows_near_bin_edge": int(near_edge.sum()),
    }


def fit_of(protocol: Protocol) -> dict[str, Any]:
    """The protocol's fit interval and steps, as reproduction_bounds takes them."""
    return {"beta_min": protocol.fit.beta_min, "beta_max": protocol.fit.beta_max, "steps": protocol.fit.steps}


def reproduction_bounds(pools: dict[str, tuple[F64, I64]], metrics_pools: dict[str, Any], beta: float,
                        tau: float, source: str, fit: dict[str, Any]) -> dict[str, Any]:
    """The record metrics.json and each attestation carry: the tolerance, where it comes from, the
    range the refitted temperature can reach, and per pool the worst-case |change| of each figure,
    raw and calibrated. pools: name -> (float64 logits, labels); metrics_pools: metrics.json
    `pools`; fit: beta_min, beta_max and steps of the protocol's fit."""
    cal_z, cal_y = pools["calibration"]
    low, high = beta_range(cal_z, cal_y, tau, beta, fit["beta_min"], fit["beta_max"], fit["steps"])
    dbeta = max(high - beta, beta - low)
    out: dict[str, Any] = {}
    for name, (z, y) in pools.items():
        flips = flippable(z, tau)
        spread = logit_ranges(z)
        out[name] = {
            "raw": figure_bounds(z, y, 1.0, np.full(len(y), tau), flips, metrics_pools[name]["raw"]),
            "calibrated": figure_bounds(z, y, beta, high * tau + dbeta * spread / 2.0, flips,
                                        metrics_pools[name]["calibrated"]),
        }
    return {"logit_tolerance": tau, "source": source,
            "temperature": {"beta_low": low, "beta_high": high, "t_low": 1.0 / high, "t_high": 1.0 / low},
            "pools": out}
