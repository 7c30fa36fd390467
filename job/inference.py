"""Inference of one pool: every row through a given forward, in the protocol's batches."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, Protocol, cast

import numpy as np
from numpy.typing import NDArray
from tqdm import tqdm

from job.batching import Batch, Tokens, batch_plan
from job.predictions import PoolOutput
from job.process import release_free_memory
from job.runtime import Settings, forward_pool


class Forward(Protocol):
    """A classifier's forward on one right-padded batch: (input_ids, attention_mask) [B, longest]
    int64 arrays, and token_type_ids of the same shape for a model with segment embeddings (passed
    only when the token source gives them), -> float32 logits tensor [B, K]. `name` is what
    data/environment.json records."""

    name: str

    def __call__(self, ids: NDArray[np.int64], mask: NDArray[np.int64], /) -> Any: ...


class SegmentForward(Protocol):
    """A Forward that also takes token_type_ids [B, longest] (a model with segment embeddings)."""

    name: str

    def __call__(self, ids: NDArray[np.int64], mask: NDArray[np.int64],
                 types: NDArray[np.int64] | None = None, /) -> Any: ...


def run_pool(forward: Forward, pad_id: int, tokens: Tokens, keys: Sequence[str], s: Settings,
             progress: str | None = None) -> PoolOutput:
    """Logits for every row in pool order, computed on the protocol's batches.

    Each batch is right-padded to its longest row with an attention mask, as the protocol says;
    batches are assembled with array operations (no per-row tensors) and passed to `forward`, as
    many at once as the settings' thread layout runs (Settings.forward_workers)."""
    return pool_output(tokens, keys, s, lambda plan: run_batches(forward, pad_id, tokens, plan, progress,
                                                                  s.forward_workers))


def pool_output(tokens: Tokens, keys: Sequence[str], s: Settings,
                run: Callable[[list[list[int]]], NDArray[np.float32]]) -> PoolOutput:
    """The pool's output from `run`, which gives the logits of the protocol's batch plan (rows
    sorted by token count, then split key, cut into batches): wherever the batches run."""
    plan = batch_plan(tokens.lengths, keys, s.batch_size)
    logits = run(plan)
    batch_of = np.zeros(len(tokens.lengths), dtype=np.int64)
    for b, rows in enumerate(plan):
        batch_of[rows] = b
    return PoolOutput(logits=logits, token_count=tokens.lengths, truncated=tokens.truncated, batch=batch_of,
                      full_token_count=tokens.full_lengths)


def run_batches(forward: Forward, pad_id: int, tokens: Tokens, plan: Sequence[Sequence[int]],
                progress: str | None = None, workers: int = 1) -> NDArray[np.float32]:
    """Logits [rows of `tokens`, K] of the rows of `plan`, one forward per batch, rows in the order given.

    The one inference loop: a run uses it on its own batch plan, a reproduction on the plan the
    bundle records. Rows that are in no batch keep NaN logits. With `workers` > 1 that many batches
    run at once, each forward on one torch thread (job.runtime.forward_pool), the largest
    first; a batch's logits do not depend on which others run beside it or when, so they are those
    of one thread running the batches one by one. At most `workers` batches' token ids exist at a
    time when `tokens` tokenises per batch (job.batching.Tokenized), one when `workers` is 1."""
    import torch  # deferred: torch loads only where a model runs

    n = len(tokens.lengths)
    logits: NDArray[np.float32] | None = None
    bar = tqdm(total=sum(len(rows) for rows in plan), desc=progress, unit="row", disable=progress is None,
               leave=False)

    def store(rows: list[int], out: Any) -> None:
        nonlocal logits
        if logits is None:
            logits = np.full((n, out.shape[1]), np.nan, dtype=np.float32)
        logits[rows] = out.numpy()
        bar.update(len(rows))

    try:
        if workers > 1:  # even for one batch: its forward runs on one thread, as every other's
            _run_concurrently(forward, pad_id, tokens, plan, workers, store)
        else:
            with torch.inference_mode():
                for batch in plan:
                    rows = list(batch)
                    store(rows, _call(forward, tokens.batch(rows, pad_id)))
    finally:
        bar.close()
        release_free_memory()  # the pool's activation buffers, kept for reuse across its batches
    if logits is None:
        raise ValueError("run_batches needs at least one batch")
    return logits


def _call(forward: Forward, b: Batch) -> Any:
    """`forward` on one padded batch, with its type ids where the token source gives them."""
    # A token source gives type ids only for a model whose forward takes them (job.model.Model).
    return forward(b.ids, b.mask) if b.types is None else cast(SegmentForward, forward)(b.ids, b.mask, b.types)


def largest_first(tokens: Tokens, plan: Sequence[Sequence[int]]) -> list[int]:
    """The batches' indices by padded size (rows x longest row), largest first, ties in plan order:
    the order in which concurrent workers finish together soonest (the longest batch does not
    start last)."""
    size = [len(rows) * int(tokens.lengths[list(rows)].max(initial=0)) for rows in plan]
    return sorted(range(len(plan)), key=lambda b: (-size[b], b))


def _run_concurrently(forward: Forward, pad_id: int, tokens: Tokens, plan: Sequence[Sequence[int]], workers: int,
                      store: Callable[[list[int], Any], None]) -> None:
    """Every batch of `plan` through `forward` on `workers` threads, each forward on one torch
    thread; at most `workers` batches are in flight, built here while the others run. The first
    error a forward raises is raised here once the batches in flight have ended; none after it starts."""
    import torch  # deferred: torch loads only where a model runs

    def run(b: Batch) -> Any:
        with torch.inference_mode():  # thread-local in torch: each worker enters its own
            return _call(forward, b)

    order = iter(largest_first(tokens, plan))
    with forward_pool(workers) as pool:
        flying: dict[Future[Any], list[int]] = {}
        try:
            while True:
                for i in itertools.islice(order, workers - len(flying)):
                    rows = list(plan[i])
                    flying[pool.submit(run, tokens.batch(rows, pad_id))] = rows
                if not flying:
                    return
                done, _ = wait(flying, return_when=FIRST_COMPLETED)
                for future in done:
                    store(flying.pop(future), future.result())
        finally:
            for future in flying:
                future.cancel()
