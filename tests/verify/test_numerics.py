"""The verifier's numerics against brute force: metrics row by row in high precision, the
re-fitted temperature against a dense grid and the plain bisection, the trajectory checker."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bundle.wording import interval_verdict
from tests.synthetic import bisect
from verify import bootstrap, numerics, refit

mpmath = pytest.importorskip("mpmath")
mpmath.mp.dps = 40


def logits(seed: int, n: int, k: int, scale: float = 4.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    z = rng.normal(0.0, 1.0, (n, k))
    z[np.arange(n), y] += scale * rng.uniform(-0.5, 1.0, n)
    return z.astype(np.float32).astype(np.float64), y.astype(np.int64)


def brute_metrics(z: np.ndarray, y: np.ndarray, beta: float, threshold: float) -> dict:
    """Row by row in 40-digit arithmetic; bins by scanning the edges k/10."""
    n, k = z.shape
    nll = brier = conf_sum = mpmath.mpf(0)
    confs, correct = [], []
    for i in range(n):
        s = [mpmath.mpf(float(v)) * mpmath.mpf(beta) for v in z[i]]
        lse = mpmath.log(mpmath.fsum(mpmath.exp(v) for v in s))
        p = [mpmath.exp(v - lse) for v in s]
        nll += lse - s[y[i]]
        brier += mpmath.fsum((p[j] - (1 if j == y[i] else 0)) ** 2 for j in range(k))
        top = max(range(k), key=lambda j: (z[i, j], -j))  # first index of the max logit
        c = float(max(p))
        confs.append(c)
        conf_sum += max(p)
        correct.append(bool(top == int(y[i])))
    bins = []
    ece = mce = 0.0
    for b in range(10):
        lower, upper = b / 10, (b + 1) / 10
        members = [i for i in range(n)
                   if lower <= confs[i] and (confs[i] < upper or (b == 9 and confs[i] <= upper))]
        if members:
            acc = sum(correct[i] for i in members) / len(members)
            mc = math.fsum(confs[i] for i in members) / len(members)
            ece += len(members) / n * abs(acc - mc)
            mce = max(mce, abs(acc - mc))
            bins.append({"lower": lower, "upper": upper, "count": len(members), "accuracy": acc,
                         "mean_confidence": mc})
        else:
            bins.append({"lower": lower, "upper": upper, "count": 0, "accuracy": None,
                         "mean_confidence": None})
    accepted = [i for i in range(n) if confs[i] >= threshold]
    return {"n": n, "correct": sum(correct), "accuracy": sum(correct) / n,
            "mean_confidence": float(conf_sum / n), "nll": float(nll / n),
            "brier": float(brier / n), "ece": ece, "mce": mce, "bins": bins,
            "threshold": {"value": threshold, "accepted": len(accepted),
                          "wrong_accepted": sum(not correct[i] for i in accepted)}}


@pytest.mark.parametrize("seed,n,k,beta", [(0, 64, 2, 1.0), (1, 64, 2, 0.37), (2, 50, 3, 2.5),
                                           (3, 40, 2, 12.0), (4, 33, 4, 0.05)])
def test_metric_set_equals_brute_force(seed: int, n: int, k: int, beta: float) -> None:
    z, y = logits(seed, n, k)
    diffs: list[str] = []
    numerics.compare(numerics.metric_set(z, y, beta, 0.9), brute_metrics(z, y, beta, 0.9), "m",
                     1e-12, diffs)
    assert diffs == []


def test_bin_edges_and_saturation() -> None:
    # confidence exactly 0.5 (equal logits) goes to bin 5; exactly 1.0 to the last bin;
    # ties take the first index as the prediction.
    z = np.array([[0.0, 0.0], [0.0, 800.0], [40.0, 1.0]])
    y = np.array([1, 1, 0])
    m = numerics.metric_set(z, y, 1.0, 0.9)
    counts = [b["count"] for b in m["bins"]]
    assert counts[5] == 1 and counts[9] == 2 and sum(counts) == 3
    assert m["correct"] == 2  # row 0 predicts class 0 (first argmax), label 1
    assert m["threshold"] == {"value": 0.9, "accepted": 2, "wrong_accepted": 0}
    assert m["bins"][0]["accuracy"] is None and m["bins"][0]["mean_confidence"] is None
    assert [b["lower"] for b in m["bins"]] == [k / 10 for k in range(10)]


def test_ece_by_hand() -> None:
    # two rows, both with confidence sigmoid(2) = 0.8808 (bin 8); one right, one wrong
    z = np.array([[0.0, 2.0], [0.0, 2.0]])
    y = np.array([1, 0])
    m = numerics.metric_set(z, y, 1.0, 0.9)
    c = 1 / (1 + math.exp(-2))
    assert m["bins"][8]["count"] == 2
    assert m["ece"] == pytest.approx(abs(0.5 - c), abs=1e-15)
    assert m["mce"] == pytest.approx(abs(0.5 - c), abs=1e-15)
    assert m["brier"] == pytest.approx(((1 - c) ** 2 * 2 + c ** 2 * 2) / 2, abs=1e-15)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 40), st.integers(2, 5),
       st.floats(0.05, 20.0))
def test_metric_invariants(seed: int, n: int, k: int, beta: float) -> None:
    z, y = logits(seed, n, k, scale=8.0)
    m = numerics.metric_set(z, y, beta, 0.9)
    assert sum(b["count"] for b in m["bins"]) == n
    assert 0.0 <= m["ece"] <= m["mce"] + 1e-15 <= 1.0 + 1e-15
    assert 0.0 <= m["brier"] <= 2.0 and m["nll"] >= 0.0
    assert m["correct"] == int((np.argmax(z, axis=1) == y).sum())


def test_gradient_is_the_derivative_of_the_nll() -> None:
    z, y = logits(5, 200, 3)
    for beta in (0.1, 0.7, 1.0, 3.0):
        h = 1e-6
        fd = (numerics.mean_nll(z, y, beta + h) - numerics.mean_nll(z, y, beta - h)) / (2 * h)
        assert numerics.gradient(z, y, beta) == pytest.approx(fd, abs=1e-7)
        fd2 = (numerics.gradient(z, y, beta + h) - numerics.gradient(z, y, beta - h)) / (2 * h)
        assert numerics.curvature(z, beta) == pytest.approx(fd2, rel=1e-5, abs=1e-8)
    betas = np.array([0.05, 0.5, 1.0, 20.0])
    vec = numerics.gradients(z, y, betas)
    assert vec == pytest.approx([numerics.gradient(z, y, b) for b in betas], abs=1e-13)


@pytest.mark.parametrize("seed,scale", [(0, 4.0), (1, 8.0), (2, 1.5), (3, 20.0)])
def test_refit_matches_dense_grid_and_bisection(seed: int, scale: float) -> None:
    z, y = logits(seed, 256, 2, scale)
    r = refit.refit_temperature(z, y, 0.05, 20.0)
    assert r.boundary_side is None
    grid = np.geomspace(0.05, 20.0, 4001)
    nll = [numerics.mean_nll(z, y, 1.0 / t) for t in grid]
    best = int(np.argmin(nll))
    assert grid[max(best - 1, 0)] <= r.temperature <= grid[min(best + 1, len(grid) - 1)]
    assert r.nll <= min(nll) + 1e-15
    b = bisect(z, y, 0.05, 20.0, 100)
    assert abs(1.0 / b["beta"] - r.temperature) <= 1e-9 * r.temperature
    assert abs(r.gradient) < 1e-12


def test_refit_boundaries() -> None:
    rng = np.random.default_rng(0)
    # uninformative logits: the NLL keeps falling as T grows, so the optimum is t_max
    z = rng.normal(0.0, 3.0, (100, 2))
    y = rng.integers(0, 2, 100)
    r = refit.refit_temperature(z, y, 0.05, 20.0)
    assert r.boundary_side == "t_max" and r.temperature == 20.0
    assert bisect(z, y, 0.05, 20.0, 100)["boundary_side"] == "t_max"
    # separable with small margins: the NLL keeps falling as T shrinks, so the optimum is t_min
    y = rng.integers(0, 2, 100)
    z = np.zeros((100, 2))
    z[np.arange(100), y] = 0.01
    r = refit.refit_temperature(z, y, 0.05, 20.0)
    assert r.boundary_side == "t_min" and r.temperature == 0.05
    assert bisect(z, y, 0.05, 20.0, 100)["boundary_side"] == "t_min"


def _fit_records(z: np.ndarray, y: np.ndarray) -> tuple[dict, dict]:
    b = bisect(z, y, 0.05, 20.0, 100)
    trajectory = {k: b[k] for k in ("beta_min", "beta_max", "g_at_beta_min", "g_at_beta_max",
                                    "steps")}
    temperature = {"beta": b["beta"], "bracket": b["bracket"], "steps": len(b["steps"]),
                   "boundary": b["boundary_side"] is not None,
                   "boundary_side": b["boundary_side"],
                   "final_gradient": numerics.gradient(z, y, b["beta"])}
    return trajectory, temperature


def test_trajectory_checker_accepts_a_real_bisection() -> None:
    z, y = logits(7, 256, 2)
    trajectory, temperature = _fit_records(z, y)
    assert "100 steps" in refit.check_trajectory(z, y, trajectory, temperature, 0.05, 20.0, 100)


@pytest.mark.parametrize("edit,message", [
    (lambda t, T: t["steps"][10].update(g=-t["steps"][10]["g"]), "g("),
    (lambda t, T: t["steps"][3].update(mid=t["steps"][3]["mid"] * (1 + 1e-9)), "mid"),
    (lambda t, T: t["steps"][20].update(lo=t["steps"][20]["hi"]), "starts from"),
    (lambda t, T: t["steps"].pop(), "steps"),
    (lambda t, T: t.update(g_at_beta_min=t["g_at_beta_min"] + 1e-6), "g_at_beta_min"),
    (lambda t, T: t.update(beta_max=19.0), "brackets"),
    (lambda t, T: T.update(beta=T["beta"] * (1 + 1e-12)), "midpoint"),
    (lambda t, T: T.update(bracket=[T["bracket"][0], T["bracket"][1] * 2]), "final bracket"),
    (lambda t, T: T.update(final_gradient=0.01), "final_gradient"),
    (lambda t, T: T.update(boundary=True, boundary_side="t_max"), "bisection steps"),
])
def test_trajectory_checker_rejects(edit, message: str) -> None:  # type: ignore[no-untyped-def]
    z, y = logits(8, 128, 2)
    trajectory, temperature = _fit_records(z, y)
    trajectory, temperature = copy.deepcopy(trajectory), copy.deepcopy(temperature)
    edit(trajectory, temperature)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        refit.check_trajectory(z, y, trajectory, temperature, 0.05, 20.0, 100)


def test_trajectory_checker_boundary() -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(0.0, 3.0, (100, 2))
    y = rng.integers(0, 2, 100)
    trajectory, temperature = _fit_records(z, y)
    assert "boundary" in refit.check_trajectory(z, y, trajectory, temperature, 0.05, 20.0, 100)
    temperature["boundary_side"] = "t_min"
    with pytest.raises(ValueError, match="t_min"):
        refit.check_trajectory(z, y, trajectory, temperature, 0.05, 20.0, 100)


@pytest.mark.parametrize("seed,n,beta", [(0, 30, 0.7), (1, 17, 2.0), (2, 50, 1.0)])
def test_bootstrap_counts_equal_scoring_the_drawn_rows(seed: int, n: int, beta: float) -> None:
    """Scoring through draw counts equals scoring each resample's drawn rows, repeats counted."""
    z, y = logits(seed, n, 2, scale=6.0)
    idx = bootstrap.resample_indices(seed, 40, n)
    fast = bootstrap.scored(bootstrap.row_terms(z, y, beta), bootstrap.draw_counts(idx, n))
    for b, row in enumerate(idx):
        slow = numerics.metric_set(z[row], y[row], beta, 0.9)
        for metric in ("nll", "brier", "ece"):
            assert fast[metric][b] == pytest.approx(slow[metric], abs=1e-13)


def test_bootstrap_indices_follow_the_protocol_rng() -> None:
    idx = bootstrap.resample_indices(20240508, 3, 5)
    again = np.random.Generator(np.random.PCG64(20240508)).integers(0, 5, size=(3, 5))
    assert idx.dtype == np.int64 and (idx == again).all()
    assert bootstrap.indices_sha256(idx) == __import__("hashlib").sha256(
        again.astype("<i8").tobytes()).hexdigest()
    assert interval_verdict(-0.2, -0.1) == "decrease"
    assert interval_verdict(0.1, 0.2) == "increase"
    assert interval_verdict(-0.1, 0.0) == "no claim"
