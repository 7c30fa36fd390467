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
    plan = batch_plan(enc.lengths, keys, s.batch_size)
    logits = run_batches(forward, pad_id, enc, plan, progress)
    batch_of = np.zeros(len(enc.ids), dtype=np.int64)
    for b, rows in enumerate(plan):
        batch_of[rows] = b
    return PoolOutput(logits=logits, token_count=enc.lengths, truncated=enc.truncated, batch=batch_of)


def run_batches(forward: Forward, pad_id: int, enc: Encoded, plan: Sequence[Sequence[int]],
                progress: str | None = None) -> NDArray[np.float32]:
    """Logits [len(enc.ids), K] of the rows of `plan`, one forward per batch, rows in the order given.

    The one inference loop: a run uses it on its own batch plan, a reproduction on the plan the
    bundle records. Rows that are in no batch keep NaN logits."""
    import torch
    from tqdm import tqdm

    n = len(enc.ids)
    lengths = enc.lengths
    offsets = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    flat = np.fromiter(itertools.chain.from_iterable(enc.ids), dtype=np.int64, count=int(lengths.sum()))
    logits: NDArray[np.float32] | None = None
    bar = tqdm(total=sum(len(rows) for rows in plan), desc=progress, unit="row", disable=progress is None,
               leave=False)
    with torch.inference_mode():
        for batch in plan:
            rows = list(batch)
            ids, mask = padded_batch(flat, offsets, lengths, rows, pad_id)
            out = forward(ids, mask)
            if logits is None:
                logits = np.full((n, out.shape[1]), np.nan, dtype=np.float32)
            logits[rows] = out.numpy()
            bar.update(len(rows))
            del out
    bar.close()
    release_free_heap()
    if logits is None:
        raise ValueError("run_batches needs at least one batch")
    return logits
