"""The verifier's block-wise resample matrix: hashed and scored on a second thread, counted into reused
buffers, and the same numbers as the whole matrix drawn at once."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from verify import bootstrap


@pytest.mark.parametrize("cells", [7, 40, 10_000])
def test_block_sums_are_the_whole_matrix_scored_and_hashed(cells: int, monkeypatch: pytest.MonkeyPatch) -> None:
    real = bootstrap.resample_blocks
    monkeypatch.setattr(bootstrap, "resample_blocks", lambda seed, resamples, n: real(seed, resamples, n, cells))
    whole = bootstrap.resample_indices(31, 23, 9)
    columns = np.random.default_rng(3).normal(size=(9, 5))
    digest = hashlib.sha256()
    sums = bootstrap.block_sums(31, 23, 9, columns, digest)
    assert sums.shape == (23, 5)
    assert np.allclose(sums, bootstrap.draw_counts(whole, 9) @ columns, rtol=0, atol=1e-12)  # BLAS may round apart
    assert digest.hexdigest() == bootstrap.indices_sha256(whole)


def test_an_error_in_the_worker_is_raised() -> None:
    class Broken:
        def update(self, data: object) -> None:
            raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        bootstrap.block_sums(1, 10, 5, np.ones((5, 2)), Broken())


def test_draw_counts_into_a_reused_buffer_match_bincount() -> None:
    n = 13
    buffer = np.full((6, n), -1.0)
    for seed in (1, 2):
        idx = bootstrap.resample_indices(seed, 4, n)
        counts = bootstrap.draw_counts(idx, n, buffer)
        want = np.stack([np.bincount(row, minlength=n) for row in idx]).astype(np.float64)
        assert counts.shape == (4, n) and counts.dtype == np.float64
        assert np.array_equal(counts, want)
        assert np.shares_memory(counts, buffer)
    assert np.array_equal(bootstrap.draw_counts(idx, n, np.empty((2, n))), want)  # too small: a fresh array
