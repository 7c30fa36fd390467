"""What re-execution costs: a full reproduction and a `--sample N` spot check of a bundle, against
the inference time of the run that made it, all measured in this one invocation.

    python scripts/bench_reproduce.py [--resources job/resources/standin.json] [--sample 32] [--seed 1]

It runs the job once (`python -m job run`, throwaway key) on the resources of the lock, then
`python -m job reproduce` on that bundle in full and sampled, each in its own process, and prints
wall time, the re-run's inference time (its batches' forwards), the batches run, peak RSS (the
child's ru_maxrss) and the ratios to the original run's inference time (calibration + audit
inference in its data/environment.json). Each
reproduction's verdict is printed too: both must say reproduced. Not a test: timings depend on the
machine."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def measured(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MB, stdout) of a child process; raises when it fails."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
    return wall, usage.ru_maxrss / 1024, out


def child(bundle: Path, out: Path, key: Path, lock: Path, sample: int | None, seed: int | None) -> None:
    """One reproduction in this process, timing its phases; prints them as JSON on the last line."""
    from job import reproduce as r
    from job.protocol import Protocol
    from job.resources import resolve_local

    t0 = time.perf_counter()
    options = r.ReproduceOptions(bundle, out, key, sample=sample, seed=seed, progress=False)
    phases: dict[str, float] = {}
    real_rerun = r.rerun

    def timed_rerun(*args: Any, **kwargs: Any) -> Any:
        phases["before_rerun"] = time.perf_counter() - t0
        t = time.perf_counter()
        found = real_rerun(*args, **kwargs)
        phases["rerun"] = time.perf_counter() - t
        return found

    r.rerun = timed_rerun  # type: ignore[assignment]
    real_batches = r.run_batches
    phases["inference"] = 0.0

    def timed_batches(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        logits = real_batches(*args, **kwargs)
        phases["inference"] += time.perf_counter() - t
        phases["batches"] = phases.get("batches", 0) + len(args[3])
        return logits

    r.run_batches = timed_batches  # type: ignore[assignment]

    def resolve(protocol: Protocol) -> Any:
        return resolve_local(lock, protocol.resources)

    code = r.reproduce(options, resolve)
    phases["total_in_process"] = time.perf_counter() - t0
    print(json.dumps({"code": code, **phases}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=Path, default=REPO / "job" / "resources" / "standin.json")
    parser.add_argument("--sample", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", nargs=6, metavar=("BUNDLE", "OUT", "KEY", "LOCK", "N", "SEED"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        b, o, k, lock, n, s = args.child
        child(Path(b), Path(o), Path(k), Path(lock), None if n == "-" else int(n), None if s == "-" else int(s))
        return 0
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="bench-reproduce-") as tmp:
        bundle = Path(tmp) / "bundle"
        run_wall, run_rss, _ = measured([py, "-m", "job", "run", "--resources", str(args.resources), "--out",
                                         str(bundle), "--ephemeral-key", "--no-progress"])
        env = json.loads((bundle / "data" / "environment.json").read_text())
        infer = env["timings_s"]["calibration-inference"] + env["timings_s"]["audit-inference"]
        load = env["timings_s"]["load-model"]
        key = Path(tmp) / "bundle.key" / "signing-key.pem"  # the throwaway key; any Ed25519 key would do
        rows = []
        for label, n, seed in (("full", "-", "-"), (f"--sample {args.sample}", str(args.sample), str(args.seed))):
            att = Path(tmp) / f"att-{n}.json"
            wall, rss, out = measured([py, __file__, "--child", str(bundle), str(att), str(key),
                                       str(args.resources), n, seed])
            phases = json.loads(out.strip().splitlines()[-1])
            verdict = json.loads(__import__("base64").b64decode(json.loads(att.read_bytes())["payload"]))
            rows.append((label, wall, phases["inference"], rss, verdict["predicate"]["verdict"],
                         verdict["predicate"]["rows"]["compared"], int(phases["batches"])))
    print(f"original run: {run_wall:.1f} s wall, inference {infer:.2f} s (calibration + audit batches), "
          f"model load {load:.2f} s, peak RSS {run_rss:.0f} MB")
    print(f"{'reproduction':<14} {'rows':>5} {'batches':>8} {'wall s':>7} {'infer s':>8} {'wall/inf':>9} "
          f"{'infer/inf':>10} {'peak RSS MB':>12}  verdict")
    for label, wall, inference, rss, verdict, compared, batches in rows:
        print(f"{label:<14} {compared:>5} {batches:>8} {wall:>7.1f} {inference:>8.2f} {wall / infer:>9.2f} "
              f"{inference / infer:>10.2f} {rss:>12.0f}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
