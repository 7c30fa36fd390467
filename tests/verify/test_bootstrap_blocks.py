"""The verifier's block-wise resample matrix: hashed in order on a second thread, counted into a reused
buffer, and the same numbers as the whole matrix drawn at once."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from verify import bootstrap


@pytest.mark.parametrize("cells", [7, 40, 10_000])
def test_hashed_blocks_give_the_whole_matrix_and_its_sha256(cells: int) -> None:
    whole = bootstrap.resample_indices(31, 23, 9)
    digest = hashlib.sha256()
    blocks = list(bootstrap.hashed(bootstrap.resample_blocks(31, 23, 9, cells=cells), digest))
    assert np.array_equal(np.concatenate(blocks), whole)
    assert digest.hexdigest() == bootstrap.indices_sha256(whole)


def test_an_error_while_scoring_leaves_no_thread_behind() -> None:
    digest = hashlib.sha256()
    with pytest.raises(RuntimeError, match="stop"):
        for _ in bootstrap.hashed(bootstrap.resample_blocks(1, 10, 5, cells=5), digest):
            raise RuntimeError("stop")


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
