import numpy as np
import pytest

from job.calibration import fit_temperature, log_softmax, mean_nll, nll_gradient, softmax


def overconfident(seed: int, n: int = 300, k: int = 2, scale: float = 4.0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k))
    logits[np.arange(n), labels] += 1.0
    return logits * scale, labels


def golden_section_on_t(logits, labels, lo, hi, iters=200):
    """An independent minimiser: golden-section search on T directly."""
    phi = (np.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - phi * (b - a), a + phi * (b - a)
    for _ in range(iters):
        if mean_nll(logits, labels, 1 / c) < mean_nll(logits, labels, 1 / d):
            b, d = d, c
            c = b - phi * (b - a)
        else:
            a, c = c, d
            d = a + phi * (b - a)
    return (a + b) / 2


@pytest.mark.parametrize("seed,k", [(0, 2), (1, 2), (2, 3), (3, 5)])
def test_bisection_agrees_with_an_independent_minimiser(seed, k):
    logits, labels = overconfident(seed, k=k)
    fit = fit_temperature(logits, labels, 0.05, 20.0, 100)
    assert not fit.boundary
    assert fit.temperature == pytest.approx(golden_section_on_t(logits, labels, 0.05, 20.0), rel=1e-6)
    assert abs(fit.final_gradient) < 1e-9
    assert fit.nll_after <= fit.nll_before
    assert fit.temperature > 1  # scaled-up logits are overconfident


def test_trajectory_is_a_valid_bisection():
    logits, labels = overconfident(4)
    fit = fit_temperature(logits, labels, 0.05, 20.0, 100)
    assert len(fit.steps) == 100
    assert (fit.steps[0].lo, fit.steps[0].hi) == (1 / 20.0, 1 / 0.05)
    for prev, nxt in zip(fit.steps, fit.steps[1:]):
        assert prev.mid == (prev.lo + prev.hi) / 2
        assert (nxt.lo, nxt.hi) == ((prev.lo, prev.mid) if prev.g > 0 else (prev.mid, prev.hi))


def test_gradient_matches_finite_difference_and_is_increasing():
    logits, labels = overconfident(5, k=3)
    betas = np.linspace(0.05, 5, 40)
    grads = [nll_gradient(logits, labels, b) for b in betas]
    assert all(np.diff(grads) >= 0)
    h = 1e-6
    fd = (mean_nll(logits, labels, 1 + h) - mean_nll(logits, labels, 1 - h)) / (2 * h)
    assert nll_gradient(logits, labels, 1.0) == pytest.approx(fd, rel=1e-5)


def test_boundary_solutions_are_reported_not_hidden():
    # labels opposite to the logits: the NLL keeps falling as T grows, so T hits t_max
    logits = np.array([[3.0, -3.0], [-2.0, 2.0], [1.0, -1.0]])
    wrong = np.array([1, 0, 1])
    fit = fit_temperature(logits, wrong, 0.05, 20.0, 100)
    assert fit.boundary and fit.boundary_side == "t_max" and fit.temperature == 20.0
    assert fit.steps == ()
    # perfectly separated and right: sharper is always better, so T hits t_min
    right = np.array([0, 1, 0])
    fit = fit_temperature(logits, right, 0.05, 20.0, 100)
    assert fit.boundary and fit.boundary_side == "t_min" and fit.temperature == pytest.approx(0.05)


def test_nll_is_stable_for_huge_logits():
    logits = np.array([[1e4, -1e4], [-1e4, 1e4], [1e4, 1e4 - 1]])
    labels = np.array([1, 1, 0])
    lp = log_softmax(logits)
    assert np.isfinite(lp).all()
    assert mean_nll(logits, labels) == pytest.approx((2e4 + 0 + np.log1p(np.exp(-1))) / 3)
    assert np.allclose(softmax(logits).sum(axis=1), 1.0)
