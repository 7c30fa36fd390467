"""Calibration metrics of K-class probabilities, as defined in the protocol."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from job.calibration import log_softmax

BINS = 10
EDGES = tuple(k / BINS for k in range(BINS + 1))


def bin_index(confidence: NDArray[np.float64]) -> NDArray[np.int64]:
    """Bin b holds edges[b] <= c < edges[b+1]; c = 1.0 falls in the last bin."""
    idx = np.searchsorted(np.asarray(EDGES), confidence, side="right") - 1
    return np.clip(idx, 0, BINS - 1).astype(np.int64)


def compute_metrics(
    logits: NDArray[np.float64], labels: NDArray[np.int64], beta: float, threshold: float
) -> dict[str, Any]:
    """All metrics of softmax(beta * logits) against labels (float64 throughout)."""
    n, k = logits.shape
    lp = log_softmax(beta * logits)
    p = np.exp(lp)
    rows = np.arange(n)
    pred = logits.argmax(axis=1)
    conf = p[rows, pred]
    correct = pred == labels
    onehot = np.zeros((n, k))
    onehot[rows, labels] = 1.0
    which = bin_index(conf)
    bins = []
    gaps = []
    ece = 0.0
    for b in range(BINS):
        members = which == b
        count = int(members.sum())
        acc = float(correct[members].mean()) if count else None
        mconf = float(conf[members].mean()) if count else None
        if count:
            gap = abs(acc - mconf)  # type: ignore[operator]
            gaps.append(gap)
            ece += count / n * gap
        bins.append(
            {"lower": EDGES[b], "upper": EDGES[b + 1], "count": count,
             "accuracy": acc, "mean_confidence": mconf}
        )
    accepted = conf >= threshold
    return {
        "n": int(n),
        "correct": int(correct.sum()),
        "accuracy": float(correct.mean()),
        "mean_confidence": float(conf.mean()),
        "nll": float(-lp[rows, labels].mean()),
        "brier": float(((p - onehot) ** 2).sum(axis=1).mean()),
        "ece": float(ece),
        "mce": float(max(gaps)) if gaps else 0.0,
        "bins": bins,
        "threshold": {
            "value": threshold,
            "accepted": int(accepted.sum()),
            "wrong_accepted": int((accepted & ~correct).sum()),
        },
    }
