import numpy as np
import pytest

from job.metrics import bin_index, compute_metrics


def logits_for_confidence(conf):
    """Two-class logits whose softmax puts probability `conf` on class 0."""
    conf = np.asarray(conf, dtype=np.float64)
    return np.stack([np.log(conf), np.log1p(-conf)], axis=1)


def test_bin_edges_are_left_closed_and_the_last_bin_holds_one():
    c = np.array([0.0, 0.1, 0.0999999, 0.5, 0.3, 0.7, 0.9, 0.95, 1.0])
    assert bin_index(c).tolist() == [0, 1, 0, 5, 3, 7, 9, 9, 9]


def test_metrics_by_hand():
    conf = np.array([0.95, 0.95, 0.75, 0.55])
    labels = np.array([0, 1, 0, 0])
    m = compute_metrics(logits_for_confidence(conf), labels, 1.0, 0.9)
    assert m["n"] == 4 and m["correct"] == 3 and m["accuracy"] == 0.75
    assert m["mean_confidence"] == pytest.approx(conf.mean())
    p_true = np.array([0.95, 0.05, 0.75, 0.55])
    assert m["nll"] == pytest.approx(-np.log(p_true).mean())
    brier = np.mean([2 * 0.05**2, 2 * 0.95**2, 2 * 0.25**2, 2 * 0.45**2])
    assert m["brier"] == pytest.approx(brier)
    assert [b["count"] for b in m["bins"]] == [0, 0, 0, 0, 0, 1, 0, 1, 0, 2]
    assert m["bins"][0]["accuracy"] is None and m["bins"][0]["mean_confidence"] is None
    assert m["bins"][9]["accuracy"] == 0.5
    ece = (1 * abs(1 - 0.55) + 1 * abs(1 - 0.75) + 2 * abs(0.5 - 0.95)) / 4
    assert m["ece"] == pytest.approx(ece)
    assert m["mce"] == pytest.approx(0.45)
    assert m["threshold"] == {"value": 0.9, "accepted": 2, "wrong_accepted": 1}


def test_brier_range_and_k_classes():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(200, 4)) * 10
    labels = rng.integers(0, 4, 200)
    m = compute_metrics(logits, labels, 1.0, 0.9)
    assert 0 <= m["brier"] <= 2
    assert sum(b["count"] for b in m["bins"]) == 200


@pytest.mark.parametrize("beta", [0.05, 0.3, 1.0, 7.0, 20.0])
def test_argmax_never_changes_under_a_positive_temperature(beta):
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(500, 3)).astype(np.float32).astype(np.float64)
    labels = rng.integers(0, 3, 500)
    raw = compute_metrics(logits, labels, 1.0, 0.9)
    scaled = compute_metrics(logits, labels, beta, 0.9)
    assert raw["correct"] == scaled["correct"]
