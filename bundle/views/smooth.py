"""The smoothed reliability curve the reliability figure draws, with its bootstrap band.

A view, not a figure of record: the smooth ECE and its bandwidth are metrics.json's (checked by
the verifier's metrics.estimators); this draws, at the recorded bandwidth sigma, the kernel
regression of correctness on top-label confidence, E[correct | conf = t] ~ sum_i K(t, c_i) y_i /
sum_i K(t, c_i), with the Gaussian kernel reflected at 0 and 1 as in the smooth ECE (evaluated
exactly, not on relplot's grid), at CURVE_POINTS points of [0, 1]. The band is the pointwise
2.5% and 97.5% quantiles (numpy, linear) of the same curve over the first BAND_RESAMPLES rows of
the protocol's bootstrap matrix (numpy.random.Generator(PCG64(seed)).integers(0, n, size=(R, n))).
Points where the kernel's total weight is below MIN_DENSITY rows are not drawn (no data there)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]
CURVE_POINTS = 101
BAND_RESAMPLES = 200
MIN_DENSITY = 0.5
BLOCK_ROWS = 4096


def _kernel(conf: F64, t: F64, sigma: float) -> F64:
    """K[i, j] = the reflected Gaussian weight of row i at point t_j, shape (n, len(t))."""
    k = np.zeros((len(conf), len(t)))
    for image in (conf, -conf, 2.0 - conf):
        k += np.exp(-((t[None, :] - image[:, None]) ** 2) / (2.0 * sigma ** 2))
    return k


def smooth_curve(conf: F64, correct: F64, sigma: float, seed: int, resamples: int
                 ) -> tuple[F64, F64, F64, F64]:
    """(t, curve, band lower, band upper); NaN where fewer than MIN_DENSITY rows' weight lies."""
    t = np.linspace(0.0, 1.0, CURVE_POINTS)
    n = len(conf)
    draws = min(resamples, BAND_RESAMPLES)
    counts = np.zeros((draws, n))
    rng = np.random.Generator(np.random.PCG64(seed))
    for b, rows in enumerate(rng.integers(0, n, size=(draws, n), dtype=np.int64)):
        counts[b] = np.bincount(rows, minlength=n)
    num, den = np.zeros(len(t)), np.zeros(len(t))
    boot_num, boot_den = np.zeros((draws, len(t))), np.zeros((draws, len(t)))
    for start in range(0, n, BLOCK_ROWS):
        part = slice(start, start + BLOCK_ROWS)
        k = _kernel(conf[part], t, sigma)
        ky = k * correct[part, None]
        num += ky.sum(axis=0)
        den += k.sum(axis=0)
        boot_num += counts[:, part] @ ky
        boot_den += counts[:, part] @ k
    enough = den >= MIN_DENSITY  # one row weighs 1 at its own confidence
    curve = np.where(enough, num / np.where(enough, den, 1.0), np.nan)
    low, high = np.full(len(t), np.nan), np.full(len(t), np.nan)
    if draws:
        # A resample may hold no row near a point far from the data: its curve is undefined there,
        # and the band's quantiles are over the resamples where it is.
        boot = boot_num / np.where(boot_den > 0, boot_den, np.nan)
        for j in np.flatnonzero(enough):
            column = boot[:, j][~np.isnan(boot[:, j])]
            if len(column):
                low[j], high[j] = np.quantile(column, [0.025, 0.975], method="linear")
    return t, curve, low, high
