"""Fault scenarios of `python -m job sweep` on a real Ray cluster, run INSIDE a network and PID
namespace that tests/job/test_sweep_ray.py makes (`unshare --net --pid --fork --mount-proc`):
only loopback exists, and every process started here dies with the namespace. Ray clusters are
started with `ray start ... --node-ip-address 127.0.0.1` and stopped with `ray stop --force`, which
in this PID namespace sees only this namespace's processes.

    python tests/job/sweep_cluster.py SCENARIO SWEEP.json OUT KEY.pem RESULT.json [LOCK.json]

Scenarios: embedded (no --address: the local default; records every listening address while it
runs), kill-worker (SIGKILL the worker running a member once; then, given LOCK.json, reproduce one
member drawn by seed into OUT/../attestations), remove-node (SIGKILL the second
node's raylet while it runs a member), kill-driver (SIGKILL the driver after its first member is
published, then run the same command again). Facts go to RESULT.json; the test asserts on them.
Every wait is bounded."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PORT = 6390
SECOND_NODE_MANAGER_PORT = 6395
DEADLINE_S = 300.0  # bounds every wait; an idle 2-core machine needs a fifth of it
LOCK: str | None = None  # the reproducer's resource lock (kill-worker reproduces one member with it)


TOKEN = secrets.token_hex(32)
"""This run's Ray authentication token: every process here uses it, none reads or writes ~/.ray."""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH"}}
    env.update(PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN)
    return env


