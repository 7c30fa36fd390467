"""Tokenising and batching: token ids per row, the protocol's batch order, right-padded batches."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class Encoded:
    ids: tuple[tuple[int, ...], ...]
    truncated: NDArray[np.bool_]

    @property
    def lengths(self) -> NDArray[np.int64]:
        return np.array([len(i) for i in self.ids], dtype=np.int64)


def encode(tokenizer: Any, texts: Sequence[str], max_length: int, pairs: Sequence[str] | None = None) -> Encoded:
    """Token ids with special tokens, truncated to max_length; flags the rows that were cut.

    With `pairs`, row i is the pair (texts[i], pairs[i]), tokenised as the model's tokenizer joins
    pairs (`tokenizer(texts, pairs, truncation=True, max_length=...)` for the rows that are cut)."""
    second = None if pairs is None else list(pairs)
    full = tokenizer(list(texts), second, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
    truncated = np.array([len(x) > max_length for x in full], dtype=bool)
    ids = [tuple(x) for x in full]
    if truncated.any():
        cut_rows = [i for i in range(len(texts)) if truncated[i]]
        cut = tokenizer([texts[i] for i in cut_rows], None if second is None else [second[i] for i in cut_rows],
                        add_special_tokens=True, truncation=True, max_length=max_length)["input_ids"]
        for i, x in zip(cut_rows, cut, strict=True):
            ids[i] = tuple(x)
    return Encoded(tuple(ids), truncated)


def batch_plan(lengths: NDArray[np.int64], keys: Sequence[str], batch_size: int) -> list[list[int]]:
    """Rows sorted by token count descending, ties by split key ascending, cut into batches."""
    order = sorted(range(len(keys)), key=lambda i: (-int(lengths[i]), keys[i]))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def padded_batch(flat: NDArray[np.int64], offsets: NDArray[np.int64], lengths: NDArray[np.int64],
                 rows: Sequence[int], pad_id: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(input_ids, attention_mask) [len(rows), longest] for `rows`: right-padded with pad_id,
    mask 1 on real tokens. `flat` holds every row's ids back to back, row i at offsets[i]."""
    lens = lengths[rows]
    width = int(lens.max())
    cols = np.arange(width, dtype=np.int64)
    mask = cols[None, :] < lens[:, None]
    src = np.minimum(offsets[rows][:, None] + cols[None, :], len(flat) - 1)
    ids = np.where(mask, flat[src], np.int64(pad_id))
    return ids, mask.astype(np.int64)


