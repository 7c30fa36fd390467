"""`python -m job sweep SWEEP.json --out DIR --signing-key KEY.pem [--address ADDRESS]`.

Order: expand the sweep and sign the plan; keep every member whose bundle is already there and
verifies (a rerun resumes); run the others as Ray tasks; verify and publish each archive as it
comes back; sign the index and render the views once every member is done or failed."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from tqdm import tqdm

from bundle import layout
from job.errors import JobError
from job.publishing.signing_keys import load_private_key
from job.ray_engine import TaskOptions, cluster_cpus, completed, ray_session, remote, task_failure
from job.sweep_dir import clean_partials, forget_index, open_sweep_dir, publish_member, verified_member, write_index
from job.sweep_member import MemberOutcome, MemberTask, build_member
from job.sweep_spec import Member, Sweep, load_sweep


@dataclass(frozen=True)
class SweepOptions:
    sweep: Path
    out: Path
    signing_key: Path
    address: str | None = None  # None: RAY_ADDRESS, else the embedded local default
    cache: Path | None = None  # hub cache on each node (members without a lock)
    progress: bool = True
    num_cpus: int | None = None  # CPUs of the embedded default (None: all of this machine's)


def _say(bar: Any, line: str) -> None:
    if bar is not None:
        bar.write(line)
    else:
        print(line, flush=True)


def _done_line(row: dict[str, Any]) -> str:
    s = row["summary"]
    ece = s["metrics"]["ece"]
    return f"done    {row['name']}  T = {s['temperature']:.4f}  audit ECE {ece['raw']:.4f} -> {ece['calibrated']:.4f}"


def _failed_row(member: Member, error: str) -> dict[str, Any]:
    """The index row of a failed member: its error on one line, printable ASCII (anything else
    escaped), cut to the format's length, so that every row fits the index's per-member bound."""
    text = ascii(" ".join(error.split()))[1:-1]
    return {"name": member.name, "status": "failed", "error": text[:layout.SWEEP_ERROR_CHARS] or "no reason given"}


def _existing(out: Path, member: Member, key: Ed25519PrivateKey) -> dict[str, Any] | None:
    bag = out / layout.SWEEP_MEMBERS / member.name
    if not bag.exists():
        return None
    try:
        return verified_member(bag, member, key)
    except JobError as exc:
        raise JobError(f"{exc} Remove {bag} and run the sweep again.") from exc


def _run_pending(options: SweepOptions, pending: list[Member], key: Ed25519PrivateKey,
                 rows: dict[str, dict[str, Any]]) -> None:
    import ray  # deferred: Ray, optional, loads only for a run on a cluster

    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    threads = max(m.num_cpus for m in pending)
    with ray_session(options.address, options.num_cpus) as where:
        print(f"running {len(pending)} member(s) on {where}", flush=True)
        if cluster_cpus() < threads:
            raise JobError(f"The cluster has {cluster_cpus()} CPUs and a member asks for {threads}; "
                           "lower member.threads or add nodes.")
        refs: dict[Any, Member] = {}
        functions: dict[TaskOptions, Any] = {}
        for m in pending:
            options_m = TaskOptions(num_cpus=m.num_cpus, max_retries=m.max_retries)
            task = functions.setdefault(options_m, remote(build_member, options_m))
            refs[task.remote(MemberTask(m.name, m.protocol, m.lock, key_pem,
                                        str(options.cache) if options.cache else None))] = m
        bar = None
        if options.progress:
            bar = tqdm(total=len(rows) + len(refs), initial=len(rows), desc="sweep", unit="member",
                       file=sys.stderr)
        try:
            for member, result in completed(refs, threads):
                if isinstance(result, ray.exceptions.RayError):
                    result = MemberOutcome(member.name, None, task_failure(member.max_retries, result))
                outcome: MemberOutcome = result
                if outcome.archive is not None:
                    try:
                        row = publish_member(options.out, member, outcome.archive, key)
                    except JobError as exc:
                        row = _failed_row(member, str(exc))
                else:
                    row = _failed_row(member, outcome.error or "the worker gave no reason")
                rows[member.name] = row
                _say(bar, _done_line(row) if row["status"] == "done" else f"failed  {member.name}: {row['error']}")
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()


def run_sweep(options: SweepOptions) -> int:
    """Plan, run and index the sweep; 0 when every member is done, 1 when some failed."""
    sweep: Sweep = load_sweep(options.sweep)
    key = load_private_key(options.signing_key)
    options.out.mkdir(parents=True, exist_ok=True)
    plan_sha256 = open_sweep_dir(options.out, sweep, key)
    clean_partials(options.out)
    rows: dict[str, dict[str, Any]] = {}
    pending: list[Member] = []
    for m in sweep.members:
        row = _existing(options.out, m, key)
        if row is None:
            pending.append(m)
        else:
            rows[m.name] = row
    print(f"sweep {sweep.name}: {len(sweep.members)} members planned (plan {plan_sha256[:16]}), "
          f"{len(rows)} already done, {len(pending)} to run", flush=True)
    if pending:
        forget_index(options.out)
        _run_pending(options, pending, key, rows)
    ordered = [rows[m.name] for m in sweep.members]
    write_index(options.out, plan_sha256, ordered, key)
    failed = [r for r in ordered if r["status"] != "done"]
    print(f"index written to {options.out / layout.SWEEP_INDEX}: {len(ordered) - len(failed)} done, "
          f"{len(failed)} failed; comparison in {options.out / layout.SWEEP_MD}")
    return 1 if failed else 0
