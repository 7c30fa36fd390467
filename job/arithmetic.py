"""Which arithmetic ran the model: CPU vendor and model, the vector instruction sets the CPU offers,
and the code paths the three kernel libraries under torch chose on it.

Float32 logits depend on the kernels' summation order, and each library picks its kernels at run
time from the CPU and the environment: ATen's own vectorised loops (`ATEN_CPU_CAPABILITY`), oneDNN
(`ONEDNN_MAX_CPU_ISA`) and MKL's GEMM (`MKL_ENABLE_INSTRUCTIONS`, and on non-Intel CPUs its generic
path). Only what a library reports itself is recorded: ATen through
`torch.backends.cpu.get_cpu_capability()`, oneDNN and MKL through the header lines their verbose
modes print (captured from file descriptor 1 while one small operation runs). A library that prints
nothing is recorded as null, never guessed."""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bundle.views.arithmetic import arithmetic_words
from job.environment import cpuinfo_fields

VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "amx_tile", "amx_bf16")
"""The /proc/cpuinfo flags that decide which float32 kernels a library may pick."""
ISA_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
           "MKL_CBWR")
"""Environment variables that limit or fix a library's code path."""

_ONEDNN_ISA = re.compile(r"onednn_verbose(?:,v\d+)?,info,cpu,isa:(.+)")
_MKL_HEADER = re.compile(r"MKL_VERBOSE (.+?) for Intel\(R\) 64 architecture (.+?)(?:, Lnx|, Win|$)")


def cpuinfo(path: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """{vendor, model, flags}: the first processor's vendor_id, model name and vector flags offered."""
    fields = cpuinfo_fields(path)
    offered = set(fields.get("flags", "").split())
    return {"vendor": fields.get("vendor_id") or platform.processor() or None, "model": fields.get("model name"),
            "flags": [f for f in VECTOR_FLAGS if f in offered]}


@contextlib.contextmanager
def _stdout_captured() -> Iterator[list[str]]:
    """What native code writes to file descriptor 1 inside the block (the verbose modes print there)."""
    out: list[str] = []
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield out
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            out.extend(sink.read().decode("utf-8", errors="replace").splitlines())


def _verbose_lines(run: Callable[[], None]) -> list[str]:
    try:
        with _stdout_captured() as lines:
            run()
    except (OSError, RuntimeError):
        return []
    return lines


@functools.lru_cache(maxsize=1)
def onednn_isa() -> str | None:
    """The ISA oneDNN dispatches to, as its verbose header names it; None when it prints none.

    Cached: oneDNN prints its header once per process and fixes its ISA when it starts, so the
    first answer holds for the whole process."""
    import torch  # deferred: torch loads only where a model runs

    def conv() -> None:
        with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON), torch.inference_mode():  # type: ignore[no-untyped-call]
            torch.nn.functional.conv2d(torch.ones(2, 32, 16, 16), torch.ones(32, 32, 3, 3))

    for line in _verbose_lines(conv):
        if found := _ONEDNN_ISA.search(line):
            return found.group(1).strip()
    return None


@functools.lru_cache(maxsize=1)
def mkl_code_path() -> dict[str, str] | None:
    """{version, path}: MKL's verbose header on an SGEMM, whose tail names the processors its kernels
    are built for (on CPUs it does not treat as Intel's: "Intel(R) Architecture processors")."""
    import torch  # deferred: torch loads only where a model runs

    if not torch.backends.mkl.is_available():  # type: ignore[no-untyped-call]
        return None

    def gemm() -> None:
        with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON), torch.inference_mode():  # type: ignore[no-untyped-call]
            torch.matmul(torch.ones(64, 64), torch.ones(64, 64))

    for line in _verbose_lines(gemm):
        if found := _MKL_HEADER.search(line):
            return {"version": found.group(1).strip(), "path": found.group(2).strip()}
    return None


def _mkl() -> dict[str, str] | None:
    cached = mkl_code_path()
    return None if cached is None else dict(cached)  # a copy: callers may put it in a record


def arithmetic_record() -> dict[str, Any]:
    """The arithmetic of this process, for data/environment.json and a reproduction attestation."""
    import torch  # deferred: torch loads only where a model runs

    cpu = cpuinfo()
    return {
        "cpu_vendor": cpu["vendor"],
        "cpu_model": cpu["model"],
        "cpu_flags": cpu["flags"],
        "aten_capability": str(torch.backends.cpu.get_cpu_capability()),
        "onednn_isa": onednn_isa(),
        "mkl": _mkl(),
        "env": {name: os.environ.get(name) for name in ISA_ENV},
    }


short = arithmetic_words
"""One phrase naming an arithmetic record (bundle.views.arithmetic)."""

COMPARED = ("cpu_vendor", "cpu_model", "aten_capability", "onednn_isa", "mkl")
"""What makes two runs' arithmetic the same kind: CPU and each library's code path."""


def same_arithmetic(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two arithmetic records name the same CPU and the same code path in every library."""
    return all(a.get(k) == b.get(k) for k in COMPARED)
