"""The environment record: machine, versions, threads, timings, peak RSS."""

from __future__ import annotations

import functools
import os
import platform
import resource
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Self

import psutil

from bundle.views import RENDERER_PACKAGE, RENDERER_VERSION

PACKAGES = ("torch", "transformers", "tokenizers", "huggingface_hub", "safetensors", "numpy",
            "pyarrow", "jsonschema", "cryptography", "psutil", "tqdm", "matplotlib")
ENV_VARS = ("PYTHONHASHSEED", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "HF_HUB_OFFLINE",
            "TRANSFORMERS_OFFLINE", "SOURCE_DATE_EPOCH", "CALIBRATION_IMAGE")
REPO = Path(__file__).resolve().parent.parent


@functools.cache
def package_version(name: str) -> str | None:
    """The installed version of the distribution `name`, or None when it is not installed; looked
    up once per process (each lookup scans every folder of sys.path, about 10 ms)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def cpuinfo_fields(path: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """Each field of /proc/cpuinfo as the first processor states it ("vendor_id", "model name",
    "flags", ...); empty where the file cannot be read (not Linux)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_model() -> str:
    return cpuinfo_fields().get("model name") or platform.processor() or "unknown"


def git_commit() -> str | None:
    """The project's commit: CALIBRATION_GIT_COMMIT (set in images) or `git rev-parse HEAD`."""
    if env := os.environ.get("CALIBRATION_GIT_COMMIT"):
        return env
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=True)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


class PeakRss:
    """Peak resident set size: psutil samples in a thread, and the kernel's high-water mark."""

    def __init__(self, interval: float = 0.02) -> None:
        self._peak = 0
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        proc = psutil.Process()
        while not self._stop.is_set():
            self._peak = max(self._peak, proc.memory_info().rss)
            self._stop.wait(self._interval)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mb(self) -> float:
        kernel: int = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
        current = int(psutil.Process().memory_info().rss)
        return round(max(self._peak, kernel, current) / 2**20, 1)


class StageClock:
    """Wall time and UTC start/end of each named stage."""

    def __init__(self) -> None:
        self.records: list[dict[str, str]] = []
        self.seconds: dict[str, float] = {}

    def stage(self, name: str) -> _Timed:
        return _Timed(self, name)


class _Timed:
    def __init__(self, clock: StageClock, name: str) -> None:
        self.clock, self.name = clock, name

    def __enter__(self) -> None:
        self.start = datetime.now(UTC)
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.clock.seconds[self.name] = round(time.perf_counter() - self.t0, 4)
        self.clock.records.append({"stage": self.name, "start": self.start.isoformat(),
                                   "end": datetime.now(UTC).isoformat()})


def environment_record(torch_info: dict[str, Any], clock: StageClock, peak_rss_mb: float,
                       forward_check: dict[str, Any] | None = None,
                       threads: dict[str, Any] | None = None,
                       arithmetic: dict[str, Any] | None = None,
                       forward_choice: dict[str, str] | None = None) -> dict[str, Any]:
    """Everything about where and how the run happened; varies between machines and runs.

    arithmetic: job.arithmetic.arithmetic_record() of the process that ran the model (CPU and the
    kernel libraries' code paths), which a reproduction on another machine is compared against.

    forward_check: job.forward_check's record when the packed forward ran (omitted otherwise): the
    bit-equal batch without padding and the differences on the first padded batch.
    forward_choice: job.model.ForwardChoice's record, which forward ran and why (a fallback to
    transformers' forward says so).
    `packages` also names the renderer of the views (bundle.views), so that a verifier knows
    whether it draws them the same way."""
    record = {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count() or 0,
        "packages": {**{name: package_version(name) for name in PACKAGES}, RENDERER_PACKAGE: RENDERER_VERSION},
        "torch": torch_info,
        "env": {name: os.environ.get(name) for name in ENV_VARS},
        "image": os.environ.get("CALIBRATION_IMAGE"),
        "git_commit": git_commit(),
        "timings_s": dict(clock.seconds),
        "stage_times": list(clock.records),
        "peak_rss_mb": peak_rss_mb,
    }
    if forward_check is not None:
        record["forward_check"] = forward_check
    if threads is not None:  # job.runtime.ThreadChoice: the count torch ran with, and why
        record["threads"] = threads
    if arithmetic is not None:
        record["arithmetic"] = arithmetic
    if forward_choice is not None:
        record["forward_choice"] = forward_choice
    return record
