"""Temperature scaling fitted by bisection on beta = 1/T of the mean-NLL derivative.

g(beta) = mean_i(E_{softmax(beta z_i)}[z_i] - z_{i,y_i}) is the derivative of the mean NLL in beta;
the NLL is convex in beta, so g is non-decreasing and its root is the minimiser.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]


def log_softmax(z: F64) -> F64:
    """Row-wise log softmax, stable for large magnitudes."""
    m = z.max(axis=1, keepdims=True)
    shifted = z - m
    out: F64 = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return out


def softmax(z: F64) -> F64:
    """Row-wise softmax in float64."""
    return np.exp(log_softmax(z))


def mean_nll(logits: F64, labels: NDArray[np.int64], beta: float = 1.0) -> float:
    """Mean negative log-likelihood (natural log) of softmax(beta * logits)."""
    lp = log_softmax(beta * logits)
    return float(-lp[np.arange(len(labels)), labels].mean())


def nll_gradient(logits: F64, labels: NDArray[np.int64], beta: float) -> float:
    """d/dbeta of the mean NLL: mean(E_p[z] - z_y) with p = softmax(beta z)."""
    p = softmax(beta * logits)
    expected = (p * logits).sum(axis=1)
    return float((expected - logits[np.arange(len(labels)), labels]).mean())


@dataclass(frozen=True)
class Step:
    step: int
    lo: float
    hi: float
    mid: float
    g: float


@dataclass(frozen=True)
class TemperatureFit:
    beta: float
    temperature: float
    boundary: bool
    boundary_side: str | None  # "t_min" | "t_max" | None
    final_gradient: float
    bracket: tuple[float, float]
    g_at_beta_min: float
    g_at_beta_max: float
    nll_before: float
    nll_after: float
    steps: tuple[Step, ...]


def fit_temperature(
    logits: F64, labels: NDArray[np.int64], t_min: float, t_max: float, steps: int
) -> TemperatureFit:
    """Minimise the mean NLL over T in [t_min, t_max] by `steps` bisection steps on beta."""
    beta_min, beta_max = 1.0 / t_max, 1.0 / t_min
    g_lo = nll_gradient(logits, labels, beta_min)
    g_hi = nll_gradient(logits, labels, beta_max)
    nll_before = mean_nll(logits, labels, 1.0)
    trail: list[Step] = []
    side: str | None = None
    if g_lo >= 0:  # NLL increasing over the whole interval: smallest beta, largest T
        beta, side = beta_min, "t_max"
        bracket = (beta, beta)
    elif g_hi <= 0:  # NLL decreasing over the whole interval: largest beta, smallest T
        beta, side = beta_max, "t_min"
        bracket = (beta, beta)
    else:
        lo, hi = beta_min, beta_max
        for i in range(1, steps + 1):
            mid = (lo + hi) / 2
            g = nll_gradient(logits, labels, mid)
            trail.append(Step(i, lo, hi, mid, g))
            if g > 0:
                hi = mid
            else:
                lo = mid
        beta = (lo + hi) / 2
        bracket = (lo, hi)
    return TemperatureFit(
        beta=beta,
        temperature=1.0 / beta,
        boundary=side is not None,
        boundary_side=side,
        final_gradient=nll_gradient(logits, labels, beta),
        bracket=bracket,
        g_at_beta_min=g_lo,
        g_at_beta_max=g_hi,
        nll_before=nll_before,
        nll_after=mean_nll(logits, labels, beta),
        steps=tuple(trail),
    )
