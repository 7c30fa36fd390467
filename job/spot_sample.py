"""The rows a sampled reproduction compares, drawn from a seed (bundle/FORMAT.md, "Reproduction
attestation"): anyone holding the seed and the pool sizes draws the same rows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from job.errors import JobError


def draw_rows(pool_sizes: Sequence[tuple[str, int]], n: int, seed: int) -> dict[str, list[int]]:
    """Pool -> the positions (in pool order, ascending) of the `n` rows drawn with `seed`.

    Candidates are the pools' rows, pool after pool in the order given, each in pool order. PCG64
    seeded with `seed` gives one raw 64-bit value per candidate (`random_raw`, a stream numpy keeps
    stable across versions, unlike its Generator methods); the `n` candidates with the smallest
    values are drawn, ties going to the earlier candidate."""
    total = sum(size for _, size in pool_sizes)
    if not 1 <= n <= total:
        raise JobError(f"--sample {n} is outside 1..{total}, the rows of the pools compared; pick a "
                       "sample size in that range.")
    if seed < 0:
        raise JobError(f"--seed {seed} is negative; pass a seed of 0 or more.")
    raw = np.asarray(np.random.PCG64(seed).random_raw(total), dtype=np.uint64)
    chosen = np.sort(np.argsort(raw, kind="stable")[:n])
    out: dict[str, list[int]] = {}
    start = 0
    for name, size in pool_sizes:
        out[name] = [int(c) - start for c in chosen if start <= c < start + size]
        start += size
    return out
