"""The smoothed reliability curve the reliability figure draws, with its bootstrap band.

A view, not a figure of record: the smooth ECE and its bandwidth are metrics.json's (checked by
the verifier's metrics.estimators); this draws, at the recorded bandwidth sigma, the kernel
regression of correctness on top-label confidence, E[correct | conf = t] ~ sum_i K(t, c_i) y_i /
sum_i K(t, c_i), with the Gaussian kernel reflected at 0 and 1 as in the smooth ECE, the rows
spread linearly onto a grid of GRID points first, at CURVE_POINTS points of [0, 1]. The band is the pointwise
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
GRID = 2001
"""Rows are spread linearly onto GRID points of [0, 1] (as relplot does), so that a resample costs
two bincounts and one small product whatever the pool's size."""


def _kernel(t: F64, sigma: float) -> F64:
    """K[g, j] = the reflected Gaussian weight of grid point g at point t_j, shape (GRID, len(t))."""
    grid = np.linspace(0.0, 1.0, GRID)
    k = np.zeros((GRID, len(t)))
    for image in (grid, -grid, 2.0 - grid):
        k += np.exp(-((t[None, :] - image[:, None]) ** 2) / (2.0 * sigma ** 2))
    return k


def _on_grid(conf: F64, weights: F64) -> F64:
    cell = np.clip(np.floor(conf * (GRID - 1)).astype(np.int64), 0, GRID - 2)
    frac = conf * (GRID - 1) - cell
    left = np.bincount(cell, weights=(1 - frac) * weights, minlength=GRID).astype(np.float64)
    right = np.bincount(cell + 1, weights=frac * weights, minlength=GRID).astype(np.float64)
    out: F64 = left + right
    return out


def smooth_curve(conf: F64, correct: F64, sigma: float, seed: int, resamples: int
                 ) -> tuple[F64, F64, F64, F64]:
    """(t, curve, band lower, band upper); NaN where fewer than MIN_DENSITY rows' weight lies."""
    t = np.linspace(0.0, 1.0, CURVE_POINTS)
    n = len(conf)
    k = _kernel(t, sigma)
    num, den = _on_grid(conf, correct) @ k, _on_grid(conf, np.ones(n)) @ k
    enough = den >= MIN_DENSITY  # one row weighs about 1 at its own confidence
    curve = np.where(enough, num / np.where(enough, den, 1.0), np.nan)
    draws = min(resamples, BAND_RESAMPLES)
    boot = np.full((draws, len(t)), np.nan)
    rng = np.random.Generator(np.random.PCG64(seed))
    for b in range(draws):
        # Row b of the bootstrap matrix: the generator fills in order, so drawing it alone gives
        # the same numbers as drawing the whole (draws, n) matrix at once.
        w = np.bincount(rng.integers(0, n, size=n, dtype=np.int64), minlength=n).astype(np.float64)
        b_num, b_den = _on_grid(conf, w * correct) @ k, _on_grid(conf, w) @ k
        boot[b] = np.where(b_den > 0, b_num / np.where(b_den > 0, b_den, 1.0), np.nan)
    low, high = np.full(len(t), np.nan), np.full(len(t), np.nan)
    # A resample may hold no row near a point far from the data: its curve is undefined there, and
    # the band's quantiles are over the resamples where it is.
    for j in np.flatnonzero(enough):
        column = boot[:, j][~np.isnan(boot[:, j])]
        if len(column):
            low[j], high[j] = np.quantile(column, [0.025, 0.975], method="linear")
    return t, curve, low, high
