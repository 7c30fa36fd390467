"""A pool's recorded batches run on a Ray cluster: the driver side of `--address`.

The driver keeps the split, the batch plan, the fit, the freeze and the sealing; workers
(job.shard_worker.ShardWorker, one Ray actor per `worker_cpus` CPUs of the cluster, spread over
the nodes) only turn a batch's token ids into logits. The driver tokenises a batch just before it
sends it and keeps at most `depth` batches in flight per worker, so its memory holds one window of
token ids and the pool's logits, whatever the split's size.

Faults: a worker whose process or node dies has its unfinished batches put back at the head of the
queue and run by the workers left; a batch's logits are stored once, when its result arrives, and a
second result for a stored batch stops the run. With no worker left the run stops with one sentence
(no bundle is published: the caller's staging directory is discarded).

Each worker's environment and the batches it ran are recorded (`cluster()`, environment.json
`cluster`); the verifier checks that every batch of the predictions has exactly one worker."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tqdm import tqdm

from job.batching import Tokens
from job.errors import JobError
from job.model import ForwardChoice, load_tokenizer, model_directory
from job.protocol import AUDIT
from job.ray_engine import WAIT_S, cluster_cpus, ray_session
from job.resources import Resources
from job.runtime import Settings
from job.shard_worker import BatchJob, ShardWorker, WorkerSetup

RECEIPTS_ENV = "CALIBRATION_SHARD_RECEIPTS"
"""A file every worker appends a line to for each batch it receives (pool, batch, arrival time,
the temperature hash it carried): evidence, from the workers' side, of when the audit started."""
DEPTH = 2
"""Batches in flight per worker: one running and one waiting, so a worker never idles between batches."""
START_S = 600.0
"""How long the workers may take to start (resolve and check the files, load the model)."""


@dataclass(frozen=True)
class ShardOptions:
    """How a run shards its pools: the cluster (None: RAY_ADDRESS, else a local Ray on 127.0.0.1),
    CPUs per worker (also its torch threads; None: the protocol's torch_threads), the resource lock
    (local paths absolute, as each worker sees them) or the hub cache each worker resolves from."""

    address: str | None
    worker_cpus: int | None = None
    lock: dict[str, Any] | None = None
    cache: str | None = None
    depth: int = DEPTH
    local_cpus: int | None = None  # CPUs of the embedded local Ray (None: all of this machine's)

    def __post_init__(self) -> None:
        if self.worker_cpus is not None and self.worker_cpus < 1:
            raise JobError("--worker-cpus must be at least 1; give the CPUs (and threads) of one worker.")


@dataclass
class _Worker:
    actor: Any
    env: dict[str, Any]
    alive: bool = True
    in_flight: int = 0


def _dead(exc: BaseException) -> bool:
    """Whether a Ray error means the worker (its process or node) is gone, not that the batch failed."""
    import ray.exceptions as rex  # deferred: Ray, optional, loads only for a run on a cluster

    return isinstance(exc, (rex.RayActorError, rex.WorkerCrashedError, rex.NodeDiedError, rex.ObjectLostError))


def _cause(exc: BaseException) -> str:
    import ray.exceptions as rex  # deferred: Ray, optional, loads only for a run on a cluster

    cause = exc.cause if isinstance(exc, rex.RayTaskError) and exc.cause is not None else exc
    if isinstance(cause, JobError):
        return str(cause)
    # A worker whose start failed on its input (files that do not match) dies with the JobError's
    # text inside Ray's message: that one sentence is what the user needs.
    marker = re.compile(rf"{re.escape(JobError.__module__)}\.\w+: ")  # JobError or a subclass of it
    for line in str(exc).splitlines():
        found = marker.search(line)
        if found:
            return f"A worker could not start: {line[found.end():].strip()}"
    last = (str(cause).strip().splitlines() or [type(cause).__name__])[-1]
    return f"A worker raised {type(cause).__name__} ({last}); this is a fault in the job, not in its input."