def _ray(*args: str) -> None:
    subprocess.run([str(BIN / "ray"), *args], check=True, env=_env(), cwd=REPO, timeout=120,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _start_head(num_cpus: int) -> str:
    _ray("start", "--head", "--port", str(PORT), "--num-cpus", str(num_cpus), "--node-ip-address", "127.0.0.1",
         "--include-dashboard", "false", "--disable-usage-stats")
    return f"127.0.0.1:{PORT}"


def _start_second_node(address: str, num_cpus: int) -> None:
    _ray("start", "--address", address, "--num-cpus", str(num_cpus), "--node-ip-address", "127.0.0.1",
         "--node-manager-port", str(SECOND_NODE_MANAGER_PORT), "--disable-usage-stats")


def _sweep(args: list[str], address: str | None, log: Path,
           env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "job", "sweep", *args, "--no-progress"]
    if address is not None:
        cmd += ["--address", address]
    return subprocess.Popen(cmd, cwd=REPO, env=env or _env(), stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def _ray_leftovers() -> list[str]:
    """Ray session folders in the shared places: /tmp/ray and this test's temporary folders."""
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    return sorted(str(p) for p in [*Path("/tmp/ray").glob("session_*"), *tmp.glob("calib-ray-*")])


def _members_running() -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["name", "cmdline"]):
        title = " ".join(p.info["cmdline"] or []) or (p.info["name"] or "")
        if title.startswith("ray::build_member"):
            found.append(p)
    return found


def _raylet_of_second_node() -> psutil.Process | None:
    for p in psutil.process_iter(["name", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "raylet" in (p.info["name"] or "") and f"--node_manager_port={SECOND_NODE_MANAGER_PORT}" in cmd:
            return p
    return None


def _wait(proc: subprocess.Popen[bytes], start: float) -> int:
    return proc.wait(timeout=max(1.0, DEADLINE_S - (time.monotonic() - start)))


def _index_statuses(out: Path) -> dict[str, str]:
    import base64

    path = out / "index.intoto.json"
    if not path.exists():
        return {}
    statement = json.loads(base64.b64decode(json.loads(path.read_bytes())["payload"]))
    return {r["name"]: r["status"] for r in statement["predicate"]["members"]}


def embedded(args: list[str], out: Path, log: Path) -> dict[str, Any]:
    """The default as a user meets it: no RAY_AUTH_* set, so the job must set up its own token."""
    before = _ray_leftovers()
    env = {k: v for k, v in _env().items() if not k.startswith("RAY_AUTH")}
    start = time.monotonic()
    proc = _sweep(args, None, log, env)
    listening: set[str] = set()
    while proc.poll() is None and time.monotonic() - start < DEADLINE_S:
        ss = subprocess.run(["ss", "-ltnuH"], capture_output=True, text=True, check=False).stdout
        listening |= {line.split()[4].rsplit(":", 1)[0] for line in ss.splitlines() if len(line.split()) > 4}
        time.sleep(0.3)
    rc = _wait(proc, start)
    left = sorted(set(_ray_leftovers()) - set(before))
    return {"rc": rc, "listening": sorted(listening), "statuses": _index_statuses(out), "left_behind": left}


def kill_worker(args: list[str], out: Path, log: Path) -> dict[str, Any]:
    address = _start_head(2)
    start = time.monotonic()
    proc = _sweep(args, address, log)
    killed = None
    while proc.poll() is None and killed is None and time.monotonic() - start < DEADLINE_S:
        running = [p for p in _members_running() if time.time() - p.create_time() > 0.5]
        if running:
            killed = running[0].pid
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.2)
    rc = _wait(proc, start)
    facts: dict[str, Any] = {"rc": rc, "killed": killed, "statuses": _index_statuses(out)}
    if LOCK is not None and rc == 0:  # then reproduce one member, drawn by seed, on the same cluster
        key = args[args.index("--signing-key") + 1]
        cmd = [sys.executable, "-m", "job", "reproduce", str(out), "--out", str(out.parent / "attestations"),
               "--signing-key", key, "--resources", LOCK, "--members", "1", "--seed", "0", "--address", address]
        with open(log, "ab") as fh:
            facts["reproduce_rc"] = subprocess.run(cmd, cwd=REPO, env=_env(), stdout=fh, stderr=subprocess.STDOUT,
                                                   timeout=DEADLINE_S, check=False).returncode
    return facts


def remove_node(args: list[str], out: Path, log: Path) -> dict[str, Any]:
    address = _start_head(1)
    _start_second_node(address, 1)
    start = time.monotonic()
    proc = _sweep(args, address, log)
    removed = False
    while proc.poll() is None and not removed and time.monotonic() - start < DEADLINE_S:
        raylet = _raylet_of_second_node()
        if raylet is not None and any(raylet.pid in {a.pid for a in p.parents()} for p in _members_running()):
            for child in raylet.children(recursive=True):
                child.kill()
            raylet.kill()
            removed = True
        time.sleep(0.2)
    rc = _wait(proc, start)
    return {"rc": rc, "removed": removed, "statuses": _index_statuses(out)}


def kill_driver(args: list[str], out: Path, log: Path) -> dict[str, Any]:
    address = _start_head(1)
    start = time.monotonic()
    proc = _sweep(args, address, log)
    members = out / "members"
    while proc.poll() is None and time.monotonic() - start < DEADLINE_S:
        if members.is_dir() and any(not p.name.startswith(".") for p in members.iterdir()):
            proc.kill()
            break
        time.sleep(0.1)
    first_rc = proc.wait(timeout=30)
    after_kill = sorted(p.name for p in members.iterdir())
    index_after_kill = (out / "index.intoto.json").exists()
    second = _sweep(args, address, log)
    rc = _wait(second, start)
    return {"first_rc": first_rc, "after_kill": after_kill, "index_after_kill": index_after_kill, "rc": rc,
            "final": sorted(p.name for p in members.iterdir()), "statuses": _index_statuses(out)}


SCENARIOS = {"embedded": embedded, "kill-worker": kill_worker, "remove-node": remove_node, "kill-driver": kill_driver}


def main() -> int:
    global LOCK
    scenario, sweep, out, key, result = sys.argv[1:6]
    LOCK = sys.argv[6] if len(sys.argv) > 6 else None
    args = [sweep, "--out", out, "--signing-key", key]
    log = Path(result).with_suffix(".log")
    try:
        facts = SCENARIOS[scenario](args, Path(out), log)
    finally:
        if scenario != "embedded":
            subprocess.run([str(BIN / "ray"), "stop", "--force"], env=_env(), timeout=60, check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    Path(result).write_text(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
