"""The verifier's recomputations run in row blocks (verify/numerics.py BLOCK_CELLS): their peak
allocation does not grow with the pool's rows beyond a few values per row, whatever the number of
classes or of trajectory steps, and blocking changes no value (FORMAT.md, "Limits")."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from bundle.views import figures
from verify import bootstrap, numerics

K = 100
SMALL, LARGE = 2_000, 20_000
BLOCK = 5_000
"""Cells per block in these tests: 50 rows of 100 classes."""
PER_ROW_BYTES = 32 * 8
"""What a blocked recomputation may keep per row: a few float64 and int64 vectors of len(rows)
(per-row terms, labels, bins, the (n, 10) bin matrices of the bootstrap), far below one float64 per
class (K * 8 = 800 bytes) for every row."""


def _pool(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n).astype(np.int64)
    z = rng.normal(0.0, 1.0, (n, K))
    z[np.arange(n), y] += 2.0
    return z.astype(np.float32).astype(np.float64), y


BETAS = np.linspace(0.5, 2.0, 40)
RECOMPUTATIONS: dict[str, Callable[[np.ndarray, np.ndarray], Any]] = {
    "trajectory gradients": lambda z, y: numerics.gradients(z, y, BETAS),
    "gradient": lambda z, y: numerics.gradient(z, y, 1.3),
    "curvature": lambda z, y: numerics.curvature(z, 1.3),
    "mean_nll": lambda z, y: numerics.mean_nll(z, y, 1.3),
    "metric_set": lambda z, y: numerics.metric_set(z, y, 1.3, 0.9),
    "bootstrap row terms": lambda z, y: bootstrap.row_terms(z, y, 1.3),
    "figure confidences": lambda z, y: figures.top_confidence(z, 1.3),
}


def _peak(fn: Callable[[np.ndarray, np.ndarray], Any], n: int) -> int:
    """Peak bytes allocated by fn on a pool of n rows, beyond the pool itself."""
    z, y = _pool(n)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn(z, y)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numerics, "BLOCK_CELLS", BLOCK)
    monkeypatch.setattr(figures, "BLOCK_CELLS", BLOCK)


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("name", sorted(RECOMPUTATIONS))
def test_peak_allocation_does_not_grow_with_rows(name: str) -> None:
    fn = RECOMPUTATIONS[name]
    small, large = _peak(fn, SMALL), _peak(fn, LARGE)
    assert large - small <= (LARGE - SMALL) * PER_ROW_BYTES, (name, small, large)
    assert large <= LARGE * PER_ROW_BYTES + 64 * BLOCK * 8, (name, large)


def test_the_trajectory_check_does_not_grow_with_steps(small_blocks: None) -> None:
    few = _peak(lambda z, y: numerics.gradients(z, y, BETAS[:4]), SMALL)
    many = _peak(lambda z, y: numerics.gradients(z, y, np.linspace(0.5, 2.0, 400)), SMALL)
    assert many <= few + 400 * 64, (few, many)  # a float per step, not a pool per step


def test_blocking_changes_no_value(monkeypatch: pytest.MonkeyPatch) -> None:
    z, y = _pool(3_001, seed=1)
    whole = {name: fn(z, y) for name, fn in RECOMPUTATIONS.items()}
    monkeypatch.setattr(numerics, "BLOCK_CELLS", 7 * K)  # blocks of 7 rows, a ragged last one
    monkeypatch.setattr(figures, "BLOCK_CELLS", 7 * K)
    for name, fn in RECOMPUTATIONS.items():
        blocked = fn(z, y)
        if isinstance(blocked, tuple):
            for a, b in zip(blocked, whole[name], strict=True):
                assert np.array_equal(a, b), name
        elif isinstance(blocked, np.ndarray):
            assert np.array_equal(blocked, whole[name]), name
        else:
            assert blocked == whole[name], name


def test_row_blocks_cover_every_row_once() -> None:
    for n, k, cells in ((0, 3, 10), (1, 1000, 10), (10, 3, 10), (11, 3, 9), (5, 1, 1)):
        blocks = list(numerics.row_blocks(n, k, cells))
        assert [i for b in blocks for i in range(b.start, b.stop)] == list(range(n))
        assert all(b.stop - b.start <= max(1, cells // k) for b in blocks)
