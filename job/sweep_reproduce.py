"""`python -m job reproduce DIR --out ATTDIR --signing-key KEY [--members K --seed S]`: reproduce
every done member of a sweep, or K of them drawn by seed, as Ray tasks, and write one signed
attestation per member, ATTDIR/NAME.intoto.json (the same attestation `job reproduce` writes for
one bundle).

Each task receives the member's bundle as its deterministic archive (no shared filesystem) and the
reproducer's resources: a local lock (--resources, the same for every member) or each node's hub
cache. The draw of K members: numpy.random.Generator(PCG64(seed)).choice(n, K, replace=False) over
the done members in plan order, then taken in plan order."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from bundle import layout
from bundle.dsse import Envelope
from bundle.errors import BundleError, EnvelopeError
from bundle.views.arithmetic import short_number
from job.errors import JobError
from job.hub import default_cache
from job.publishing.archive import archive
from job.publishing.attestation import refuse_existing_attestation, write_attestation
from job.publishing.signing_keys import load_private_key
from job.ray_engine import TaskOptions, completed, ray_session, remote, task_failure
from job.reproduce import ReproduceOptions, reproduce
from job.resources import resolve_hub, resolve_local
from job.sweep_spec import absolute_lock

ATTESTATION_SUFFIX = ".intoto.json"


@dataclass(frozen=True)
class SweepReproduceOptions:
    sweep_dir: Path
    out: Path  # a new folder for the attestations
    signing_key: Path  # the reproducer's key
    members: int | None = None  # reproduce this many, drawn with seed; None: every done member
    seed: int | None = None
    resources: Path | None = None  # a local lock for every member; None: the hub cache on each node
    cache: Path | None = None
    address: str | None = None
    num_cpus: int | None = None  # CPUs of the embedded default

    def __post_init__(self) -> None:
        if (self.members is None) != (self.seed is None):
            raise JobError("--members and --seed go together for a sweep: pass both (K members drawn with "
                           "seed S) or neither (every done member).")


@dataclass(frozen=True)
class ReproduceTask:
    name: str
    archive: bytes  # the member's bundle as the deterministic archive
    key_pem: bytes  # the reproducer's key, unencrypted PKCS#8 PEM
    lock: dict[str, Any] | None
    cache: str | None


@dataclass(frozen=True)
class ReproduceOutcome:
    name: str
    attestation: bytes | None
    reproduced: bool
    error: str | None


def draw_members(names: list[str], k: int, seed: int) -> list[str]:
    """K of `names` drawn with `seed` (PCG64, without replacement), in their given order."""
    if not 1 <= k <= len(names):
        raise JobError(f"--members {k} is not between 1 and the sweep's {len(names)} done members; pick "
                       "another K.")
    chosen = np.random.Generator(np.random.PCG64(seed)).choice(len(names), size=k, replace=False)
    return [names[i] for i in sorted(int(i) for i in chosen)]


def reproduce_member(task: ReproduceTask) -> ReproduceOutcome:
    """Re-run one member's bundle on this worker and return its signed attestation's bytes."""
    with tempfile.TemporaryDirectory(prefix=f"reproduce-{task.name}-") as tmp_name:
        tmp = Path(tmp_name)
        bundle = tmp / f"{task.name}.tar.gz"
        bundle.write_bytes(task.archive)
        out = tmp / "attestation.intoto.json"
        lock_path = tmp / "lock.json"
        if task.lock is not None:
            lock_path.write_text(json.dumps(task.lock))

        def resolve(protocol: Any) -> Any:
            if task.lock is not None:
                return resolve_local(lock_path, protocol.resources)
            return resolve_hub(protocol.resources, Path(task.cache) if task.cache else default_cache())

        try:
            key = load_pem_private_key(task.key_pem, password=None)
            if not isinstance(key, Ed25519PrivateKey):
                raise JobError("The reproducer's key is not an Ed25519 key; pass one `python -m job keygen` wrote.")
            rc = reproduce(ReproduceOptions(bundle=bundle, out=out, signing_key=Path("<reproducer key>"),
                                            progress=False), resolve, key=key)
        except (JobError, BundleError) as exc:
            return ReproduceOutcome(task.name, None, False, str(exc))
        return ReproduceOutcome(task.name, out.read_bytes(), rc == 0, None)


def _index_rows(sweep_dir: Path) -> list[dict[str, Any]]:
    path = sweep_dir / layout.SWEEP_INDEX
    if not path.is_file():
        raise JobError(f"{sweep_dir} has no {layout.SWEEP_INDEX}: the sweep has not finished; run it to the end first.")
    try:
        statement = json.loads(Envelope.from_json(path.read_bytes(), layout.SWEEP_INDEX).payload)
        return list(statement["predicate"]["members"])
    except (EnvelopeError, ValueError, KeyError, TypeError) as exc:
        raise JobError(f"{path} is not a sweep index ({exc}); pass the directory `python -m job sweep` wrote.") from exc


def reproduce_sweep(options: SweepReproduceOptions) -> int:
    """Reproduce the chosen members on Ray; 0 when every one reproduced, 1 otherwise."""
    import ray  # deferred: Ray, optional, loads only for a run on a cluster

    done = [r["name"] for r in _index_rows(options.sweep_dir) if r["status"] == "done"]
    if not done:
        raise JobError(f"{options.sweep_dir} has no done member to reproduce.")
    names = done if options.members is None else draw_members(done, options.members, int(options.seed or 0))
    refuse_existing_attestation(options.out)
    key = load_private_key(options.signing_key)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    lock = absolute_lock(options.resources) if options.resources is not None else None
    plan_file = options.sweep_dir / layout.SWEEP_PLAN
    plan = json.loads(Envelope.from_json(plan_file.read_bytes(), layout.SWEEP_PLAN).payload)
    pins = {m["name"]: m["resources"] for m in plan["predicate"]["members"]}
    options.out.mkdir(parents=True)
    failed = 0
    levels: dict[str, int] = {}
    with ray_session(options.address, options.num_cpus) as where, tempfile.TemporaryDirectory() as tmp:
        print(f"reproducing {len(names)} of {len(done)} done members on {where}", flush=True)
        refs: dict[Any, str] = {}
        functions: dict[TaskOptions, Any] = {}
        for name in names:
            opts = TaskOptions(num_cpus=int(pins[name]["num_cpus"]), max_retries=int(pins[name]["max_retries"]))
            fn = functions.setdefault(opts, remote(reproduce_member, opts))
            data = archive(options.sweep_dir / layout.SWEEP_MEMBERS / name, Path(tmp) / f"{name}.tar.gz").read_bytes()
            refs[fn.remote(ReproduceTask(name, data, pem, lock, str(options.cache) if options.cache else None))] = name
        threads = max(int(pins[n]["num_cpus"]) for n in names)
        for name, result in completed(refs, threads):
            if isinstance(result, ray.exceptions.RayError):
                result = ReproduceOutcome(name, None, False, task_failure(int(pins[name]["max_retries"]), result))
            outcome: ReproduceOutcome = result
            if outcome.attestation is not None:
                write_attestation(options.out / f"{name}{ATTESTATION_SUFFIX}", outcome.attestation)
            failed += not outcome.reproduced
            level, words = member_verdict(outcome)
            levels[level] = levels.get(level, 0) + 1
            print(f"{level:<13}  {name}{words}", flush=True)
    counts = ", ".join(f"{levels[k]} {k}" for k in ("bit-identical", "equivalent", "MISMATCH", "failed") if k in levels)
    print(f"{len(names) - failed} of {len(names)} members reproduced ({counts}); attestations in {options.out}")
    return 1 if failed else 0


def member_verdict(outcome: ReproduceOutcome) -> tuple[str, str]:
    """(level, words) for one member's line: the verdict its attestation signs (bit-identical,
    equivalent with its largest difference, MISMATCH), or `failed` with the reason no attestation
    was written."""
    if outcome.attestation is None:
        return "failed", f": {outcome.error}"
    predicate = json.loads(Envelope.from_json(outcome.attestation, "the attestation").payload)["predicate"]
    verdict = str(predicate["verdict"])
    if verdict == "equivalent":
        worst = predicate["largest_difference"]
        return verdict, (f"  (every logit within {short_number(predicate['tolerance']['abs'])}, largest "
                         f"{short_number(worst['abs'])}, {worst['ulps']} ulps)")
    return ("MISMATCH", "") if verdict == "mismatch" else (verdict, "")
