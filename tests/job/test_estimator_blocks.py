"""The job scores a block of bootstrap resamples at once (job/estimators.py, "many resamples at
once"); every value must be bit for bit what scoring each resample's gathered rows alone gives
(`scorer`, `bin_means`, `ks_error`), since the bundle's bytes, and so its goldens, depend on it."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from job import estimators as est
from job.bootstrap import resample_blocks
from job.calibration import softmax
from job.estimator_spec import DEFAULT_ESTIMATORS, parse_estimators


def _with_intervals(kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    """The default estimators of these kinds, each with an interval (the classwise one too)."""
    entries = [json.loads(json.dumps(e)) for e in DEFAULT_ESTIMATORS if e["kind"] in kinds]
    for e in entries:
        e.setdefault("interval", {"method": "paired-bootstrap", "level": 0.95})
    return entries


def _pool(k: int, n: int, seed: int, *, ties: bool = False, certain: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, k)) * 2.5
    if ties:  # few distinct logits: equal confidences, and equal-mass runs that split a tie
        z = np.round(z)
    if certain:  # a third of the rows at confidence 1.0: repeated equal-mass edges at 1.0
        z[: n // 3] *= 40
    y = np.where(rng.random(n) < 0.6, z.argmax(axis=1), rng.integers(0, k, n))
    return z.astype(np.float32).astype(np.float64), y.astype(np.int64)


POOLS = {
    "one-row": _pool(2, 1, 1),
    "fewer-rows-than-bins": _pool(3, 9, 2),
    "tiny": _pool(2, 20, 3),
    "k3": _pool(3, 300, 5),
    "ties": _pool(2, 500, 6, ties=True),
    "bins-over-128-rows": _pool(4, 2500, 7),
    "certain": _pool(2, 60, 8, certain=True),
    "k5-ties-and-certain": _pool(5, 40, 9, ties=True, certain=True),
}


def _compare(name: str, kinds: tuple[str, ...], resamples: int, betas: tuple[float, ...]) -> int:
    """How many defined values the block and each resample alone gave alike (asserting all did)."""
    z, y = POOLS[name]
    specs = parse_estimators(_with_intervals(kinds), True)
    pred = z.argmax(axis=1)
    seed = 11
    drawn = [rows for block in resample_blocks(len(y), resamples, seed) for rows in block]
    compared = 0
    for beta in betas:
        probs = {"raw": softmax(z), "calibrated": softmax(beta * z)}
        found = est._resample_scores(specs, probs, y, pred, resamples, seed)
        for spec in specs:
            alone = est.scorer(spec)
            for which, p in probs.items():
                expected = [alone(p[rows], y[rows], pred[rows]) for rows in drawn]
                assert found[spec.id][which] == expected, (spec.id, which, beta)
                compared += sum(v is not None for v in expected)
    return compared


@pytest.mark.parametrize("name", POOLS)
def test_a_block_of_resamples_bins_and_ranks_as_each_resample_alone(name: str) -> None:
    assert _compare(name, ("binned", "ks"), 25, (0.55, 3.0)) > 0


def test_smooth_ece_is_scored_on_each_resamples_rows_of_the_block() -> None:
    assert _compare("k3", ("smooth-ece",), 3, (0.55,)) > 0


@pytest.mark.parametrize("bins", [15, 200])  # a comparison per edge, and a search per row
@pytest.mark.parametrize("binning", ["equal-mass", "equal-width"])
def test_block_bin_means_are_bin_means_row_by_row(binning: str, bins: int) -> None:
    rng = np.random.default_rng(4)
    for n in (1, 3, 14, 15, 16, 200, 1100):
        values = rng.random((6, n))
        values[0] = np.round(values[0], 1)  # ties, and repeated equal-mass edges
        values[1, : n // 2] = 1.0
        values[2, : max(1, n // 10)] = 1.0 + 2.0 ** -52  # above every edge: the last bin takes them,
        values[3, n // 2] = 1.0 + 2.0 ** -51  # after its own rows, as bin_means's stable sort puts them
        outcomes = (rng.random((6, n)) < values).astype(np.float64)
        block = est.block_bin_means(values, outcomes, binning, bins)
        for row in range(6):
            edges = (est.equal_mass_edges(values[row], bins) if binning == "equal-mass"
                     else est.equal_width_edges(bins))
            assert block[row] == est.bin_means(values[row], outcomes[row], edges), (n, row)


def test_block_ks_is_ks_error_row_by_row() -> None:
    rng = np.random.default_rng(5)
    pool = np.round(rng.random(300), 2)  # many equal confidences
    hits = (rng.random(300) < pool).astype(np.float64)
    rows = rng.integers(0, 300, size=(40, 300))
    rank = np.unique(pool, return_inverse=True)[1]
    found = est.block_ks(pool[rows], hits[rows], rank[rows])
    assert found == [est.ks_error(pool[r], hits[r]) for r in rows]
