"""The parsed forms of bundle files that one check reads and later checks use."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verify.numerics import F64, I64

__all__ = ["PoolData"]


@dataclass(frozen=True)
class PoolData:
    """One pool's predictions, as float64 logits and int64 labels."""

    name: str
    idx: list[int]
    split_key: list[str]
    text_sha256: list[str]
    z32: np.ndarray
    z: F64
    y: I64
    prob: F64
    pred: I64
    token_count: np.ndarray
    truncated: np.ndarray
    batch: np.ndarray
    full_token_count: np.ndarray | None = None  # before truncation; None in bundles without the column
