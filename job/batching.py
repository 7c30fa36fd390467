"""Tokenising and batching: token counts per row, the protocol's batch order, right-padded batches.

A pool's rows reach the model through a token source: `Tokenized` tokenises every row once to count
its tokens (the batch plan needs only the counts) and tokenises each batch's rows again when that
batch runs, so only the batches in flight hold token ids (one, or one per worker thread);
`Encoded` holds the ids of a few rows that are already tokenised. Both give the same batches for the
same rows: one tokenising rule (`tokenize`) and one padding rule (`padded_batch`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow.compute as pc
from numpy.typing import NDArray

from bundle import arrow_arrays
from job.dataset import Strings
from job.errors import JobError

COUNT_CHUNK = 1024  # rows tokenised at a time while counting tokens: bounds the tokenizer's output held


@dataclass(frozen=True)
class Batch:
    """One right-padded batch [B, longest]: token ids, attention mask (1 on real tokens) and, for a
    model with segment embeddings, token type ids (0 on padding); None for other models."""

    ids: NDArray[np.int64]
    mask: NDArray[np.int64]
    types: NDArray[np.int64] | None = None


class Tokens(Protocol):
    """A pool's rows as the model sees them: token counts and truncation flags per row (pool order),
    and the padded batch of any rows."""

    @property
    def lengths(self) -> NDArray[np.int64]: ...

    @property
    def truncated(self) -> NDArray[np.bool_]: ...

    @property
    def full_lengths(self) -> NDArray[np.int64]: ...

    def batch(self, rows: Sequence[int], pad_id: int, /) -> Batch: ...


def tokenize(tokenizer: Any, texts: Sequence[str], max_length: int, pairs: Sequence[str] | None = None,
             segments: bool = False) -> tuple[list[list[int]], list[list[int]] | None, NDArray[np.bool_],
                                              NDArray[np.int64]]:
    """(token ids, token type ids or None, truncated flags, token counts before truncation) of each
    row, special tokens included.

    Row i is texts[i], or the pair (texts[i], pairs[i]) joined as the model's tokenizer joins pairs.
    A row longer than max_length is tokenised again with `truncation=True, max_length=max_length`
    and flagged. Token type ids (the tokenizer's segment of each token) only when `segments`."""
    second = None if pairs is None else list(pairs)
    kwargs: dict[str, Any] = {"add_special_tokens": True, "return_attention_mask": False,
                              "return_token_type_ids": segments}
    full = tokenizer(list(texts), second, truncation=False, verbose=False, **kwargs)
    ids = [list(x) for x in full["input_ids"]]
    types = [list(x) for x in full["token_type_ids"]] if segments else None
    full_lengths = np.array([len(x) for x in ids], dtype=np.int64)
    truncated = full_lengths > max_length
    if truncated.any():
        cut_rows = [i for i in range(len(ids)) if truncated[i]]
        cut = tokenizer([texts[i] for i in cut_rows], None if second is None else [second[i] for i in cut_rows],
                        truncation=True, max_length=max_length, **kwargs)
        for j, i in enumerate(cut_rows):
            ids[i] = list(cut["input_ids"][j])
            if types is not None:
                types[i] = list(cut["token_type_ids"][j])
    return ids, types, truncated, full_lengths


def _flat(rows: Sequence[Sequence[int]], lengths: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(every row's values back to back, where each row starts)."""
    offsets = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
    return flat, offsets


def _batch(ids: Sequence[Sequence[int]], types: Sequence[Sequence[int]] | None, pad_id: int) -> Batch:
    """The padded batch of these rows, in this order."""
    lengths = np.array([len(x) for x in ids], dtype=np.int64)
    rows = list(range(len(ids)))
    flat, offsets = _flat(ids, lengths)
    padded, mask = padded_batch(flat, offsets, lengths, rows, pad_id)
    if types is None:
        return Batch(padded, mask)
    flat_types, _ = _flat(types, lengths)
    return Batch(padded, mask, padded_batch(flat_types, offsets, lengths, rows, 0)[0])


@dataclass(frozen=True)
class Encoded:
    """Rows already tokenised, ids held in memory (a few rows: the forward check)."""

    ids: tuple[tuple[int, ...], ...]
    truncated: NDArray[np.bool_]
    types: tuple[tuple[int, ...], ...] | None = None
    full: NDArray[np.int64] | None = None  # token counts before truncation; None: none was cut

    @property
    def full_lengths(self) -> NDArray[np.int64]:
        return self.lengths if self.full is None else self.full

    @property
    def lengths(self) -> NDArray[np.int64]:
        return np.array([len(i) for i in self.ids], dtype=np.int64)

    def batch(self, rows: Sequence[int], pad_id: int, /) -> Batch:
        return _batch([self.ids[r] for r in rows], None if self.types is None else [self.types[r] for r in rows],
                      pad_id)


def encode(tokenizer: Any, texts: Sequence[str], max_length: int, pairs: Sequence[str] | None = None,
           segments: bool = False) -> Encoded:
    """Every row tokenised now and held (see `tokenize`)."""
    ids, types, truncated, full = tokenize(tokenizer, texts, max_length, pairs, segments)
    return Encoded(tuple(tuple(x) for x in ids), truncated, None if types is None else tuple(tuple(x) for x in types),
                   full)


class Tokenized:
    """A pool's rows, tokenised once to count tokens and again batch by batch: only the counts,
    the flags and the texts (which the caller holds anyway) stay in memory."""

    def __init__(self, tokenizer: Any, texts: Sequence[str], max_length: int, pairs: Sequence[str] | None = None,
                 segments: bool = False, chunk: int = COUNT_CHUNK) -> None:
        self.tokenizer, self.texts, self.pairs = tokenizer, texts, pairs
        self.max_length, self.segments = max_length, segments
        lengths = np.zeros(len(texts), dtype=np.int64)
        truncated = np.zeros(len(texts), dtype=bool)
        full_lengths = np.zeros(len(texts), dtype=np.int64)
        for start in range(0, len(texts), chunk):
            stop = min(start + chunk, len(texts))
            ids, _, cut, full = tokenize(tokenizer, texts[start:stop], max_length,
                                         None if pairs is None else pairs[start:stop])
            lengths[start:stop] = [len(x) for x in ids]
            truncated[start:stop] = cut
            full_lengths[start:stop] = full
        self._lengths, self._truncated, self._full_lengths = lengths, truncated, full_lengths

    @property
    def lengths(self) -> NDArray[np.int64]:
        return self._lengths

    @property
    def truncated(self) -> NDArray[np.bool_]:
        return self._truncated

    @property
    def full_lengths(self) -> NDArray[np.int64]:
        return self._full_lengths

    def batch(self, rows: Sequence[int], pad_id: int, /) -> Batch:
        """The rows tokenised again; their counts must be the ones the batch plan was made from."""
        ids, types, _, _ = tokenize(self.tokenizer, [self.texts[r] for r in rows], self.max_length,
                                 None if self.pairs is None else [self.pairs[r] for r in rows], self.segments)
        if [len(x) for x in ids] != self._lengths[list(rows)].tolist():
            raise JobError("The tokenizer gave a row another token count on a second pass, so the batch plan "
                           "does not hold; use a tokenizer that is deterministic (no random sampling).")
        return _batch(ids, types, pad_id)


def _key_ranks(keys: Sequence[str]) -> NDArray[np.int64]:
    """Each key's place in ascending order (equal keys by position): Arrow's stable sort for a
    Strings column, which orders UTF-8 bytes as Python orders code points, without a str per row."""
    if isinstance(keys, Strings):
        order = arrow_arrays.to_numpy(pc.sort_indices(keys.arrow())).astype(np.int64)
    else:
        order = np.array(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)
    ranks = np.empty(len(keys), dtype=np.int64)
    ranks[order] = np.arange(len(keys), dtype=np.int64)
    return ranks


def batch_plan(lengths: NDArray[np.int64], keys: Sequence[str], batch_size: int) -> list[list[int]]:
    """Rows sorted by token count descending, ties by split key ascending, cut into batches."""
    order = np.lexsort((_key_ranks(keys), -np.asarray(lengths[: len(keys)], dtype=np.int64)))
    return [order[i : i + batch_size].tolist() for i in range(0, len(order), batch_size)]


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
