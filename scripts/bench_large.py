"""Peak memory of `python -m job run` on a small and a large split, and the verifier's time on the large bundle.

    python -m scripts.bench_large [--rows 50000] [--small 872] [--model DIR] [--workdir DIR] [--json OUT.json]

It generates a dataset of `--rows` random short sentences (Parquet, 2 labels, fixed seed) and, unless
`--model` names a DistilBERT-layout classifier folder (e.g. ../shared/fixtures/distilbert-minilm-sst2),
a tiny generated DistilBERT (scripts/generated_split.py). The small run reads the first `--small` rows of the same
data with the same model. Both use the repository's protocol with pools explore 256, calibration 256 and
audit the rest, and its bootstrap and stability sections. Each run is a child process; its peak RSS is
the kernel's high-water mark (wait4). The verifier runs as `python -m verify` in a child process (wall
time, imports included) and in this process after imports. Not a test: figures depend on the machine."""

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

from scripts.generated_split import make_data, make_lock, make_model, make_protocol

REPO = Path(__file__).resolve().parents[1]

def child(cmd: list[str], log: Path) -> dict[str, Any]:
    """Run cmd; exit status, wall seconds and the kernel's peak RSS of the child in MB."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    with log.open("wb") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    return {"rc": os.waitstatus_to_exitcode(status), "wall_s": round(time.perf_counter() - t0, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


def job_run(work: Path, name: str, model: Path, data: Path, rows: int) -> dict[str, Any]:
    protocol = make_protocol(work / f"protocol-{name}.json", rows)
    lock = make_lock(work / f"lock-{name}.json", model, data, rows, ["negative", "positive"])
    out = work / f"bundle-{name}"
    res = child([sys.executable, "-m", "job", "run", "--protocol", str(protocol), "--resources", str(lock),
                 "--out", str(out), "--ephemeral-key", "--no-progress"], work / f"run-{name}.log")
    res.update(rows=rows, bundle=out)
    env = out / "data" / "environment.json"
    if env.is_file():
        timings = json.loads(env.read_text())["timings_s"]
        res["inference_s"] = round(timings["calibration-inference"] + timings["audit-inference"], 2)
    return res


def verify_times(bundle: Path) -> dict[str, Any]:
    """`python -m verify` wall time (a child, imports included) and one in-process run after imports."""
    from verify.api import verify_path
    from verify.context import Trust

    pub = bundle.parent / f"{bundle.name}.key" / "signing-key.pub.pem"
    cli = child([sys.executable, "-m", "verify", str(bundle), "--trusted-key", str(pub)],
                bundle.parent / "verify.log")
    t0 = time.perf_counter()
    result = verify_path(bundle, Trust())
    failed = [c.id for c in result.checks if c.status != "pass" and c.id != "signature.signer-trusted"]
    return {"cli_rc": cli["rc"], "cli_wall_s": cli["wall_s"], "cli_peak_rss_mb": cli["peak_rss_mb"],
            "in_process_s": round(time.perf_counter() - t0, 2), "failed_checks": failed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--small", type=int, default=872)
    ap.add_argument("--model", type=Path, help="a DistilBERT classifier folder (default: a generated tiny one)")
    ap.add_argument("--workdir", type=Path, help="keep the generated files and bundles here")
    ap.add_argument("--json", type=Path, help="write the figures as JSON here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-large-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.model is None:
            model = make_model(work / "model")
        else:
            model = args.model.resolve()
        large = make_data(work / "data-large" / "validation.parquet", args.rows)
        import pyarrow.parquet as pq

        small = work / "data-small" / "validation.parquet"
        small.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pq.read_table(large).slice(0, args.small), small)
        runs = [job_run(work, "small", model, small, args.small), job_run(work, "large", model, large, args.rows)]
        verify = verify_times(runs[1]["bundle"]) if runs[1]["rc"] == 0 else None
        print(f"model: {model if args.model else 'generated tiny DistilBERT (2 layers, dim 32)'}")
        print(f"{'rows':>8} {'rc':>3} {'wall s':>8} {'inference s':>12} {'peak RSS MB':>12}")
        for r in runs:
            print(f"{r['rows']:>8} {r['rc']:>3} {r['wall_s']:>8} {r.get('inference_s', '-'):>12} "
                  f"{r['peak_rss_mb']:>12}")
        ratio = runs[1]["peak_rss_mb"] / runs[0]["peak_rss_mb"]
        print(f"peak RSS large / small: {ratio:.3f}")
        if verify is not None:
            print(f"verifier on the {args.rows}-row bundle: {verify['cli_wall_s']} s wall (python -m verify, exit "
                  f"{verify['cli_rc']}, peak RSS {verify['cli_peak_rss_mb']} MB), {verify['in_process_s']} s in "
                  f"process after imports; failed checks: {verify['failed_checks'] or 'none'}")
        if args.json is not None:
            args.json.write_text(json.dumps({"runs": [{k: v for k, v in r.items() if k != "bundle"} for r in runs],
                                             "rss_ratio": round(ratio, 3), "verify": verify}, indent=2))
    return 0 if all(r["rc"] == 0 for r in runs) and verify is not None and verify["cli_rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
