"""What sharding a run's inference on Ray costs, measured on the generated large split.

    python scripts/bench_sharded.py [--rows 50000] [--small 872] [--model DIR] [--json OUT.json]

It generates `--rows` random short sentences (scripts/generated_split.py) and the repository's
protocol resized to them (explore 256, calibration 256, audit the rest; bootstrap and stability
as the protocol says), with the classifier in `--model` (default: the stand-in in
../shared/fixtures/distilbert-minilm-sst2). Then it prints three things:
1. single process, torch_threads 2: wall time, peak RSS, inference time (both pools' stages);
2. the same protocol on a local Ray cluster of 2 CPUs with 2 one-thread workers
   (`python -m job run --address 127.0.0.1:PORT --worker-cpus 1`): wall time, inference time and
   Ray's overhead: the workers' time outside a forward while the pools ran (inference wall time x
   workers - the forwards' time, from environment.json cluster.dispatch) over the forwards' time;
3. the driver's peak RSS for the first `--small` rows and for all `--rows` (their ratio: flat is
   1.0), and the driver's time per batch (tokenising, sending, storing; environment.json
   cluster.dispatch).
Peak RSS is the kernel's high-water mark of the job's process (wait4), so for the sharded runs it
is the driver's alone. As root with `unshare`, each cluster runs in a fresh loopback-only network
and PID namespace, as the tests do. Not a test: figures depend on the machine and its load."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from scripts.generated_split import make_data, make_lock, make_protocol

STANDIN = REPO.parent / "shared" / "fixtures" / "distilbert-minilm-sst2"
PORT = 6391
TOKEN = os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(32)
"""One Ray authentication token for the cluster and the job that joins it; nothing reads ~/.ray."""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN, PYTHONPATH=str(REPO))
    return env


def child(cmd: list[str], log: Path) -> dict[str, Any]:
    """Run cmd; exit status, wall seconds and the kernel's peak RSS of the child in MB."""
    t0 = time.perf_counter()
    with log.open("ab") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    return {"rc": os.waitstatus_to_exitcode(status), "wall_s": round(time.perf_counter() - t0, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


def _figures(res: dict[str, Any], out: Path) -> dict[str, Any]:
    env_path = out / "data" / "environment.json"
    if env_path.is_file():
        env = json.loads(env_path.read_text())
        t = env["timings_s"]
        res["inference_s"] = round(t["calibration-inference"] + t["audit-inference"], 2)
        if "cluster" in env:
            d = env["cluster"]["dispatch"]
            workers = sum(1 for w in env["cluster"]["workers"] if any(w["batches"].values()))
            res["batches"], res["dispatch_ms_per_batch"] = d["batches"], round(1000 * d["driver_s"] / d["batches"], 3)
            # The time the workers were not in a forward while the pools ran: sending, queueing,
            # returning and the last batches' tail, against the time they were.
            res["forward_s"], res["workers"] = d["forward_s"], workers
            res["overhead"] = round((d["wall_s"] * workers - d["forward_s"]) / d["forward_s"], 4)
    return res


def job_args(protocol: Path, lock: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "job", "run", "--protocol", str(protocol), "--resources", str(lock),
            "--out", str(out), "--ephemeral-key", "--no-progress"]


def sharded_child(protocol: Path, lock: Path, out: Path, result: Path) -> None:
    """Inside the namespace: a 2-CPU head node, the sharded run against it, the cluster stopped."""
    ray = str(Path(sys.executable).parent / "ray")
    log = result.with_suffix(".log")
    subprocess.run([ray, "start", "--head", "--port", str(PORT), "--num-cpus", "2", "--node-ip-address", "127.0.0.1",
                    "--include-dashboard", "false", "--disable-usage-stats"], env=_env(), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    try:
        res = child([*job_args(protocol, lock, out), "--address", f"127.0.0.1:{PORT}", "--worker-cpus", "1"], log)
    finally:
        subprocess.run([ray, "stop", "--force"], env=_env(), check=False, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)
    result.write_text(json.dumps(res))


def _isolated(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip"):
        return ["unshare", "--net", "--pid", "--fork", "--mount-proc", "bash", "-c",
                'ip link set lo up && exec "$@"', "bash", *cmd]
    return cmd


def sharded(work: Path, name: str, protocol: Path, lock: Path) -> dict[str, Any]:
    out, result = work / f"bundle-{name}", work / f"sharded-{name}.json"
    done = subprocess.run(_isolated([sys.executable, str(Path(__file__).resolve()), "--sharded-child",
                                     str(protocol), str(lock), str(out), str(result)]),
                          cwd=REPO, env=_env(), check=False, capture_output=True, text=True)
    if done.returncode != 0 or not result.exists():
        raise SystemExit(f"the sharded run {name} did not finish:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return _figures(json.loads(result.read_text()), out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--small", type=int, default=872)
    ap.add_argument("--model", type=Path, default=STANDIN, help="a DistilBERT classifier folder")
    ap.add_argument("--workdir", type=Path, help="keep the generated files and bundles here")
    ap.add_argument("--json", type=Path, help="write the figures as JSON here")
    ap.add_argument("--sharded-child", nargs=4, type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sharded_child:
        sharded_child(*args.sharded_child)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-sharded-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        model = args.model.resolve()
        labels = ["negative", "positive"]
        large = make_data(work / "data-large" / "validation.parquet", args.rows)
        import pyarrow.parquet as pq

        small = work / "data-small" / "validation.parquet"
        small.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pq.read_table(large).slice(0, args.small), small)
        p_large = make_protocol(work / "protocol-large.json", args.rows, threads=2)
        p_small = make_protocol(work / "protocol-small.json", args.small, threads=2)
        l_large = make_lock(work / "lock-large.json", model, large, args.rows, labels)
        l_small = make_lock(work / "lock-small.json", model, small, args.small, labels)
        single = _figures(child(job_args(p_large, l_large, work / "bundle-single"), work / "single.log"),
                          work / "bundle-single")
        ray_large = sharded(work, "large", p_large, l_large)
        ray_small = sharded(work, "small", p_small, l_small)
        same = all((work / "bundle-single" / rel).read_bytes() == (work / "bundle-large" / rel).read_bytes()
                   for rel in ("data/predictions/calibration.parquet", "data/predictions/audit.parquet"))
    overhead = ray_large["overhead"]
    ratio = ray_large["peak_rss_mb"] / ray_small["peak_rss_mb"]
    print(f"model: {model}; {args.rows} rows (audit {args.rows - 512})")
    print(f"1. single process, 2 threads: wall {single['wall_s']} s, inference {single['inference_s']} s, "
          f"peak RSS {single['peak_rss_mb']} MB")
    print(f"2. local Ray, 2 one-thread workers: wall {ray_large['wall_s']} s, inference {ray_large['inference_s']} s "
          f"({ray_large['forward_s']} s of forwards on the workers); Ray overhead {100 * overhead:.1f}% (worker time "
          f"outside a forward while the pools ran / forward time); predictions byte-identical to 1.: {same}")
    print(f"3. driver peak RSS: {ray_small['peak_rss_mb']} MB at {args.small} rows, {ray_large['peak_rss_mb']} MB at "
          f"{args.rows} rows (ratio {ratio:.3f}); driver time per batch {ray_large['dispatch_ms_per_batch']} ms "
          f"over {ray_large['batches']} batches")
    if args.json is not None:
        args.json.write_text(json.dumps({"single": single, "ray_large": ray_large, "ray_small": ray_small,
                                         "overhead": round(overhead, 4), "rss_ratio": round(ratio, 3),
                                         "identical": same}, indent=2))
    return 0 if single["rc"] == ray_large["rc"] == ray_small["rc"] == 0 and same else 1


if __name__ == "__main__":
    sys.exit(main())