class ShardedEngine:
    """Workers on a Ray cluster; see the module's docstring."""

    def __init__(self, workers: list[_Worker], tokenizer: Any, segments: bool, depth: int) -> None:
        self.workers, self.tokenizer, self.segments, self.depth = workers, tokenizer, segments, depth
        self.pad_id = int(tokenizer.pad_token_id or 0)
        self.torch_info = dict(workers[0].env["torch"])
        self.torch_info["engine"] = "ray"
        self.forward_choice: dict[str, str] = dict(workers[0].env["forward_choice"])
        ForwardChoice(**self.forward_choice).announce()
        self.ran: dict[int, dict[str, list[int]]] = {i: {} for i in range(len(workers))}
        self.audit_temperature: str | None = None
        self.dispatch_s = 0.0  # driver time spent tokenising, sending and storing, all batches
        self.forward_s = 0.0  # the workers' time in the forward, all batches
        self.wall_s = 0.0  # wall time of run(), all pools
        self.batches = 0

    def run(self, pool: str, tokens: Tokens, plan: Sequence[Sequence[int]], progress: str | None = None,
            temperature_sha256: str | None = None) -> NDArray[np.float32]:
        import ray  # deferred: Ray, optional, loads only for a run on a cluster

        n = len(tokens.lengths)
        logits: NDArray[np.float32] | None = None
        bar = tqdm(total=sum(len(rows) for rows in plan), desc=progress, unit="row", disable=progress is None,
                   leave=False)
        queue: deque[int] = deque(range(len(plan)))
        pending: dict[Any, tuple[int, int]] = {}  # object ref -> (worker, batch)
        stored: set[int] = set()
        if pool == AUDIT:
            self.audit_temperature = temperature_sha256
        began = time.perf_counter()
        while queue or pending:
            t0 = time.perf_counter()
            # One batch per worker per round, so that every worker gets work before any gets a second.
            while queue and (free := [(i, w) for i, w in self._ready_workers() if w.in_flight < self.depth]):
                for i, w in free[:len(queue)]:
                    b = queue.popleft()
                    batch = tokens.batch(list(plan[b]), self.pad_id)
                    job = BatchJob(pool, b, batch.ids, batch.mask, batch.types, temperature_sha256)
                    pending[w.actor.infer.remote(job)] = (i, b)
                    w.in_flight += 1
            self.dispatch_s += time.perf_counter() - t0
            if not pending:
                raise JobError(f"Every worker of the cluster died with {len(queue)} {pool} batches left; the "
                               "run stopped and wrote no bundle, so bring nodes back and run it again.")
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_S)
            if not ready:
                if cluster_cpus() == 0:  # every node is gone; Ray may not have failed the tasks yet
                    raise JobError(f"The cluster has no node left, with {len(queue) + len(pending)} {pool} "
                                   "batches unfinished; the run stopped and wrote no bundle, so bring nodes "
                                   "back and run it again.")
                continue
            t0 = time.perf_counter()
            wi, b = pending.pop(ready[0])
            worker = self.workers[wi]
            worker.in_flight -= 1
            try:
                out, forward_s = ray.get(ready[0])
            except ray.exceptions.RayError as exc:
                if not _dead(exc):
                    raise JobError(_cause(exc)) from exc
                worker.alive = False
                queue.appendleft(b)  # run again by a worker that is left, before any new batch
                continue
            if b in stored:
                raise JobError(f"{pool} batch {b} came back twice; the run stopped so that no batch counts twice.")
            if logits is None:
                logits = np.full((n, out.shape[1]), np.nan, dtype=np.float32)
            logits[list(plan[b])] = out
            stored.add(b)
            self.ran[wi].setdefault(pool, []).append(b)
            bar.update(len(plan[b]))
            self.batches += 1
            self.forward_s += forward_s
            self.dispatch_s += time.perf_counter() - t0
        self.wall_s += time.perf_counter() - began
        bar.close()
        if logits is None:
            raise ValueError("ShardedEngine.run needs at least one batch")
        return logits

    def _ready_workers(self) -> list[tuple[int, _Worker]]:
        return [(i, w) for i, w in enumerate(self.workers) if w.alive]

    def forward_check(self, texts: list[str], keys: list[str]) -> dict[str, Any] | None:
        """The forward check on a live worker (its model and files); another one if that one dies."""
        import ray  # deferred: Ray, optional, loads only for a run on a cluster

        for _, worker in self._ready_workers():
            try:
                result: dict[str, Any] | None = ray.get(worker.actor.forward_check.remote(texts, keys))
                return result
            except ray.exceptions.RayError as exc:
                if not _dead(exc):
                    raise JobError(_cause(exc)) from exc
                worker.alive = False
        raise JobError("Every worker of the cluster died before the forward check; the run stopped and wrote "
                       "no bundle, so bring nodes back and run it again.")

    def cluster(self) -> dict[str, Any]:
        """environment.json `cluster`: each worker's environment and the batches it ran, sorted."""
        workers = []
        for i, w in enumerate(self.workers):
            env = {k: v for k, v in w.env.items() if k not in {"torch", "pid", "forward_choice"}}
            workers.append({"id": f"worker-{i}", **env, "died": not w.alive,
                            "batches": {pool: sorted(bs) for pool, bs in sorted(self.ran[i].items())}})
        return {"engine": "ray", "workers": workers, "audit_temperature_sha256": self.audit_temperature,
                "dispatch": {"batches": self.batches, "driver_s": round(self.dispatch_s, 4),
                             "forward_s": round(self.forward_s, 4), "wall_s": round(self.wall_s, 4)}}


