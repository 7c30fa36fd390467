"""A pool's batches in the BATCHES thread layout (job.inference.run_batches with workers > 1): as many
at once as workers, each forward on one torch thread, largest first; the logits are one thread's
running them one by one; an error stops the pool; the process's thread count is restored."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from job.batching import batch_plan, encode
from job.errors import JobError
from job.inference import largest_first, run_batches, run_pool
from job.linear_kernels import LinearKernels
from job.model import load_model
from job.protocol import load_protocol
from job.runtime import BATCHES, OPERATORS, Settings, configure_torch
from tests.job.test_inference import tiny_texts


def settings(threads: int, layout: str) -> Settings:
    """The formal protocol's inference at `threads` of at most 4, in batches of 4 rows (12 of the tiny world's)."""
    inference = dataclasses.replace(load_protocol().inference, torch_threads=4, batch_size=4)
    return Settings.from_protocol(inference, threads, layout)


def tiny_pool(tiny_world: tuple[Path, Path]) -> tuple[Any, Any, list[str], list[list[int]]]:
    """The tiny model at one thread, its texts encoded, their keys and the protocol's batch plan."""
    model_dir, texts = tiny_texts(tiny_world)
    s = settings(1, OPERATORS)
    configure_torch(s)
    model = load_model(model_dir, s)
    enc = encode(model.tokenizer, texts, s.max_length)
    keys = [str(i) for i in range(len(texts))]
    return model, enc, keys, batch_plan(enc.lengths, keys, s.batch_size)


def test_concurrent_batches_give_the_logits_of_one_thread_running_them_one_by_one(tiny_world):
    model, enc, keys, plan = tiny_pool(tiny_world)
    assert len(plan) == 12  # more batches than workers: the workers take turns
    one = run_pool(model.forward, model.pad_id, enc, keys, settings(1, OPERATORS))
    for workers in (2, 3):
        s = settings(workers, BATCHES)
        assert s.forward_workers == workers
        together = run_pool(model.forward, model.pad_id, enc, keys, s)
        assert together.logits.tobytes() == one.logits.tobytes()
        assert np.array_equal(together.batch, one.batch)  # the protocol's batches, whatever order they ran in
    assert settings(3, OPERATORS).forward_workers == 1


def test_each_concurrent_forward_runs_on_one_thread_and_the_count_is_restored(tiny_world):
    import torch

    model, enc, _, plan = tiny_pool(tiny_world)
    seen: list[tuple[str, int, bool]] = []
    together = threading.Barrier(2, timeout=30)  # broken, and the test failed, unless two forwards overlap

    def spy(ids: Any, mask: Any) -> Any:
        seen.append((threading.current_thread().name, torch.get_num_threads(), torch.is_inference_mode_enabled()))
        if len(seen) <= 2:
            together.wait()
        return model.forward(ids, mask)

    torch.set_num_threads(3)
    try:
        run_batches(spy, model.pad_id, enc, plan, workers=2)
        assert torch.get_num_threads() == 3
        run_batches(spy, model.pad_id, enc, plan[:1], workers=2)  # one batch: on one thread too
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(1)
    assert len(seen) == len(plan) + 1
    assert {n for _, n, _ in seen} == {1}
    assert all(name.startswith("forward") and inference for name, _, inference in seen)


def test_an_error_in_one_forward_stops_the_pool_and_restores_the_thread_count(tiny_world):
    import torch

    model, enc, _, _ = tiny_pool(tiny_world)
    plan = [[i] for i in range(12)]  # one row a batch: many more batches than workers
    started: list[int] = []
    lock = threading.Lock()

    def failing(ids: Any, mask: Any) -> Any:
        with lock:
            started.append(len(started))
            if len(started) == 3:
                raise JobError("The third batch failed.")
        return model.forward(ids, mask)

    torch.set_num_threads(2)
    try:
        with pytest.raises(JobError, match="third batch"):
            run_batches(failing, model.pad_id, enc, plan, workers=2)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)
    assert 3 <= len(started) <= 3 + 2  # at most the batches in flight when it failed


def test_the_largest_batches_go_first_ties_in_plan_order() -> None:
    class Lengths:
        lengths = np.array([5, 9, 2, 9, 4, 1], dtype=np.int64)

    plan = [[0, 5], [1], [2, 4, 5], [3, 2], [4]]  # padded sizes 10, 9, 12, 18, 4
    assert largest_first(Lengths(), plan) == [3, 2, 0, 1, 4]
    assert largest_first(Lengths(), [[2], [2]]) == [0, 1]


def test_linear_kernels_stay_in_place_until_the_last_overlapping_block_ends() -> None:
    import torch.nn.functional as F

    own, kernels = F.linear, LinearKernels("onednn")
    entered, release = threading.Barrier(2), [threading.Event(), threading.Event()]
    seen: dict[int, Any] = {}

    def block(i: int) -> None:
        with kernels.active():
            entered.wait(timeout=30)
            release[i].wait(timeout=30)
            seen[i] = F.linear

    threads = [threading.Thread(target=block, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    release[0].set()
    threads[0].join(timeout=30)
    assert F.linear is not own  # the other block is still open
    release[1].set()
    threads[1].join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert seen[0] is seen[1] is not own
    assert F.linear is own
