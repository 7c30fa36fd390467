"""What a sampled reproduction re-runs, drawn from a seed (bundle/FORMAT.md, "Reproduction
attestation"): anyone holding the seed and the bundle's recorded batches draws the same ones.

Whole recorded batches are drawn, not single rows: a batch is the unit inference runs, so a sample
of b batches costs b forwards, where b rows scattered over the pools would cost up to b forwards
for b rows. `draw_rows` is the earlier rule (single rows), kept so attestations that used it stay
checkable by the same definition."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from job.errors import JobError


def _check(n: int, seed: int, total: int) -> None:
    if not 1 <= n <= total:
        raise JobError(f"--sample {n} is outside 1..{total}, the rows of the pools compared; pick a "
                       "sample size in that range.")
    if seed < 0:
        raise JobError(f"--seed {seed} is negative; pass a seed of 0 or more.")


def draw_batches(pool_batches: Sequence[tuple[str, Sequence[int]]], n: int, seed: int) -> dict[str, list[int]]:
    """Pool -> the recorded batch indices (ascending) drawn with `seed` until they hold at least `n` rows.

    `pool_batches` gives each pool's batch sizes, batch 0 first, pools in order. Candidates are every
    batch of every pool, pool after pool. PCG64 seeded with `seed` gives one raw 64-bit value per
    candidate (`random_raw`, a stream numpy keeps stable across versions); candidates are taken by
    ascending value (ties to the earlier candidate) until the rows taken reach `n`."""
    sizes = [(name, i, int(size)) for name, batch_sizes in pool_batches for i, size in enumerate(batch_sizes)]
    _check(n, seed, sum(size for _, _, size in sizes))
    raw = np.asarray(np.random.PCG64(seed).random_raw(len(sizes)), dtype=np.uint64)
    out: dict[str, list[int]] = {name: [] for name, _ in pool_batches}
    rows = 0
    for c in np.argsort(raw, kind="stable"):
        name, batch, size = sizes[int(c)]
        out[name].append(batch)
        rows += size
        if rows >= n:
            break
    return {name: sorted(batches) for name, batches in out.items()}


def draw_rows(pool_sizes: Sequence[tuple[str, int]], n: int, seed: int) -> dict[str, list[int]]:
    """Pool -> the positions (in pool order, ascending) of the `n` rows drawn with `seed` (the row draw
    of attestations without `sample.draw`).

    Candidates are the pools' rows, pool after pool in the order given, each in pool order. PCG64
    seeded with `seed` gives one raw 64-bit value per candidate; the `n` candidates with the
    smallest values are drawn, ties going to the earlier candidate."""
    total = sum(size for _, size in pool_sizes)
    _check(n, seed, total)
    raw = np.asarray(np.random.PCG64(seed).random_raw(total), dtype=np.uint64)
    chosen = np.sort(np.argsort(raw, kind="stable")[:n])
    out: dict[str, list[int]] = {}
    start = 0
    for name, size in pool_sizes:
        out[name] = [int(c) - start for c in chosen if start <= c < start + size]
        start += size
    return out