def _tokenizer(resources: Resources) -> Any:
    with model_directory(resources.model) as model_dir:
        return load_tokenizer(model_dir)


def _started(actors: list[Any]) -> list[dict[str, Any]]:
    """Each actor's environment once it has loaded its model, waiting at most START_S."""
    import ray  # deferred: Ray, optional, loads only for a run on a cluster

    refs = [a.environment.remote() for a in actors]
    deadline = time.monotonic() + START_S
    while True:
        _, waiting = ray.wait(refs, num_returns=len(refs), timeout=WAIT_S)
        if not waiting:
            break
        if time.monotonic() > deadline:
            raise JobError(f"{len(waiting)} of {len(refs)} workers did not start within {START_S:.0f} s; "
                           "check the cluster's nodes and their resource caches, then run again.")
    try:
        envs: list[dict[str, Any]] = ray.get(refs)
    except ray.exceptions.RayError as exc:
        raise JobError(_cause(exc)) from exc
    return envs


@contextlib.contextmanager
def sharded_engine(options: ShardOptions, protocol_raw: bytes, recorded: dict[str, Any], resources: Resources,
                   s: Settings) -> Iterator[ShardedEngine]:
    """Join the cluster, start one worker per `worker_cpus` of its CPUs, and yield the engine;
    the workers and the Ray connection end with the block, on success or failure."""
    import ray  # deferred: Ray, optional, loads only for a run on a cluster

    cpus = options.worker_cpus or s.threads
    setup = WorkerSetup(protocol_raw, recorded, options.lock, options.cache, cpus, os.environ.get(RECEIPTS_ENV))
    with ray_session(options.address, options.local_cpus):
        count = cluster_cpus() // cpus
        if count < 1:
            raise JobError(f"The cluster has {cluster_cpus()} CPUs, fewer than the {cpus} of one worker; "
                           "pass a smaller --worker-cpus or add nodes.")
        actor = ray.remote(ShardWorker).options(num_cpus=cpus, max_restarts=0, max_task_retries=0,
                                                scheduling_strategy="SPREAD")
        actors = [actor.remote(setup) for _ in range(count)]
        envs = _started(actors)
        segments = bool(ray.get(actors[0].segments.remote()))  # type: ignore[attr-defined]
        workers = [_Worker(a, e) for a, e in zip(actors, envs, strict=True)]
        yield ShardedEngine(workers, _tokenizer(resources), segments, options.depth)

