"""One sweep member, run where Ray places it: the worker side of `python -m job sweep`.

The worker builds the member's bundle in its own temporary directory and hands back the
deterministic archive (job.publishing.archive) as bytes, so the driver needs no shared filesystem. A
member that fails on its own input (its lock does not match its files, its protocol is refused)
returns its one-sentence error instead of raising: Ray would re-run a raised task only if told to,
and the same input fails the same way every time. A worker or node that dies raises nothing here;
Ray re-runs the task (ray_engine.TaskOptions.max_retries)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.serialization import load_pem_private_key

from bundle.errors import BundleError
from bundle.schemas import validate
from job.errors import JobError
from job.hub import default_cache
from job.protocol import Protocol
from job.publishing.archive import archive
from job.resources import resolve_hub, resolve_local
from job.rocrate import Publication
from job.run import run_and_seal


@dataclass(frozen=True)
class MemberTask:
    """What the driver ships to the worker: small, and nothing that names the driver's files."""

    name: str
    protocol: bytes  # the member's canonical protocol
    lock: dict[str, Any] | None  # resource lock, local paths as seen on the worker; None: hub cache
    key_pem: bytes  # the signing key, unencrypted PKCS#8 PEM (it never touches the worker's disk)
    cache: str | None = None  # hub cache directory on the worker; None: its default


@dataclass(frozen=True)
class MemberOutcome:
    """The worker's answer: the bundle archive, or the error that stopped the member."""

    name: str
    archive: bytes | None
    error: str | None


def _resources(task: MemberTask, protocol: Any, tmp: Path) -> Any:
    if task.lock is None:
        return resolve_hub(protocol.resources, Path(task.cache) if task.cache else default_cache())
    lock_path = tmp / "lock.json"
    lock_path.write_text(json.dumps(task.lock))
    return resolve_local(lock_path, protocol.resources)


def build_member(task: MemberTask) -> MemberOutcome:
    """Run the member's protocol into a bundle under a fresh temporary directory and return the
    archive's bytes; an error on the member's own input is returned, not raised."""
    with tempfile.TemporaryDirectory(prefix=f"sweep-{task.name}-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            doc = json.loads(task.protocol)
            try:
                validate(doc, "protocol")
            except BundleError as exc:
                raise JobError(f"The member's protocol does not follow schemas/protocol.schema.json: {exc}") from exc
            protocol = Protocol.from_bytes(task.protocol, doc)
            resources = _resources(task, protocol, tmp)
            key = load_pem_private_key(task.key_pem, password=None)
            bag = tmp / task.name
            run_and_seal(bag, protocol, resources, key, progress=False, publication=Publication())
            data = archive(bag, tmp / f"{task.name}.tar.gz").read_bytes()
        except (JobError, BundleError) as exc:
            return MemberOutcome(task.name, None, str(exc))
        except OSError as exc:
            where = f" at {exc.filename}" if exc.filename else ""
            return MemberOutcome(task.name, None, f"{exc.strerror or exc}{where} on the worker; check its "
                                                  "disk and permissions and run the sweep again.")
    return MemberOutcome(task.name, data, None)
