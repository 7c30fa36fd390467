"""The fitted temperature: its record against the protocol and the logits, the bisection
trajectory step by step, and an independent re-fit by another method."""

from __future__ import annotations

from bundle import layout
from verify import numerics, refit
from verify.context import METRIC_TOL, REFIT_REL_TOL, Context
from verify.protocol_checks import bounded_dimensions
from verify.result import Failed


def _close(a: float, b: float, tol: float) -> bool:
    return abs(a - b) <= tol


def record(ctx: Context) -> str:
    """Pool, n, predictions hash, interval; T = 1/beta; nll_before and nll_after recomputed."""
    t = ctx.doc(layout.TEMPERATURE_JSON)
    fit = ctx.doc(layout.PROTOCOL_JSON)["fit"]
    cal = ctx.table("calibration")
    problems = []
    if t["pool"] != fit["pool"]:
        problems.append(f"fitted on pool {t['pool']!r}, the protocol fits on {fit['pool']!r}")
    if t["n"] != len(cal.y):
        problems.append(f"n is {t['n']}, the calibration pool has {len(cal.y)} rows")
    if t["predictions_sha256"] != ctx.sha(layout.CALIBRATION_PREDICTIONS):
        problems.append("predictions_sha256 is not the calibration predictions in the bag")
    if t["t_min"] != fit["t_min"] or t["t_max"] != fit["t_max"]:
        problems.append(f"interval [{t['t_min']}, {t['t_max']}], the protocol fixes "
                        f"[{fit['t_min']}, {fit['t_max']}]")
    if not (t["beta"] > 0 and abs(t["temperature"] - 1.0 / t["beta"])
            <= 4e-16 * abs(t["temperature"])):
        problems.append(f"temperature {t['temperature']!r} is not 1/beta = "
                        f"{1.0 / t['beta'] if t['beta'] else float('inf')!r}")
    if not fit["t_min"] <= t["temperature"] <= fit["t_max"]:
        problems.append(f"temperature {t['temperature']!r} is outside [t_min, t_max]")
    before = numerics.mean_nll(cal.z, cal.y, 1.0)
    after = numerics.mean_nll(cal.z, cal.y, t["beta"])
    if not _close(t["nll_before"], before, METRIC_TOL):
        problems.append(f"nll_before is {t['nll_before']!r}, recomputed {before!r}")
    if not _close(t["nll_after"], after, METRIC_TOL):
        problems.append(f"nll_after is {t['nll_after']!r}, recomputed {after!r}")
    if after > before + METRIC_TOL:
        problems.append(f"the fitted temperature raises the fit-pool NLL ({before!r} -> "
                        f"{after!r})")
    if problems:
        raise Failed("temperature.json: " + "; ".join(problems) + ".")
    return (f"T = {t['temperature']:.9g} on {t['n']} calibration rows; NLL "
            f"{before:.6f} -> {after:.6f} recomputed")


def trajectory(ctx: Context) -> str:
    """The trajectory is a valid bisection of the NLL gradient, every step recomputed."""
    fit = ctx.doc(layout.PROTOCOL_JSON)["fit"]
    dims = bounded_dimensions(ctx.doc(layout.PROTOCOL_JSON))
    steps = ctx.doc(layout.TRAJECTORY_JSON)["steps"]
    if len(steps) > dims.steps:
        raise Failed(f"trajectory.json holds {len(steps):,} steps, the protocol allows "
                     f"{dims.steps}; not recomputed.")
    cal = ctx.table("calibration")
    try:
        return refit.check_trajectory(cal.z, cal.y, ctx.doc(layout.TRAJECTORY_JSON),
                                      ctx.doc(layout.TEMPERATURE_JSON), fit["t_min"],
                                      fit["t_max"], fit["steps"], METRIC_TOL)
    except ValueError as exc:
        raise Failed(f"the trajectory is not a valid bisection: {exc}.") from exc


def refitted(ctx: Context) -> str:
    """T re-fitted by golden section and Newton steps agrees; boundary flags agree."""
    fit = ctx.doc(layout.PROTOCOL_JSON)["fit"]
    t = ctx.doc(layout.TEMPERATURE_JSON)
    cal = ctx.table("calibration")
    result = refit.refit_temperature(cal.z, cal.y, fit["t_min"], fit["t_max"])
    side = t["boundary_side"] if t["boundary"] else None
    if side != result.boundary_side:
        raise Failed(f"the bundle reports boundary {side!r}, the re-fit finds "
                     f"{result.boundary_side!r} (T = {result.temperature!r}).")
    rel = abs(t["temperature"] - result.temperature) / result.temperature
    if not rel <= REFIT_REL_TOL:
        raise Failed(f"temperature {t['temperature']!r} is not the NLL minimiser: a "
                     f"golden-section + Newton re-fit gives {result.temperature!r} "
                     f"(relative difference {rel:.2e} > {REFIT_REL_TOL:g}; NLL "
                     f"{numerics.mean_nll(cal.z, cal.y, 1.0 / t['temperature']):.12f} vs "
                     f"{result.nll:.12f}).")
    return (f"re-fit T = {result.temperature:.12g} by golden section + Newton, relative "
            f"difference {rel:.1e}")
