"""The one way the job uses Ray: join a cluster or start the embedded local one, describe a task's
resources and retries, and always shut down.

- `--address ADDRESS` (or RAY_ADDRESS) joins an existing cluster. A loopback address
  (127.0.0.1, localhost, ::1) makes the driver announce 127.0.0.1 too, so a cluster on one
  machine stays on loopback.
- With neither, the embedded default starts a local Ray instance bound to 127.0.0.1 only: every
  Ray process listens on loopback, with no dashboard, so nothing is reachable from the network.
- Tasks: `num_cpus` is what the scheduler reserves; `max_retries` re-runs a task whose worker
  process or node died; `retry_exceptions=False` never re-runs a task that raised, because an
  error on a task's own input fails the same way every time.

Ray is imported inside the functions: the rest of the job (and the verifier, which never
imports this) runs without starting or even loading it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from job.errors import JobError

LOOPBACK = "127.0.0.1"
ADDRESS_ENV = "RAY_ADDRESS"
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


@dataclass(frozen=True)
class TaskOptions:
    """What one Ray task asks of the cluster."""

    num_cpus: int
    max_retries: int

    def ray_options(self) -> dict[str, Any]:
        return {"num_cpus": self.num_cpus, "max_retries": self.max_retries, "retry_exceptions": False}


def cluster_address(address: str | None) -> str | None:
    """The cluster to join: `address`, else RAY_ADDRESS, else None (start the embedded default)."""
    chosen = address if address is not None else os.environ.get(ADDRESS_ENV, "")
    return chosen.strip() or None


def _is_loopback(address: str) -> bool:
    host = address.removeprefix("ray://").rsplit(":", 1)[0] if ":" in address else address
    return host in _LOOPBACK_HOSTS


def init_arguments(address: str | None, num_cpus: int | None = None) -> dict[str, Any]:
    """The keyword arguments of ray.init for `address` (None: the embedded loopback default)."""
    common: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if address is None:
        return {**common, "num_cpus": num_cpus, "include_dashboard": False, "_node_ip_address": LOOPBACK}
    if _is_loopback(address):
        return {**common, "address": address, "_node_ip_address": LOOPBACK}
    return {**common, "address": address}


@contextlib.contextmanager
def ray_session(address: str | None, num_cpus: int | None = None) -> Iterator[str]:
    """Connect to the cluster at `address` (None: RAY_ADDRESS, else the embedded loopback default
    with `num_cpus` CPUs, default all of this machine's) for the duration of the block; yield
    what was joined, in words. Ray is shut down on the way out, on success or failure alike."""
    import ray

    chosen = cluster_address(address)
    if ray.is_initialized():
        raise JobError("Ray is already initialised in this process; run the command in a fresh process.")
    try:
        ray.init(**init_arguments(chosen, num_cpus))
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"the Ray cluster at {chosen}" if chosen else "a local Ray instance"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise JobError(f"Cannot start or join {where} ({first}); check --address or RAY_ADDRESS.") from exc
    try:
        yield f"Ray cluster at {chosen}" if chosen else f"local Ray on {LOOPBACK}"
    finally:
        ray.shutdown()


def remote(function: Callable[..., Any], options: TaskOptions) -> Any:
    """`function` as a Ray remote function with `options`; call `.remote(...)` on the result."""
    import ray

    return ray.remote(**options.ray_options())(function)


def cluster_cpus() -> int:
    """The CPUs the joined cluster has now (0 when it has none left)."""
    import ray

    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return int(resources.get("CPU", 0))
