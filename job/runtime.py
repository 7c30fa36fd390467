"""Runtime settings of inference: the protocol's torch configuration, determinism and allocator tuning."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import Any

from job.errors import JobError


@dataclass(frozen=True)
class Settings:
    """The protocol's inference section, as the run applies it."""

    threads: int
    interop_threads: int
    attn_implementation: str
    batch_size: int
    max_length: int
    seed: int
    deterministic: bool

    @classmethod
    def from_protocol(cls, inference: dict[str, Any]) -> Settings:
        if inference["device"] != "cpu" or inference["dtype"] != "float32":
            raise JobError("This job runs on CPU in float32 only; set device cpu and dtype float32 in the protocol.")
        return cls(
            threads=int(inference["torch_threads"]),
            interop_threads=int(inference.get("torch_interop_threads", 1)),
            attn_implementation=str(inference["attn_implementation"]),
            batch_size=int(inference["batch_size"]),
            max_length=int(inference["max_length"]),
            seed=int(inference["seed"]),
            deterministic=bool(inference["deterministic_algorithms"]),
        )


# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20  # the largest value glibc documents for 64-bit systems
TRIM_THRESHOLD = 256 << 20


def tune_allocator() -> dict[str, Any]:
    """Keep freed activation buffers in the heap instead of handing them back to the kernel.

    With glibc's defaults every batch's multi-MB activations are unmapped or trimmed when freed
    and the next batch faults them in again, zero-filled (~10,000 page faults per forward pass
    of the full-size model). Raising the mmap and trim thresholds makes the allocator reuse those
    pages. Only where memory comes from changes; no number the model computes does."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc: leave the allocator alone
        return {"malloc": "default (no glibc mallopt)"}
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not ok:
        return {"malloc": "default (mallopt refused)"}
    return {"malloc": "glibc", "mmap_threshold": MMAP_THRESHOLD, "trim_threshold": TRIM_THRESHOLD}


def use_system_arrow_pool() -> str:
    """Make pyarrow allocate with malloc instead of its bundled mimalloc; return the pool's name.

    mimalloc keeps the segments of freed tables resident (about 20 MB after reading a 50,000-row
    split), where memory from malloc goes back to the kernel with release_free_heap. Only where
    Arrow's buffers live changes; no byte it reads or writes does."""
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    return str(pa.default_memory_pool().backend_name)


def release_free_heap() -> None:
    """Hand the heap's free pages back to the kernel (glibc malloc_trim) once a pool is done, so
    that the next pool's activations do not stack on the previous pool's leftover free chunks."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


def set_deterministic(mode: bool) -> None:
    """torch.use_deterministic_algorithms(mode), minus its import of torch._inductor.

    The public call imports torch._inductor.config (and with it torch._dynamo, torch.distributed
    and sympy: ~80 MB of resident memory, a tenth of the job's peak) only to copy the flag into
    inductor's settings; this job never compiles. So ATen's flag, the one every eager operator
    consults, is set directly when torch has the setter and inductor is not loaded anyway."""
    import torch

    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None or "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(mode)
    else:
        setter(mode, warn_only=False)
    if torch.are_deterministic_algorithms_enabled() != mode:
        raise JobError("torch did not take the deterministic-algorithms setting; report this with "
                       "the torch version.")


def configure_torch(s: Settings) -> dict[str, Any]:
    """Apply threads, seed, determinism and allocator settings; return what torch reports back."""
    import torch

    allocator = tune_allocator()
    torch.set_num_threads(s.threads)
    with contextlib.suppress(RuntimeError):  # can only be set before the first parallel region
        torch.set_num_interop_threads(s.interop_threads)
    torch.manual_seed(s.seed)
    set_deterministic(s.deterministic)
    return {
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "seed": s.seed,
        "mkldnn_enabled": bool(torch.backends.mkldnn.enabled),
        "parallel_info": torch.__config__.parallel_info().strip().splitlines()[:6],
        "allocator": allocator,
    }


