"""The pre-registered split: sha256 keys of "<prefix><idx>", ascending, cut into named pools."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from job.errors import JobError


def split_key(prefix: str, idx: int) -> str:
    """Hex sha256 of the UTF-8 string prefix + decimal idx."""
    return hashlib.sha256(f"{prefix}{idx}".encode()).hexdigest()


@dataclass(frozen=True)
class Pool:
    name: str
    positions: tuple[int, ...]  # row positions in the dataset, ascending split key
    keys: Sequence[str]  # a tuple, or job.dataset.Strings past the split


def make_pools(prefix: str, ids: Sequence[int] | NDArray[np.int64],
               sizes: Sequence[tuple[str, int]]) -> dict[str, Pool]:
    """Cut the rows, ordered by split key, into consecutive pools of the given sizes."""
    total = sum(size for _, size in sizes)
    if total != len(ids):
        raise JobError(
            f"The protocol's pool sizes add up to {total} but the dataset has {len(ids)} rows; "
            "use the dataset the protocol pins or fix the pool sizes in provenance.json."
        )
    keyed = sorted((split_key(prefix, int(i)), pos) for pos, i in enumerate(ids))
    pools: dict[str, Pool] = {}
    start = 0
    for name, size in sizes:
        chunk = keyed[start : start + size]
        pools[name] = Pool(name, tuple(p for _, p in chunk), tuple(k for k, _ in chunk))
        start += size
    return pools
