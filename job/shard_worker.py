"""One worker of a sharded pool, where Ray places it: the worker side of `--address`.

A worker is a Ray actor. It resolves the run's resources from its own cache (or the lock the
driver ships, paths as seen on the worker), checks every file's sha256 against the files the
driver's run records, loads the model once, and then runs the batches it is fed: token ids in,
float32 logits out, one batch at a time. It never sees the split, the fit or any other pool's
rows, and it refuses an audit batch that does not name the frozen temperature's sha256: the driver
only has that hash once temperature.json is written, so a worker cannot run the audit before it.

The driver (job.sharded) makes the class an actor; Ray is imported here only to name the node."""

from __future__ import annotations

import json
import os
import platform
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from job.environment import cpuinfo_fields, git_commit, package_version
from job.errors import JobError
from job.forward_check import check_packed_forward
from job.hub import default_cache
from job.model import load_model, model_directory
from job.protocol import AUDIT, Protocol
from job.resources import Resources, check_resources, resolve_hub, resolve_local
from job.runtime import OPERATORS, Settings, configure_torch

WORKER_PACKAGES = ("torch", "transformers", "tokenizers", "numpy", "safetensors")


@dataclass(frozen=True)
class WorkerSetup:
    """What every worker is started with: small, and nothing that names the driver's files."""

    protocol: bytes  # the run's canonical protocol
    recorded: dict[str, Any]  # the driver's resources record (data/resources.json): the files to match
    lock: dict[str, Any] | None  # resource lock, local paths absolute as seen on the worker; None: hub cache
    cache: str | None  # hub cache directory on the worker; None: its default
    threads: int  # torch intra-op threads of this worker
    receipts: str | None = None  # a file the worker appends one line to per batch it receives


@dataclass(frozen=True)
class BatchJob:
    """One recorded batch: its pool, its index in the pool's batch plan, and its padded token ids."""

    pool: str
    batch: int
    ids: NDArray[np.int64]
    mask: NDArray[np.int64]
    types: NDArray[np.int64] | None
    temperature_sha256: str | None  # required for an audit batch: the frozen temperature.json


def worker_environment(threads: int) -> dict[str, Any]:
    """Where a worker runs: its machine, CPU vendor, model and the ISA torch dispatches to, its
    thread count, versions, image and commit. `cpu_kind` names the arithmetic: workers of one
    kind compute the same float32 logits for the same batch."""
    import torch  # deferred: a worker imports torch when Ray starts it, not when the driver imports this module

    cpu = cpuinfo_fields()
    vendor = cpu.get("vendor_id") or platform.processor() or "unknown"
    model = cpu.get("model name") or "unknown"
    isa = str(torch.backends.cpu.get_cpu_capability())
    return {
        "hostname": socket.gethostname(),
        "cpu": {"vendor": vendor, "model": model, "isa": isa},
        "cpu_kind": f"{vendor} | {model} | {isa}",
        "threads": threads,
        "logical_cores": os.cpu_count() or 0,
        "python": platform.python_version(),
        "packages": {name: package_version(name) for name in WORKER_PACKAGES},
        "image": os.environ.get("CALIBRATION_IMAGE"),
        "git_commit": git_commit(),
    }


def _resources(setup: WorkerSetup, protocol: Protocol) -> Resources:
    if setup.lock is None:
        return resolve_hub(protocol.resources, Path(setup.cache) if setup.cache else default_cache())
    with tempfile.TemporaryDirectory(prefix="calibration-shard-") as tmp:
        lock_path = Path(tmp) / "lock.json"
        lock_path.write_text(json.dumps(setup.lock))
        return resolve_local(lock_path, protocol.resources)


class ShardWorker:
    """The actor: the model loaded once from checked files, then batches on demand."""

    def __init__(self, setup: WorkerSetup) -> None:
        protocol = Protocol.from_bytes(setup.protocol, json.loads(setup.protocol))
        self.resources = _resources(setup, protocol)
        check_resources(setup.recorded, self.resources)  # every file, by sha256, before the model loads
        base = Settings.from_protocol(protocol.inference)
        self.settings = Settings(setup.threads, base.interop_threads, base.attn_implementation, base.batch_size,
                                 base.max_length, base.seed, base.deterministic,
                                 linear_kernels=base.linear_kernels, layout=OPERATORS)
        self.torch_info = configure_torch(self.settings)
        with model_directory(self.resources.model) as model_dir:
            self.model = load_model(model_dir, self.settings)
        self.torch_info["forward"] = self.model.forward.name
        self.forward_choice = self.model.choice.record()
        self.receipts = setup.receipts
        self.env = worker_environment(setup.threads)
        self.env["torch"] = self.torch_info
        self.env["forward_choice"] = self.forward_choice
        import ray  # deferred: Ray, an optional dependency, is imported only where a worker runs

        self.env["node_id"] = str(ray.get_runtime_context().get_node_id())
        self.env["pid"] = os.getpid()

    def environment(self) -> dict[str, Any]:
        return self.env

    def segments(self) -> bool:
        """Whether the model takes token type ids (the driver's batches then carry them)."""
        return bool(self.model.segments)

    def infer(self, job: BatchJob) -> tuple[NDArray[np.float32], float]:
        """The batch's float32 logits [B, K] in model output order, and the seconds the forward took."""
        import torch  # deferred: a worker imports torch when Ray starts it, not when the driver imports this module

        if job.pool == AUDIT and job.temperature_sha256 is None:
            raise JobError("An audit batch arrived without the frozen temperature's sha256; the driver "
                           "must not send the audit before temperature.json is written.")
        if self.receipts is not None:
            line = {"pool": job.pool, "batch": job.batch, "received_ns": time.time_ns(), "pid": os.getpid(),
                    "temperature_sha256": job.temperature_sha256}
            with open(self.receipts, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(line) + "\n")
        start = time.perf_counter()
        with torch.inference_mode():
            if job.types is None:
                out = self.model.forward(job.ids, job.mask)
            else:
                out = self.model.forward(job.ids, job.mask, job.types)  # type: ignore[call-arg]
        return np.ascontiguousarray(out.numpy(), dtype=np.float32), time.perf_counter() - start

    def forward_check(self, texts: list[str], keys: list[str]) -> dict[str, Any] | None:
        """job.forward_check on this worker's model and files (None for transformers' own forward)."""
        return check_packed_forward(self.model, self.resources.model, self.settings, texts, keys)
