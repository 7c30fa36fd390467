"""Process-wide memory settings, applied once at process start, and the one way to hand freed memory back.

Why in one place and at the start: glibc's malloc parameters and Arrow's default memory pool belong
to the process, not to a stage or a model. Set midway, memory already taken would stay with the old
allocator (an Arrow table read before the switch lives in mimalloc until it is freed) and a record of
the run could not say which settings it ran under. So the entry points (job.cli.main, a shard
worker through job.runtime.configure_torch) call configure_process() before any table or tensor
exists; later calls return the first call's record. The driver of a sharded run, which runs no
model, maps large blocks on their own instead (configure_sharded_driver). The protocol's torch settings (threads,
seed, determinism) depend on the run and are applied by job.runtime.configure_torch.

None of this changes a byte the job computes or writes: only where buffers live and when freed
pages go back to the kernel."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
MMAP_THRESHOLD = 32 << 20  # the largest value glibc documents for 64-bit systems
TRIM_THRESHOLD = 256 << 20
ARENA_MAX = 1


@dataclass(frozen=True)
class ProcessSettings:
    """What configure_process applied: `malloc` as environment.json's torch.allocator records it
    (glibc thresholds and arena count, or why the allocator was left alone), and Arrow's memory
    pool backend."""

    malloc: tuple[tuple[str, Any], ...]
    arrow_memory_pool: str

    def allocator_record(self) -> dict[str, Any]:
        """environment.json's torch.allocator."""
        return {**dict(self.malloc), "arrow_memory_pool": self.arrow_memory_pool}


def _mallopt(param: int, value: int) -> bool | None:
    """glibc's mallopt(param, value): True where it took the value, False where it refused, None
    where the C library has no mallopt (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(param, value) == 1)


def _tune_malloc() -> dict[str, Any]:
    """Keep freed activation buffers in the heap instead of handing them back to the kernel, and
    make no new heap (arena) for a thread.

    With glibc's defaults every batch's multi-MB activations are unmapped or trimmed when freed
    and the next batch faults them in again, zero-filled (~10,000 page faults per forward pass
    of the full-size model, 3-4% of its time). Raising the mmap and trim thresholds makes the
    allocator reuse those pages; release_free_memory hands them back once a forward pass is done.

    glibc gives each thread that allocates an arena of its own, and under the raised trim threshold
    every arena keeps the peak of the forwards it ran: N forward workers (job.runtime.forward_pool)
    kept N arenas of 40-60 MB each on the full-size model. With M_ARENA_MAX 1 glibc makes no
    arena after this call: a thread started later shares those that exist (the main one, and one
    per thread that allocated before, such as the one pyarrow starts at import), so a buffer one
    worker freed can serve the next. The arenas' locks are then taken by several threads, about
    once per operator's output; the runs measured were no slower (docs/PERFORMANCE.md, "One heap
    for the forward workers"). An arena count the process's environment gives glibc
    (MALLOC_ARENA_MAX, or arena_max in GLIBC_TUNABLES) is left as it is: `arena_max` records 1,
    "environment", or "default" where glibc refused."""
    if (took := _mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) is None:  # not glibc: leave the allocator alone
        return {"malloc": "default (no glibc mallopt)"}
    if not (took and _mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return {"malloc": "default (mallopt refused)"}
    arenas: int | str = ARENA_MAX
    if "MALLOC_ARENA_MAX" in os.environ or "arena_max" in os.environ.get("GLIBC_TUNABLES", ""):
        arenas = "environment"  # glibc read it at start
    elif not _mallopt(_M_ARENA_MAX, ARENA_MAX):
        arenas = "default"
    return {"malloc": "glibc", "mmap_threshold": MMAP_THRESHOLD, "trim_threshold": TRIM_THRESHOLD,
            "arena_max": arenas}


def _use_system_arrow_pool() -> str:
    """Make pyarrow allocate with malloc instead of its bundled mimalloc; return the pool's name.

    mimalloc keeps the segments of freed tables resident (about 20 MB after reading a 50,000-row
    split), where memory from malloc goes back to the kernel with release_free_memory."""
    pa.set_memory_pool(pa.system_memory_pool())
    return str(pa.default_memory_pool().backend_name)


@functools.cache
def configure_process() -> ProcessSettings:
    """Apply the process's memory settings (glibc malloc thresholds and arenas, Arrow's system pool)
    once; every later call returns the first call's record without touching anything."""
    malloc = _tune_malloc()
    return ProcessSettings(tuple(malloc.items()), _use_system_arrow_pool())


DRIVER_MMAP_THRESHOLD = 128 << 10
"""A sharded run's driver maps every block of this size or more on its own: glibc's initial
threshold, fixed so that it is never raised as blocks are freed."""


def configure_sharded_driver() -> bool:
    """The one setting that differs for the driver of a sharded run (`job run --address`), applied
    by job.pipeline.execute before the split is read; True where glibc took it.

    The driver runs no model, so configure_process's reason to keep large blocks in the heap (a
    forward pass's activation buffers, reused batch after batch) does not hold there. What holds
    instead: a split's tables, JSON texts and result arrays grow with its rows, and from the heap
    the small blocks that outlive them keep their pages resident (about 10 MB more for 50,000 rows
    than for 872). Mapped on their own, they go back to the kernel when freed, so the driver's
    memory stays flat in the split's size. Only where memory comes from changes; no byte the run
    writes does."""
    return _mmap_threshold(DRIVER_MMAP_THRESHOLD)


def _mmap_threshold(size: int) -> bool:
    return bool(_mallopt(_M_MMAP_THRESHOLD, size))


@contextlib.contextmanager
def blocks_mapped_apart() -> Iterator[None]:
    """Within the block, glibc maps every block of DRIVER_MMAP_THRESHOLD (128 KiB) or more that the
    heap's free memory cannot serve on its own, so that it goes back to the kernel as soon as it is
    freed (so trim the heap first: release_free_memory); afterwards configure_process's threshold
    holds again (where configure_process set one: elsewhere nothing changes).

    For work that runs once, such as the forward check's four passes of different shapes: there
    reusing freed blocks from the heap saves nothing, and the heap's free chunks, which blocks of
    other sizes cannot reuse, add to the run's peak. Only where memory comes from changes; no value
    computed does."""
    tuned = dict(configure_process().malloc).get("malloc") == "glibc"
    if tuned:
        _mmap_threshold(DRIVER_MMAP_THRESHOLD)
    try:
        yield
    finally:
        if tuned:
            _mmap_threshold(MMAP_THRESHOLD)


def release_free_memory() -> None:
    """Hand freed memory back to the kernel: Arrow's pool releases what it holds unused, then glibc's
    malloc_trim returns the heap's free pages. The raised trim threshold keeps a forward pass's
    buffers for reuse across its batches; once the pass is done they are only memory that the next
    step's allocations would stack on top of. Called where a forward pass ends (a pool's batches,
    each forward of the per-run check) and after the split, whose tables are the other large
    transient."""
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
