"""The verifier scores the estimators' bootstrap resamples as draw counts over rows sorted once,
block by block (verify/estimators.py); the job gathers each resample's rows (job/estimators.py).
Every resample's score must agree between the two, and the verifier's memory must not grow with
the number of resamples (FORMAT.md, "Limits")."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import numpy as np
import pytest

from job import estimators as job_est
from job.bootstrap import resample_blocks
from job.calibration import softmax
from job.estimator_spec import DEFAULT_ESTIMATORS, parse_estimators
from verify import bootstrap
from verify import estimators as ver_est

AGREE = 1e-12


def _entries(classwise_interval: bool) -> list[dict[str, Any]]:
    entries = [json.loads(json.dumps(e)) for e in DEFAULT_ESTIMATORS]
    for e in entries:
        if e["id"] == "classwise-ece" and classwise_interval:
            e["interval"] = {"method": "paired-bootstrap", "level": 0.95}
    return entries


def _pool(k: int, n: int, seed: int, ties: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, k)) * 2.5
    if ties:  # few distinct logits: many equal confidences, equal-mass runs that split a tie
        z = np.round(z)
    y = np.where(rng.random(n) < 0.6, z.argmax(axis=1), rng.integers(0, k, n))
    return z.astype(np.float32).astype(np.float64), y.astype(np.int64)


POOLS = {"k2": _pool(2, 400, 1), "k3": _pool(3, 300, 2), "ties": _pool(2, 500, 3, ties=True),
         "fewer-rows-than-bins": _pool(3, 9, 4), "one-row": _pool(2, 1, 5)}


@pytest.mark.parametrize("name", POOLS)
@pytest.mark.parametrize("beta", [1.0, 0.55])
def test_each_resample_scores_as_the_job_scores_its_gathered_rows(name: str, beta: float) -> None:
    z, y = POOLS[name]
    entries = [e for e in _entries(classwise_interval=True) if "interval" in e or e["id"] == "classwise-ece"]
    for e in entries:  # every scalar kind, smooth ECE included, gets an interval here
        e.setdefault("interval", {"method": "paired-bootstrap", "level": 0.95})
    specs = {s.id: s for s in parse_estimators(entries, True)}
    resamples, seed = 30, 11
    probs = {"raw": softmax(z), "calibrated": softmax(beta * z)}
    pred = z.argmax(axis=1)
    found = ver_est.resample_scores(entries, probs, y, pred, seed, resamples)
    drawn = [rows for block in resample_blocks(len(y), resamples, seed) for rows in block]
    compared = 0
    for e in entries:
        score = job_est.scorer(specs[e["id"]])
        for which, p in probs.items():
            expected = [score(p[rows], y[rows], pred[rows]) for rows in drawn]
            got = found[e["id"]][which]
            assert len(got) == resamples
            for b, (x, g) in enumerate(zip(expected, got)):
                assert (x is None) == (g is None), (e["id"], which, b, x, g)
                if x is not None:
                    assert g is not None and abs(x - g) <= AGREE, (e["id"], which, b, x, g)
                    compared += 1
    assert compared > 0


def test_the_resamples_are_scored_in_memory_that_does_not_grow_with_their_number(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bootstrap, "BLOCK_CELLS", 40_000)  # blocks of 20 resamples of 2,000 rows
    z, y = _pool(2, 2_000, 6)
    protocol: dict[str, Any] = {"metrics": {"estimators": _entries(classwise_interval=False)},
                                "bootstrap": {"resamples": 0, "seed": 3}}

    def peak(resamples: int) -> int:
        protocol["bootstrap"]["resamples"] = resamples
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            ver_est.expected_record(protocol, z, y, 0.8)
            return tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()

    few, many = peak(40), peak(400)
    # Holding every drawn row would add 360 * 2,000 * 8 bytes (5.8 MB); a block of draws and their
    # counts is bounded by verify.bootstrap.BLOCK_CELLS whatever the number of resamples.
    assert many - few < 500_000, (few, many)
