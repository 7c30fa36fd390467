"""The temperature re-fitted by another method, and the bundle's bisection trajectory checked.

The job bisects g(beta) on beta = 1/T. Here T is found directly: a golden-section search of the
mean NLL over [t_min, t_max] (the NLL is convex in beta, hence unimodal in T), then Newton steps
on h(T) = g(1/T) to polish the flat optimum, kept inside the golden-section bracket."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from verify import numerics
from verify.numerics import F64, I64

_INV_PHI = (math.sqrt(5.0) - 1.0) / 2.0


@dataclass(frozen=True)
class Refit:
    temperature: float
    boundary_side: str | None  # None, "t_min" or "t_max"
    nll: float
    gradient: float  # g(1/T)
    evaluations: int


def _golden(z: F64, y: I64, t_min: float, t_max: float) -> tuple[float, float, int]:
    """Bracket [a, b] of the NLL minimiser in T by golden-section search."""
    def f(t: float) -> float:
        return numerics.mean_nll(z, y, 1.0 / t)

    a, b = t_min, t_max
    c = b - _INV_PHI * (b - a)
    d = a + _INV_PHI * (b - a)
    fc, fd = f(c), f(d)
    evaluations = 2
    while b - a > 1e-9 * (1.0 + abs(a)):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - _INV_PHI * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + _INV_PHI * (b - a)
            fd = f(d)
        evaluations += 1
    return a, b, evaluations


def _h(z: F64, y: I64, t: float) -> float:
    """h(T) = g(1/T): positive below the optimum T, negative above it (g rises with beta)."""
    return numerics.gradient(z, y, 1.0 / t)


def _newton(z: F64, y: I64, a: float, b: float, t_min: float,
            t_max: float) -> tuple[float, int]:
    """Root of h(T) near the golden-section bracket [a, b], by Newton steps on T safeguarded by a
    sign bracket [lo, hi] (h(lo) >= 0 >= h(hi)); a step that leaves it falls back to the middle.

    The golden section locates the flat minimum only to about sqrt(machine eps); the bracket is
    widened until h changes sign across it, then Newton converges to full precision."""
    evaluations = 0
    pad = max(b - a, 1e-6 * b)
    lo, hi = max(t_min, a - pad), min(t_max, b + pad)
    while True:
        h_lo, h_hi = _h(z, y, lo), _h(z, y, hi)
        evaluations += 2
        if (h_lo >= 0.0 >= h_hi) or (lo == t_min and hi == t_max):
            break
        pad *= 16.0
        lo, hi = max(t_min, a - pad), min(t_max, b + pad)
    t = 0.5 * (a + b)
    for _ in range(200):
        beta = 1.0 / t
        h = numerics.gradient(z, y, beta)
        hp = -numerics.curvature(z, beta) / (t * t)  # h'(T) = -g'(1/T) / T^2
        evaluations += 1
        if h == 0.0:
            break
        if h > 0.0:
            lo = t
        else:
            hi = t
        new = t - h / hp if hp < 0.0 else 0.5 * (lo + hi)
        if not lo < new < hi:
            new = 0.5 * (lo + hi)
        if abs(new - t) <= 2e-16 * t or hi - lo <= 2e-16 * t:
            t = new
            break
        t = new
    return t, evaluations


def refit_temperature(z: F64, y: I64, t_min: float, t_max: float) -> Refit:
    """The T in [t_min, t_max] minimising the mean NLL of softmax(z / T)."""
    a, b, evaluations = _golden(z, y, t_min, t_max)
    width = t_max - t_min
    # A boundary optimum: the search ran into an end and the NLL still falls towards it.
    # dNLL/dT = -g(1/T) / T^2, so the NLL falls towards t_max while g(1/t_max) >= 0.
    if t_max - b < 1e-6 * width and numerics.gradient(z, y, 1.0 / t_max) >= 0.0:
        t = t_max
        side: str | None = "t_max"
    elif a - t_min < 1e-6 * width and numerics.gradient(z, y, 1.0 / t_min) <= 0.0:
        t = t_min
        side = "t_min"
    else:
        side = None
        t, more = _newton(z, y, a, b, t_min, t_max)
        evaluations += more
    beta = 1.0 / t
    return Refit(t, side, numerics.mean_nll(z, y, beta), numerics.gradient(z, y, beta),
                 evaluations)


def check_trajectory(z: F64, y: I64, trajectory: dict[str, Any], temperature: dict[str, Any],
                     t_min: float,
                     t_max: float, steps_expected: int, tol: float = 1e-9) -> str:
    """Return a summary when the trajectory is a valid bisection of g; raise ValueError naming
    the first inconsistency otherwise."""
    beta_min, beta_max = 1.0 / t_max, 1.0 / t_min
    if trajectory["beta_min"] != beta_min or trajectory["beta_max"] != beta_max:
        raise ValueError(f"trajectory brackets [{trajectory['beta_min']!r}, "
                         f"{trajectory['beta_max']!r}], expected [1/t_max, 1/t_min] = "
                         f"[{beta_min!r}, {beta_max!r}]")
    g_ends = numerics.gradients(z, y, np.array([beta_min, beta_max]))
    for key, value in (("g_at_beta_min", g_ends[0]), ("g_at_beta_max", g_ends[1])):
        if not abs(trajectory[key] - value) <= tol:
            raise ValueError(f"{key} is {trajectory[key]!r}, recomputed from the logits "
                             f"{float(value)!r}")
    steps = trajectory["steps"]
    boundary = temperature["boundary"]
    if boundary:
        if steps:
            raise ValueError(f"a boundary solution has {len(steps)} bisection steps, expected none")
        side = temperature["boundary_side"]
        if side == "t_max":
            if not g_ends[0] >= -tol:
                raise ValueError(f"boundary t_max claimed but g(1/t_max) = {g_ends[0]!r} < 0: "
                                 "the NLL still falls inside the interval")
            edge = beta_min
        elif side == "t_min":
            if not g_ends[1] <= tol:
                raise ValueError(f"boundary t_min claimed but g(1/t_min) = {g_ends[1]!r} > 0: "
                                 "the NLL still falls inside the interval")
            edge = beta_max
        else:
            raise ValueError(f"boundary is true but boundary_side is {side!r}")
        if temperature["beta"] != edge or temperature["bracket"] != [edge, edge]:
            raise ValueError(f"boundary {side}: beta {temperature['beta']!r} and bracket "
                             f"{temperature['bracket']!r}, expected {edge!r} and [{edge!r}, "
                             f"{edge!r}]")
        return f"boundary solution at {side}, consistent with g at the ends"
    if temperature["boundary_side"] is not None:
        raise ValueError(f"boundary is false but boundary_side is {temperature['boundary_side']!r}")
    if not (g_ends[0] < tol and g_ends[1] > -tol):
        raise ValueError(f"no sign change of g on [1/t_max, 1/t_min] (g = {g_ends[0]!r}, "
                         f"{g_ends[1]!r}) yet the solution is not flagged as a boundary")
    if len(steps) != steps_expected:
        raise ValueError(f"{len(steps)} bisection steps, the protocol fixes {steps_expected}")
    if temperature["steps"] != len(steps):
        raise ValueError(f"temperature.json says {temperature['steps']} steps, the trajectory "
                         f"holds {len(steps)}")
    lo, hi = beta_min, beta_max
    mids = np.array([s["mid"] for s in steps], dtype=np.float64)
    g_mid = numerics.gradients(z, y, mids) if len(steps) else np.zeros(0)
    for i, s in enumerate(steps):
        n = i + 1
        if s["step"] != n:
            raise ValueError(f"step {n} is numbered {s['step']}")
        if s["lo"] != lo or s["hi"] != hi:
            raise ValueError(f"step {n} starts from [{s['lo']!r}, {s['hi']!r}], the previous "
                             f"step left [{lo!r}, {hi!r}]")
        if s["mid"] != (lo + hi) / 2:
            raise ValueError(f"step {n} mid is {s['mid']!r}, (lo + hi) / 2 = {(lo + hi) / 2!r}")
        if not abs(s["g"] - g_mid[i]) <= tol:
            raise ValueError(f"step {n} g({s['mid']!r}) is {s['g']!r}, recomputed from the "
                             f"logits {float(g_mid[i])!r}")
        if s["g"] > 0:
            new_lo, new_hi = lo, s["mid"]
        else:
            new_lo, new_hi = s["mid"], hi
        ulp = 4 * np.finfo(np.float64).eps * max(abs(lo), abs(hi))
        if not abs((new_hi - new_lo) - (hi - lo) / 2) <= ulp:
            raise ValueError(f"step {n} does not halve the bracket")
        lo, hi = new_lo, new_hi
    if temperature["bracket"] != [lo, hi]:
        raise ValueError(f"final bracket {temperature['bracket']!r}, the steps end at "
                         f"[{lo!r}, {hi!r}]")
    if temperature["beta"] != (lo + hi) / 2:
        raise ValueError(f"beta {temperature['beta']!r} is not the midpoint {(lo + hi) / 2!r} "
                         "of the final bracket")
    g_final = numerics.gradient(z, y, temperature["beta"])
    if not abs(temperature["final_gradient"] - g_final) <= tol:
        raise ValueError(f"final_gradient {temperature['final_gradient']!r}, recomputed "
                         f"{g_final!r}")
    if not abs(g_final) <= 1e-6:
        raise ValueError(f"the final gradient {g_final!r} is not near zero")
    return (f"{len(steps)} steps, bracket halves each step, lo/hi follow the sign of g, "
            f"g recomputed within {tol:g}, final g = {g_final:.2e}")
