"""Where a pool's recorded batches run: in this process (LocalEngine) or on a Ray cluster
(job.sharded.ShardedEngine). Both give the same logits for the same batch plan on the same CPU
kind; the rest of the run (split, fit, freeze, metrics, sealing) never knows which one ran."""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from job.batching import Tokens
from job.forward_check import check_packed_forward
from job.inference import run_batches
from job.model import load_model, model_directory
from job.process import release_free_memory
from job.resources import Resources
from job.runtime import Settings, configure_torch, one_thread_per_forward
from job.sharded import ShardOptions, sharded_engine

__all__ = ["Engine", "LocalEngine", "open_engine"]


class Engine(Protocol):
    """What a run infers with.

    tokenizer / pad_id / segments: how the driver turns rows into batches; torch_info: the torch
    settings environment.json records; forward_choice: which forward the model runs and why
    (job.model.ForwardChoice's record, environment.json's forward_choice); run: logits [rows of
    `tokens`, K] of the rows of `plan` (model output order, NaN for rows in no batch);
    `temperature_sha256` names the frozen temperature and must be given for the audit pool;
    forward_check: job.forward_check's record; cluster: the sharded record of environment.json
    (None in this process)."""

    tokenizer: Any
    pad_id: int
    segments: bool
    torch_info: dict[str, Any]
    forward_choice: dict[str, str]

    def run(self, pool: str, tokens: Tokens, plan: Sequence[Sequence[int]], progress: str | None = None,
            temperature_sha256: str | None = None) -> NDArray[np.float32]: ...

    def forward_check(self, texts: list[str], keys: list[str]) -> dict[str, Any] | None: ...

    def cluster(self) -> dict[str, Any] | None: ...


class LocalEngine:
    """The model loaded in this process; every batch runs here, as many at once as the settings'
    thread layout runs (job.runtime.Settings.forward_workers)."""

    def __init__(self, resources: Resources, s: Settings) -> None:
        self.resources, self.settings = resources, s
        self.torch_info = configure_torch(s)
        with model_directory(resources.model) as model_dir:
            self.model = load_model(model_dir, s)
        self.torch_info["forward"] = self.model.forward.name  # the packed re-implementation or transformers' own
        self.forward_choice = self.model.choice.record()
        self.model.choice.announce()
        self.tokenizer, self.pad_id, self.segments = self.model.tokenizer, self.model.pad_id, self.model.segments

    def run(self, pool: str, tokens: Tokens, plan: Sequence[Sequence[int]], progress: str | None = None,
            temperature_sha256: str | None = None) -> NDArray[np.float32]:
        return run_batches(self.model.forward, self.model.pad_id, tokens, plan, progress,
                           self.settings.forward_workers)

    def forward_check(self, texts: list[str], keys: list[str]) -> dict[str, Any] | None:
        """job.forward_check on the threads a pool's forward runs on: one under the BATCHES layout."""
        one = self.settings.forward_workers > 1
        with one_thread_per_forward() if one else contextlib.nullcontext():
            return check_packed_forward(self.model, self.resources.model, self.settings, texts, keys)

    def cluster(self) -> dict[str, Any] | None:
        return None

    def close(self) -> None:
        """Let go of the model once nothing more runs: its memory-mapped weights
        are unmapped when the last tensor goes, so the run's later stages (metrics, studies, figures,
        sealing) do not carry the weights' resident pages (about 170 MB for the full-size
        DistilBERT). The records stay: torch_info, forward_choice, tokenizer and pad_id.

        Dropping the last reference frees the model and its forward, which holds the weights, at once
        (measured for the packed DistilBERT and transformers' BERT and RoBERTa); a full garbage
        collection, which walks every object of the process (0.3 s in a run, more in a long-lived
        one), runs only if a reference cycle still holds either."""
        model = self.__dict__.pop("model", None)
        watched = [weakref.ref(part) for part in (model, getattr(model, "forward", None)) if part is not None]
        del model
        if any(ref() is not None for ref in watched):
            gc.collect()
        release_free_memory()


@contextlib.contextmanager
def open_engine(shard: ShardOptions | None, protocol_raw: bytes, recorded: dict[str, Any], resources: Resources,
                s: Settings) -> Iterator[Engine]:
    """The local engine when `shard` is None, else the sharded engine on its cluster for the
    duration of the block (its workers check their files against `recorded`, a resources record)."""
    if shard is None:
        local = LocalEngine(resources, s)
        try:
            yield local
        finally:
            local.close()
        return
    with sharded_engine(shard, protocol_raw, recorded, resources, s) as engine:
        yield engine
