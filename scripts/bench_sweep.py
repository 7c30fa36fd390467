"""What running a sweep on Ray costs against a plain loop, all measured in this one invocation.

    python scripts/bench_sweep.py [--sweep examples/standin-resplits.sweep.json] [--loop-threads 2]
    python scripts/bench_sweep.py --paper 1000 [--sweep S]   # plan and index size for 1,000 members

It prints three things:
1. the sweep on local Ray (`python -m job sweep`, the embedded default, member.threads from the
   sweep file: 1 in the example, so two members run at once on 2 cores): wall time;
2. the same members as a sequential loop of `python -m job run` at --loop-threads threads: wall time;
3. Ray's per-member overhead: the round trip of one task that takes a member's arguments and
   returns an archive-sized result on the warm local cluster (scheduling and shipping), in
   seconds and as a fraction of a member's run (first to last stage in its environment.json).

As root with `unshare`, every Ray process runs in a fresh network and PID namespace (loopback
only), as the tests do; elsewhere the embedded default binds 127.0.0.1 anyway. Not a test:
timings depend on the machine and on what else runs on it."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from scripts.generated_split import write_protocol


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
               PYTHONPATH=str(REPO))
    return env


def _isolated(cmd: list[str]) -> list[str]:
    """`cmd` inside a loopback-only network and PID namespace when this process may make one."""
    if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip"):
        return ["unshare", "--net", "--pid", "--fork", "--mount-proc", "bash", "-c",
                'ip link set lo up && exec "$@"', "bash", *cmd]
    return cmd


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[-8:])} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return wall, done.stdout


def _member_run_s(bag: Path) -> float:
    """First stage start to last stage end of a member's run (its environment.json)."""
    stages = json.loads((bag / "data" / "environment.json").read_text())["stage_times"]
    start = datetime.fromisoformat(stages[0]["start"])
    end = datetime.fromisoformat(stages[-1]["end"])
    return (end - start).total_seconds()


def overhead_child(arg_bytes: int, result_bytes: int, rounds: int) -> None:
    """Inside the namespace: round trips of a 1-CPU task with a member's argument and result sizes."""
    import ray

    from job.ray_engine import TaskOptions, ray_session, remote

    def echo(payload: bytes, size: int) -> bytes:
        return bytes(size)

    with ray_session(None):
        fn = remote(echo, TaskOptions(num_cpus=1, max_retries=3))
        payload = os.urandom(arg_bytes)
        for _ in range(2):  # start the workers
            ray.get(fn.remote(payload, result_bytes))
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            ray.get(fn.remote(payload, result_bytes))
            times.append(time.perf_counter() - start)
    print(json.dumps({"round_trip_s": times}))


def _ray_sweep(sweep: Path, tmp: Path, key: Path) -> tuple[float, Path]:
    out = tmp / "ray-sweep"
    wall, _ = _timed(_isolated([sys.executable, "-m", "job", "sweep", str(sweep), "--out", str(out),
                                "--signing-key", str(key), "--no-progress"]), _env())
    return wall, out


def _loop(sweep: Any, lock: Path, tmp: Path, threads: int) -> float:
    total = 0.0
    for m in sweep.members:
        protocol = write_protocol(tmp / "protocols" / f"{m.name}.json", json.loads(m.protocol),
                                  {"torch_threads": threads})
        wall, _ = _timed([sys.executable, "-m", "job", "run", "--protocol", str(protocol), "--resources", str(lock),
                          "--out", str(tmp / "loop" / m.name), "--ephemeral-key", "--no-progress"], dict(os.environ))
        total += wall
    return total


def _archive_size(bag: Path, tmp: Path) -> int:
    from job.publishing.archive import archive

    return archive(bag, tmp / f"{bag.name}.tar.gz").stat().st_size


