"""The worst-case bounds of job.tolerance_bounds hold: perturbations of every logit within the
tolerance (random, and pushed to the corners that move each figure most), followed by the
reproducer's refit of the temperature, never move a figure further than its bound."""

from __future__ import annotations

import numpy as np
import pytest

from job.calibration import fit_temperature
from job.metrics import compute_metrics
from job.tolerance_bounds import FIGURES, reproduction_bounds

T_MIN, T_MAX, STEPS = 0.05, 20.0, 60
BETA_MIN, BETA_MAX = 1 / T_MAX, 1 / T_MIN


def _pool(rng: np.random.Generator, n: int, k: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    y = rng.integers(0, k, n)
    z = rng.normal(0, 1, (n, k))
    z[np.arange(n), y] += scale
    # float32 logits as a model writes them; a few ties within the tolerance.
    z[: n // 20, 1] = z[: n // 20, 0] + rng.uniform(-1e-3, 1e-3, n // 20)
    return z.astype(np.float32).astype(np.float64), y.astype(np.int64)


def _figures(pools, beta):
    return {name: {"raw": compute_metrics(z, y, 1.0, 0.9), "calibrated": compute_metrics(z, y, beta, 0.9)}
            for name, (z, y) in pools.items()}


def _corner(z, y, tau, rng, how):
    n, k = z.shape
    if how == "random":
        return rng.uniform(-tau, tau, (n, k))
    if how == "corners":
        return rng.choice([-tau, tau], (n, k))
    sign = np.ones((n, k))
    sign[np.arange(n), y] = -1.0  # the true label down, the rest up: every row's NLL up
    return tau * (sign if how == "against" else -sign)


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("tau", [1e-4, 1e-2, 5e-2])
def test_no_perturbation_within_the_tolerance_exceeds_the_bounds(k: int, tau: float) -> None:
    rng = np.random.default_rng(k * 1000 + int(tau * 1e5))
    pools = {"calibration": _pool(rng, 300, k, 1.5), "audit": _pool(rng, 360, k, 1.5)}
    fit = fit_temperature(*pools["calibration"], T_MIN, T_MAX, STEPS)
    published = _figures(pools, fit.beta)
    bounds = reproduction_bounds(pools, published, fit.beta, tau, "protocol",
                                 {"beta_min": BETA_MIN, "beta_max": BETA_MAX, "steps": STEPS})
    seen_move = 0.0
    for trial in range(24):
        how = ("random", "corners", "against", "for")[trial % 4]
        moved = {name: (z + _corner(z, y, tau, rng, how), y) for name, (z, y) in pools.items()}
        refit = fit_temperature(*moved["calibration"], T_MIN, T_MAX, STEPS)
        t = bounds["temperature"]
        assert t["beta_low"] <= refit.beta <= t["beta_high"]
        again = _figures(moved, refit.beta)
        for name in pools:
            for which in ("raw", "calibrated"):
                for fig in FIGURES:
                    change = abs(again[name][which][fig] - published[name][which][fig])
                    seen_move = max(seen_move, change)
                    assert change <= bounds["pools"][name][which][fig] + 1e-12, (name, which, fig, how)
    assert seen_move > 0  # the perturbations did move figures


def test_the_nll_bound_is_attained_by_the_corner_push() -> None:
    """Raw NLL: pushing the true label down and the others up moves it by exactly the bound."""
    rng = np.random.default_rng(7)
    pools = {"calibration": _pool(rng, 200, 3, 1.0), "audit": _pool(rng, 200, 3, 1.0)}
    fit = fit_temperature(*pools["calibration"], T_MIN, T_MAX, STEPS)
    published = _figures(pools, fit.beta)
    tau = 1e-3
    bounds = reproduction_bounds(pools, published, fit.beta, tau, "protocol",
                                 {"beta_min": BETA_MIN, "beta_max": BETA_MAX, "steps": STEPS})
    z, y = pools["audit"]
    pushed = z + _corner(z, y, tau, rng, "against")
    change = compute_metrics(pushed, y, 1.0, 0.9)["nll"] - published["audit"]["raw"]["nll"]
    assert change == pytest.approx(bounds["pools"]["audit"]["raw"]["nll"], rel=1e-6)
