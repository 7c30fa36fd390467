"""Runtime settings of inference: the protocol's torch configuration (threads, seed, determinism).

The process-wide memory settings are job.process's, applied once at process start."""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterable, Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from job.errors import JobError
from job.linear_kernels import DEFAULT as LINEAR_DEFAULT
from job.process import configure_process

if TYPE_CHECKING:
    from job.protocol import InferenceSpec

SYS_CPU = Path("/sys/devices/system/cpu")
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
GOMP_SPINCOUNT = "10000"
"""How long torch's OpenMP threads spin at a barrier before they sleep (see bounded_thread_waits)."""
PRIMITIVES_PER_WORKER = 16
"""oneDNN primitives kept per concurrent forward (see bounded_primitive_cache)."""
PRIMITIVE_CACHE_VARS = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY")
"""oneDNN's names for its primitive cache's capacity, the first winning where both are set."""


def usable_cpus() -> list[int]:
    """The logical CPUs this process may run on (its affinity mask; all of them where there is none)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def physical_cores(cpus: Iterable[int], sys_cpu: Path = SYS_CPU) -> int:
    """How many physical cores the logical CPUs `cpus` span: hyperthreads of one core share its
    `thread_siblings_list`. Where the kernel shows no topology, each logical CPU counts as a core."""
    cpus = list(cpus)
    try:
        cores = {(sys_cpu / f"cpu{c}" / "topology" / "thread_siblings_list").read_text().strip() for c in cpus}
    except OSError:
        return max(1, len(cpus))
    return max(1, len(cores))


def cpu_quota(cpu_max: Path = CGROUP_CPU_MAX) -> int | None:
    """The cgroup v2 CPU bandwidth limit in whole CPUs, rounded up (a container's --cpus); None when unlimited."""
    try:
        quota, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return max(1, math.ceil(int(quota) / int(period)))


BATCHES = "batches"
"""Thread layout: `used` batches run at once, each forward on one torch thread."""
OPERATORS = "operators"
"""Thread layout: one batch at a time, each operator on `used` torch threads (every run before the
layout was recorded)."""
LAYOUTS = (BATCHES, OPERATORS)


@dataclass(frozen=True)
class ThreadChoice:
    """How many torch threads a run uses, why, and how its forwards use them, as
    data/environment.json records it (threads).

    The protocol's torch_threads is an upper bound, not the count: more threads than cores only slow
    a run down (a formal run on 2 cores, every operator split across the threads, took 233-239 s at
    4 threads against 18-20 s at 2).

    layout: BATCHES, the default, runs `used` batches at once, each forward on one thread, so a
    batch's logits are those of one thread on any CPU and any count. OPERATORS runs one batch at a
    time with every operator on `used` threads: on AMD EPYC its logits are bit-identical at 1 to 4
    threads, on an Intel Xeon MKL rounds some products differently at 1 and 2 threads
    (docs/PERFORMANCE.md), so `job reproduce` re-runs a bundle at the count and layout it records.
    BATCHES took 0.84 of OPERATORS' time at 2 threads on an AMD EPYC (docs/PERFORMANCE.md, "Two
    batches at once"): a forward's short products, split between threads that meet after every
    operator, keep the cores busy less than whole batches side by side do."""

    used: int
    chosen_by: str  # "--threads" or "physical cores"
    protocol_bound: int
    physical_cores: int
    cpu_quota: int | None
    layout: str = BATCHES

    def record(self) -> dict[str, Any]:
        """environment.json's `threads`."""
        return asdict(self)

    @classmethod
    def choose(cls, bound: int, requested: int | None = None, *, cores: int | None = None,
               quota: int | None = None, layout: str = BATCHES) -> ThreadChoice:
        """requested (--threads) when given, which must lie in 1..bound; else the physical cores
        the process may run on, within its cgroup quota, at most `bound`. Without `cores`, the
        cores and quota are this machine's."""
        if layout not in LAYOUTS:
            raise ValueError(f"unknown thread layout {layout!r}; one of {', '.join(LAYOUTS)}")
        if cores is None:
            cores, quota = physical_cores(usable_cpus()), cpu_quota()
        if requested is not None:
            if not 1 <= requested <= bound:
                raise JobError(f"--threads {requested} is outside 1..{bound}: the protocol's torch_threads "
                               f"({bound}) is the most threads a run may use; pass a count in that range.")
            return cls(requested, "--threads", bound, cores, quota, layout)
        return cls(max(1, min(bound, cores, quota or cores)), "physical cores", bound, cores, quota, layout)


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
    thread_choice: ThreadChoice | None = None  # how `threads` was chosen (None: set directly)
    linear_kernels: str = LINEAR_DEFAULT  # job.linear_kernels: whose kernels run the linear layers
    layout: str = BATCHES  # how a pool's forwards use the threads (ThreadChoice.layout)

    @property
    def forward_workers(self) -> int:
        """How many of a pool's batches run at once (job.inference.run_batches): `threads` under
        the BATCHES layout, each forward on one thread; 1 under OPERATORS."""
        return self.threads if self.layout == BATCHES else 1

    @classmethod
    def from_protocol(cls, inference: InferenceSpec, threads: int | None = None,
                      layout: str = BATCHES) -> Settings:
        """The settings of a run; threads: the run's --threads (default: see ThreadChoice.choose);
        layout: how its forwards use them (a re-run takes the bundle's)."""
        if inference.device != "cpu" or inference.dtype != "float32":
            raise JobError("This job runs on CPU in float32 only; set device cpu and dtype float32 in the protocol.")
        choice = ThreadChoice.choose(inference.torch_threads, threads, layout=layout)
        return cls(
            threads=choice.used,
            thread_choice=choice,
            interop_threads=inference.torch_interop_threads,
            attn_implementation=inference.attn_implementation,
            batch_size=inference.batch_size,
            max_length=inference.max_length,
            seed=inference.seed,
            deterministic=inference.deterministic_algorithms,
            linear_kernels=inference.linear_kernels,
            layout=layout,
        )


@contextlib.contextmanager
def one_thread_per_forward() -> Iterator[None]:
    """For the length of the block the calling thread, and every thread that starts inside it, runs
    its torch operators on itself alone; afterwards the calling thread's count, and the count new
    threads start from, are what they were.

    torch.set_num_threads(n) sets the calling thread's OpenMP and MKL counts (both per thread) and a
    process-wide count that a thread started later takes at its first parallel operator; a thread
    whose first operator is a matrix product takes nothing, so a pool's threads set theirs when they
    start (forward_pool)."""
    import torch  # deferred: torch loads only where a model runs

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def forward_pool(workers: int) -> Iterator[ThreadPoolExecutor]:
    """`workers` threads, each running its torch operators on itself alone, for the length of the
    block (one_thread_per_forward); the block ends when every task given to them has."""
    import torch  # deferred: torch loads only where a model runs

    with one_thread_per_forward(), ThreadPoolExecutor(workers, thread_name_prefix="forward",
                                                      initializer=torch.set_num_threads, initargs=(1,)) as pool:
        yield pool


def _set_unless_decided(environ: MutableMapping[str, str], name: str, value: str, deciders: Iterable[str]) -> bool:
    """Put `name`=`value` into `environ` unless torch is imported already (its libraries read such a
    variable once, at load or at their first use) or `environ` sets any of `deciders`; True where set."""
    if "torch" in sys.modules or any(k in environ for k in deciders):
        return False
    environ[name] = value
    return True


def bounded_thread_waits(environ: MutableMapping[str, str] = os.environ) -> dict[str, Any]:
    """Let torch's OpenMP threads spin only briefly at a barrier before they sleep: GOMP_SPINCOUNT
    (libgomp, the OpenMP runtime of torch's Linux wheels) in this process's environment, unless the
    environment already sets OMP_WAIT_POLICY or GOMP_SPINCOUNT. The record says what torch's threads
    follow: what was set, or the environment's, or None for the runtime's default where torch was
    imported before this ran (libgomp reads both variables once, when torch loads it).

    libgomp's default spins up to 300,000 times before a thread sleeps; a forward ends every operator
    at a barrier. Measured on 2 cores (docs/PERFORMANCE.md, "The threads' wait at a barrier"):
    - on a quiet Intel Xeon (KVM), sleeping at once (OMP_WAIT_POLICY=PASSIVE) made 2 threads slower
      than 1, as each wake of a sleeping virtual CPU costs more than the operator between two
      barriers; 10,000 spins were as fast as the default's 300,000;
    - on cores shared with other processes the default's long spin burns the time slices its
      partner thread needs (2 threads slower than 1), where 10,000 spins were as fast as PASSIVE
      with two other busy processes and still faster than 1 thread with four.
    Waiting is not arithmetic: the logits are bit-identical under every policy."""
    policy, spins = environ.get("OMP_WAIT_POLICY"), environ.get("GOMP_SPINCOUNT")
    if _set_unless_decided(environ, "GOMP_SPINCOUNT", GOMP_SPINCOUNT, ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")):
        return {"omp_wait_policy": None, "gomp_spincount": GOMP_SPINCOUNT, "set_by_job": True}
    return {"omp_wait_policy": policy, "gomp_spincount": spins, "set_by_job": False}


def bounded_primitive_cache(workers: int, environ: MutableMapping[str, str] = os.environ) -> dict[str, Any]:
    """Keep PRIMITIVES_PER_WORKER oneDNN primitives per concurrent forward (`workers`: a run's
    Settings.forward_workers; the cache is the process's, shared by all threads) instead of oneDNN's
    default 1024: ONEDNN_PRIMITIVE_CACHE_CAPACITY in this process's environment, unless the
    environment sets it or its older name DNNL_PRIMITIVE_CACHE_CAPACITY. oneDNN reads it at its
    first primitive, which needs torch, so it is set only before torch is imported. The record says
    what holds: the value set, or the environment's as given, or None where oneDNN's default does.

    Every batch has its own token count, and oneDNN builds a primitive, with its own JIT code, per
    shape. Under `linear_kernels: onednn` each batch makes seven new ones (three inner products,
    the matmul nested in each, GELU's eltwise), used only within that batch; the head's, shaped by
    the batch's row count, recur. At the default the cache kept them all, and a formal run under that
    protocol peaked at 715-725 MB at 2 threads; bounded, at 663-666 MB, in the same time
    (docs/PERFORMANCE.md, "oneDNN's primitive cache"). A primitive made again is the same kernel: the
    logits are bit-identical at any capacity."""
    capacity = str(PRIMITIVES_PER_WORKER * max(1, workers))
    set_by_job = _set_unless_decided(environ, PRIMITIVE_CACHE_VARS[0], capacity, PRIMITIVE_CACHE_VARS)
    held = next((environ[k] for k in PRIMITIVE_CACHE_VARS if k in environ), None)
    return {"onednn_primitive_cache_capacity": held, "set_by_job": set_by_job}


def set_deterministic(mode: bool) -> None:
    """torch.use_deterministic_algorithms(mode), minus its import of torch._inductor and its fill
    of new tensors with NaN (below).

    The public call imports torch._inductor.config (and with it torch._dynamo, torch.distributed
    and sympy: ~80 MB of resident memory, a tenth of the job's peak) only to copy the flag into
    inductor's settings; this job never compiles. So ATen's flag, the one every eager operator
    consults, is set directly when torch has the setter and inductor is not loaded anyway."""
    import torch  # deferred: torch loads only where a model runs

    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None or "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(mode)
    else:
        setter(mode, warn_only=False)
    if torch.are_deterministic_algorithms_enabled() != mode:
        raise JobError("torch did not take the deterministic-algorithms setting; report this with "
                       "the torch version.")
    # Deterministic mode also fills every tensor torch.empty makes with NaN, a guard against kernels
    # that read memory they never wrote; no operator of the forward does (its logits are bit-identical
    # either way: tests/job/test_inference.py), and the fill is an extra write over every activation
    # (about 3% of a 1-thread forward, docs/PERFORMANCE.md). Off: the algorithms stay deterministic.
    from torch.utils import deterministic  # deferred: torch loads only where a model runs

    deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]


def configure_torch(s: Settings) -> dict[str, Any]:
    """Apply the protocol's threads, seed and determinism; return what torch reports back, with the
    process's memory settings (job.process.configure_process: applied here too when the process
    started elsewhere than job.cli, e.g. in a test or a benchmark), the threads' wait policy and
    oneDNN's cache bound (bounded_thread_waits, bounded_primitive_cache: in effect when this is the
    process's first import of torch)."""
    waits, primitives = bounded_thread_waits(), bounded_primitive_cache(s.forward_workers)
    import torch  # deferred: torch loads only where a model runs

    allocator = configure_process().allocator_record()
    torch.set_num_threads(s.threads)
    with contextlib.suppress(RuntimeError):  # can only be set before the first parallel region
        torch.set_num_interop_threads(s.interop_threads)
    torch.manual_seed(s.seed)
    set_deterministic(s.deterministic)
    return {
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "fill_uninitialized_memory": bool(torch._C._get_deterministic_fill_uninitialized_memory()),
        "seed": s.seed,
        "mkldnn_enabled": bool(torch.backends.mkldnn.enabled),
        "parallel_info": torch.__config__.parallel_info().strip().splitlines()[:6],
        "allocator": allocator,
        "thread_waits": waits,
        "primitive_cache": primitives,
    }