def bench(sweep_path: Path, loop_threads: int) -> None:
    from job.sweep_spec import load_sweep

    sweep = load_sweep(sweep_path)
    doc = json.loads(sweep_path.read_text())
    lock = (sweep_path.resolve().parent / doc["lock"]).resolve()
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as name:
        tmp = Path(name)
        subprocess.run([sys.executable, "-m", "job", "keygen", "--out", str(tmp / "keys")], cwd=REPO, check=True,
                       capture_output=True)
        key = tmp / "keys" / "signing-key.pem"
        load_start = os.getloadavg()[0]
        ray_wall, out = _ray_sweep(sweep_path, tmp, key)
        load_ray = os.getloadavg()[0]
        runs = [_member_run_s(out / "members" / m.name) for m in sweep.members]
        arg = len(sweep.members[0].protocol) + len(json.dumps(sweep.members[0].lock)) + 200
        size = _archive_size(out / "members" / sweep.members[0].name, tmp)
        _, child_out = _timed(_isolated([sys.executable, str(Path(__file__).resolve()), "--overhead-child",
                                         str(arg), str(size), "8"]), _env())
        trips = json.loads(child_out.strip().splitlines()[-1])["round_trip_s"]
        loop_wall = _loop(sweep, lock, tmp, loop_threads)
    n, threads = len(sweep.members), sweep.members[0].num_cpus
    overhead = statistics.median(trips)
    member = statistics.mean(runs)
    print(f"sweep {sweep.name}: {n} members, {os.cpu_count()} CPUs; load average {load_start:.1f} before, "
          f"{load_ray:.1f} after the Ray sweep, {os.getloadavg()[0]:.1f} after the loop (other work on the machine)")
    print(f"1. local Ray, {threads} thread(s) per member:       {ray_wall:8.1f} s wall "
          f"(member runs {min(runs):.1f}-{max(runs):.1f} s, mean {member:.1f} s)")
    print(f"2. sequential `job run` loop, {loop_threads} threads:    {loop_wall:8.1f} s wall "
          f"(Ray / loop = {ray_wall / loop_wall:.3f}; target <= 1.1)")
    print(f"3. Ray overhead per member (round trip of a {arg} B argument and a {size} B archive, "
          f"median of {len(trips)}): {overhead:.4f} s = {100 * overhead / member:.2f}% of a member's run "
          "(target < 5%)")


def paper(sweep_path: Path, members: int) -> None:
    """Plan and index sizes, and the driver's memory for them, for a sweep of `members` resplits
    of the given sweep's base (the index rows repeat a real summary's shape)."""
    import resource

    from job.publishing.signing_keys import generate, load_private_key
    from job.publishing.sweep_statements import index_statement, signed_record
    from job.sweep_dir import plan_bytes
    from job.sweep_spec import expand
    from job.user_documents import read_checked

    raw, doc = read_checked(sweep_path, "sweep", "sweep file", "--sweep")
    doc = dict(doc, prefixes=[f"resplit-{i}:" for i in range(members)])
    raw = json.dumps(doc).encode()
    here = sweep_path.resolve().parent
    _, base = read_checked(here / doc["protocol"], "protocol", "protocol", "--sweep")
    start = time.perf_counter()
    sweep = expand(raw, doc, here, base)
    with tempfile.TemporaryDirectory() as name:
        generate(Path(name) / "k")
        key = load_private_key(Path(name) / "k" / "signing-key.pem")
    plan, plan_sha = plan_bytes(sweep, key)
    metric = {"raw": 0.123456789012345, "calibrated": 0.0987654321098765,
              "difference": {"point": -0.0246913569025, "lower": -0.0312345678901, "upper": -0.0187654321098}}
    rows = [{"name": m.name, "status": "done", "statement_sha256": "ab" * 32, "summary": {
        "temperature": 1.23456789012345, "boundary": False, "n": 360, "interval_level": 0.95,
        "metrics": {"nll": metric, "ece": metric, "brier": metric}}} for m in sweep.members]
    index, _ = signed_record(index_statement(plan_sha, rows), key)
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{members} members: plan {len(plan) / 1e6:.2f} MB, index {len(index) / 1e6:.2f} MB "
          f"(envelopes; base64 payload), expanded, signed and indexed in {seconds:.1f} s; this process's "
          f"peak RSS {rss:.0f} MB")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--overhead-child":
        overhead_child(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweep", type=Path, default=REPO / "examples" / "standin-resplits.sweep.json")
    p.add_argument("--loop-threads", type=int, default=2)
    p.add_argument("--paper", type=int, metavar="N", help="only the plan and index sizes for N members")
    args = p.parse_args()
    if args.paper:
        paper(args.sweep, args.paper)
    else:
        bench(args.sweep, args.loop_threads)


if __name__ == "__main__":
    main()
