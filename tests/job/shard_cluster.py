"""Sharded runs (`python -m job run|reproduce --address`) on a real Ray cluster, run INSIDE the
loopback-only network and PID namespace that tests/job/test_sharded_ray.py makes, with the cluster
helpers of tests/job/sweep_cluster.py (head and second node on 127.0.0.1, one token, `ray stop`).

    python -m tests.job.shard_cluster SCENARIO RESULT.json ARGS...

Scenarios:
  run OUT KEY LOCK           head (1 CPU) + second node (1 CPU), one 1-CPU worker on each; workers
                             append a receipt per batch (CALIBRATION_SHARD_RECEIPTS).
  kill-worker OUT KEY LOCK   the same, and the worker that receives the first audit batch is
                             SIGKILLed when it does.
  reproduce BUNDLE OUT KEY LOCK  `job reproduce --address` of BUNDLE on the two-node cluster.
  lose-all OUT KEY LOCK      one node; its only worker is SIGKILLed at its first audit batch.
  mixed OUT KEY LOCK [PROTOCOL]  head (1 CPU) + a second node (1 CPU) started with AVX2_ENV, so
                             that its raylet and every worker it starts compute as an AVX2-only CPU
                             would; one 1-CPU worker on each. Records each worker's environment
                             variables of AVX2_ENV as seen in its process (`worker_env`, by pid).
Facts go to RESULT.json; the test asserts on them. Every wait is bounded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from tests.job.sweep_cluster import BIN, REPO, SECOND_NODE_MANAGER_PORT, _env, _start_head, _start_second_node

DEADLINE_S = 300.0
RECEIPTS_ENV = "CALIBRATION_SHARD_RECEIPTS"
AVX2_ENV = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
"""What makes a node of this machine compute as an AVX2-only CPU: ATen's and oneDNN's kernels."""


def _receipts(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _job(args: list[str], address: str, receipts: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**_env(), RECEIPTS_ENV: str(receipts)}
    cmd = [sys.executable, "-m", "job", *args, "--no-progress", "--address", address, "--worker-cpus", "1"]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def _two_nodes() -> str:
    address = _start_head(1)
    _start_second_node(address, 1)
    return address


def _avx2_node(address: str) -> None:
    """A second node (1 CPU) whose `ray start`, and so its raylet and the workers it starts, has AVX2_ENV."""
    subprocess.run([str(BIN / "ray"), "start", "--address", address, "--num-cpus", "1", "--node-ip-address",
                    "127.0.0.1", "--node-manager-port", str(SECOND_NODE_MANAGER_PORT), "--disable-usage-stats"],
                   check=True, env={**_env(), **AVX2_ENV}, cwd=REPO, timeout=120, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def _worker_env(pid: int) -> dict[str, str | None] | None:
    """AVX2_ENV's variables as the process `pid` has them (None: the process is gone)."""
    try:
        env = psutil.Process(pid).environ()
    except psutil.Error:
        return None
    return {name: env.get(name) for name in AVX2_ENV}


def _finish(proc: subprocess.Popen[bytes], start: float) -> int:
    return proc.wait(timeout=max(1.0, DEADLINE_S - (time.monotonic() - start)))


def _run_killing(args: list[str], address: str, receipts: Path, log: Path, kill: bool) -> dict[str, Any]:
    start = time.monotonic()
    proc = _job(args, address, receipts, log)
    killed = None
    while kill and killed is None and proc.poll() is None and time.monotonic() - start < DEADLINE_S:
        audit = [r for r in _receipts(receipts) if r["pool"] == "audit"]
        if audit:
            killed = audit[0]["pid"]
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.05)
    rc = _finish(proc, start)
    return {"rc": rc, "killed": killed, "receipts": _receipts(receipts)}


def mixed(result: Path, out: str, key: str, lock: str, protocol: str | None = None) -> dict[str, Any]:
    address = _start_head(1)
    _avx2_node(address)
    receipts, log = result.with_suffix(".receipts"), result.with_suffix(".log")
    args = ["run", "--out", out, "--signing-key", key, "--resources", lock]
    start = time.monotonic()
    proc = _job(args + (["--protocol", protocol] if protocol else []), address, receipts, log)
    seen: dict[str, dict[str, str | None] | None] = {}
    while proc.poll() is None and time.monotonic() - start < DEADLINE_S:
        for pid in {r["pid"] for r in _receipts(receipts)} - {int(p) for p in seen}:
            seen[str(pid)] = _worker_env(pid)  # read while the worker lives: it ends with the run
        time.sleep(0.05)
    rc = _finish(proc, start)
    return {"rc": rc, "receipts": _receipts(receipts), "worker_env": seen}


def run(result: Path, out: str, key: str, lock: str, kill: bool = False, nodes: int = 2) -> dict[str, Any]:
    address = _two_nodes() if nodes == 2 else _start_head(1)
    args = ["run", "--out", out, "--signing-key", key, "--resources", lock]
    return _run_killing(args, address, result.with_suffix(".receipts"), result.with_suffix(".log"), kill)


def reproduce(result: Path, bundle: str, out: str, key: str, lock: str) -> dict[str, Any]:
    address = _two_nodes()
    args = ["reproduce", bundle, "--out", out, "--signing-key", key, "--resources", lock]
    return _run_killing(args, address, result.with_suffix(".receipts"), result.with_suffix(".log"), False)


def main() -> int:
    scenario, result, *rest = sys.argv[1:]
    path = Path(result)
    try:
        if scenario == "run":
            facts = run(path, *rest)
        elif scenario == "kill-worker":
            facts = run(path, *rest, kill=True)
        elif scenario == "mixed":
            facts = mixed(path, *rest)
        elif scenario == "lose-all":
            facts = run(path, *rest, kill=True, nodes=1)
        else:
            facts = reproduce(path, *rest)
    finally:
        subprocess.run([str(BIN / "ray"), "stop", "--force"], env=_env(), timeout=60, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path.write_text(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
