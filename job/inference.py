"""Inference of one pool: every row through a given forward, batch by batch in the protocol's order."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from job.batching import Encoded, batch_plan, padded_batch
from job.predictions import PoolOutput
from job.runtime import Settings, release_free_heap


class Forward(Protocol):
    """A classifier's forward on one right-padded batch: (input_ids, attention_mask) [B, longest]
    int64 arrays -> float32 logits tensor [B, K]. `name` is what data/environment.json records."""

    name: str

    def __call__(self, ids: NDArray[np.int64], mask: NDArray[np.int64], /) -> Any: ...


def run_pool(forward: Forward, pad_id: int, enc: Encoded, keys: Sequence[str], s: Settings,
             progress: str | None = None) -> PoolOutput:
    """Logits for every row in pool order, computed batch by batch in the protocol's order.

    Each batch is right-padded to its longest row with an attention mask, as the protocol says;
    batches are assembled with array operations (no per-row tensors) and passed to `forward`."""
    import torch
    from tqdm import tqdm

    n = len(enc.ids)
    lengths = enc.lengths
    offsets = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    flat = np.fromiter(itertools.chain.from_iterable(enc.ids), dtype=np.int64, count=int(lengths.sum()))
    plan = batch_plan(lengths, keys, s.batch_size)
    logits: NDArray[np.float32] | None = None
    batch_of = np.zeros(n, dtype=np.int64)
    bar = tqdm(total=n, desc=progress, unit="row", disable=progress is None, leave=False)
    with torch.inference_mode():
        for b, rows in enumerate(plan):
            ids, mask = padded_batch(flat, offsets, lengths, rows, pad_id)
            out = forward(ids, mask)
            if logits is None:
                logits = np.zeros((n, out.shape[1]), dtype=np.float32)
            logits[rows] = out.numpy()
            batch_of[rows] = b
            bar.update(len(rows))
            del out
    bar.close()
    release_free_heap()
    assert logits is not None
    return PoolOutput(logits=logits, token_count=lengths, truncated=enc.truncated, batch=batch_of)
