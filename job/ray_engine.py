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
import secrets
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from job.errors import JobError

T = TypeVar("T")

LOOPBACK = "127.0.0.1"
CONNECT_TIMEOUT_S = 10.0
"""How long the driver waits for a cluster's address to accept a connection before giving up."""
WAIT_S = 5.0
"""How long `completed` waits for a task before it looks at the cluster again."""
ADDRESS_ENV = "RAY_ADDRESS"
AUTH_MODE_ENV, AUTH_TOKEN_ENV = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN"
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


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a plain HOST:PORT address; None for "auto", ray:// and other forms."""
    if "://" in address or ":" not in address:
        return None
    host, _, port = address.rpartition(":")
    return (host.strip("[]"), int(port)) if port.isdigit() and host else None


def require_listening(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Fail in one sentence, within `timeout_s`, when nothing accepts a connection at a HOST:PORT
    address: ray.init would otherwise keep retrying for minutes."""
    target = _host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=timeout_s):
            pass
    except OSError as exc:
        raise JobError(f"Nothing answers at the Ray address {address} ({exc.strerror or exc}); start the "
                       "cluster or correct --address or RAY_ADDRESS.") from exc


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """`values` set in os.environ for the block (Ray's child processes inherit them), then restored."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _embedded() -> Iterator[Path]:
    """What the embedded default owns, made for it and removed after: a private temporary folder
    for Ray's session (logs, sockets, spilled objects), never /tmp/ray, and token authentication
    with a fresh token held only in the environment of this process and its children (Ray would
    otherwise write one to ~/.ray/auth_token and print a notice about it). The token keeps another
    local user from submitting work to the loopback ports."""
    # deferred: Ray, optional, loads only for a run on a cluster
    from ray._raylet import Config  # type: ignore[attr-defined]

    folder = Path(tempfile.mkdtemp(prefix="calib-ray-"))
    try:
        with _environment({AUTH_MODE_ENV: "token", AUTH_TOKEN_ENV: secrets.token_hex(32)}):
            Config.initialize("")  # Ray reads its settings once; make it read the token mode now
            yield folder
    finally:
        Config.initialize("")
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _no_address_probe(loopback: bool) -> Iterator[None]:
    """While ray.init runs for a loopback node: Ray replaces a stated 127.0.0.1 with "the local IP",
    found by connecting a socket towards 8.8.8.8:53 (and printing a warning where that fails).
    Ray skips that probe, answering 127.0.0.1, when its multi-node switch is off; it is off only
    for this call, so the node is the loopback address it was given and nothing outside is
    contacted. Joining a cluster elsewhere is left as Ray does it."""
    if not loopback:
        yield
        return
    from ray._private import ray_constants  # deferred: Ray, optional, loads only for a run on a cluster

    before = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


@contextlib.contextmanager
def ray_session(address: str | None, num_cpus: int | None = None) -> Iterator[str]:
    """Connect to the cluster at `address` (None: RAY_ADDRESS, else the embedded loopback default
    with `num_cpus` CPUs, default all of this machine's) for the duration of the block; yield
    what was joined, in words. Ray is shut down on the way out, on success or failure alike, and
    the embedded default's session folder is removed."""
    import ray  # deferred: Ray, optional, loads only for a run on a cluster

    chosen = cluster_address(address)
    if ray.is_initialized():
        raise JobError("Ray is already initialised in this process; run the command in a fresh process.")
    if chosen is not None:
        require_listening(chosen)
    with contextlib.ExitStack() as owned:
        arguments = init_arguments(chosen, num_cpus)
        if chosen is None:
            arguments["_temp_dir"] = str(owned.enter_context(_embedded()))
        try:
            with _no_address_probe(arguments.get("_node_ip_address") == LOOPBACK):
                ray.init(**arguments)
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
    import ray  # deferred: Ray, optional, loads only for a run on a cluster

    return ray.remote(**options.ray_options())(function)


def cluster_cpus() -> int:
    """The CPUs the joined cluster has now (0 when it has none left)."""
    import ray  # deferred: Ray, optional, loads only for a run on a cluster

    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return int(resources.get("CPU", 0))


def completed(refs: dict[Any, T], min_cpus: int, wait_s: float = WAIT_S) -> Iterator[tuple[T, Any]]:
    """Yield (tag, result) for each object ref in `refs` (ref -> tag) as its task finishes; the
    result is the task's return value, or the ray.exceptions.RayError that ended it (a raised
    exception, or a worker or node that died more often than its retries). While nothing finishes,
    raise JobError once the cluster has fewer than `min_cpus` CPUs, since no task could run."""
    import ray  # deferred: Ray, optional, loads only for a run on a cluster

    pending = dict(refs)
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s)
        if not ready:
            if cluster_cpus() < min_cpus:
                raise JobError(f"The cluster has no node left with {min_cpus} CPUs; what finished is kept, "
                               "so run the command again to resume.")
            continue
        tag = pending.pop(ready[0])
        try:
            result = ray.get(ready[0])
        except ray.exceptions.RayError as exc:
            result = exc
        yield tag, result


def task_failure(max_retries: int, exc: BaseException) -> str:
    """One sentence for a task Ray gave up on: one that raised (a fault in the job, since errors on a
    task's input are returned, not raised), or one whose worker or node kept dying."""
    import ray.exceptions as rex  # deferred: Ray, optional, loads only for a run on a cluster

    if isinstance(exc, rex.RayTaskError):
        cause = exc.cause if exc.cause is not None else exc
        last = (str(cause).strip().splitlines() or [type(cause).__name__])[-1]
        return f"The task raised {type(cause).__name__} ({last}); this is a fault in the job, not in its input."
    return (f"The worker or node running the task died {max_retries + 1} times ({type(exc).__name__}); "
            "check the cluster and run the command again to resume.")
