"""Time and peak memory of the verifier on hostile bundles, beside a genuine one.

python -m tests.verify.bench_hostile [--scale 1.0] [--bag BAG --key signing-key.pem]

Builds every class of tests/verify/tamper.py HOSTILE from a genuine bag (the synthetic bundle
with the protocol's sizes unless --bag and its signing --key are given), runs
`python -m verify` on each in a child process with the trusted key, and prints the exit code,
the wall time and the child's peak RSS (ru_maxrss). Targets (FORMAT.md, Limits): every
rejection under 2 s and 300 MB; the genuine bundle as fast as before."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle.keys import public_key_pem
from job.publishing.signing_keys import load_private_key
from tests.synthetic import make_bundle
from tests.verify.tamper import HOSTILE, Keys, copy_bag

_MEASURE = """import os, subprocess, sys, time
start = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = child.stderr.read()
_, status, usage = os.wait4(child.pid, 0)
print(os.waitstatus_to_exitcode(status), time.perf_counter() - start, usage.ru_maxrss / 1024,
      int(b"Traceback" in err), usage.ru_utime + usage.ru_stime)
"""
"""Runs the verifier from a small, freshly started process: Linux carries a parent's peak RSS
into a forked child's ru_maxrss, so a child of this (large) process would report our peak."""


def run(target: Path, pub: Path) -> tuple[int, float, float, float]:
    """(exit code, wall seconds, CPU seconds, peak RSS in MB) of one verification in a child
    process. CPU time (user + system) is what a busy machine does not inflate."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, sys.executable, "-m", "verify",
                          str(target), "--trusted-key", str(pub)], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.split()
    if out[3] != "0":
        print(f"a traceback reached stderr for {target}", file=sys.stderr)
    return int(out[0]), float(out[1]), float(out[4]), float(out[2])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--bag", type=Path)
    p.add_argument("--key", type=Path)
    p.add_argument("--only", nargs="*", default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp:
        work = Path(tmp)
        if args.bag is not None:
            real = load_private_key(args.key)
            genuine = args.bag
        else:
            real = Ed25519PrivateKey.generate()
            genuine = make_bundle(work / "genuine" / "bag", real, sizes=None)
        keys = Keys(real, Ed25519PrivateKey.generate())
        pub = work / "signer.pub.pem"
        pub.write_bytes(public_key_pem(real))
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"{'bundle':<26} {'exit':>4} {'wall s':>7} {'CPU s':>6} {'peak MB':>8}")
        code, wall, cpu, rss = run(genuine, pub)
        print(f"{'genuine':<26} {code:>4} {wall:>7.2f} {cpu:>6.2f} {rss:>8.0f}", flush=True)
        rejections: list[tuple[str, int, float, float, float]] = []
        for name, build in HOSTILE.items():
            if args.only and name not in args.only:
                continue
            target = build(copy_bag(genuine, work / name / "bag"), keys, args.scale)
            code, wall, cpu, rss = run(target, pub)
            rejections.append((name, code, wall, cpu, rss))
            print(f"{name:<26} {code:>4} {wall:>7.2f} {cpu:>6.2f} {rss:>8.0f}", flush=True)
            shutil.rmtree(work / name)
    if not rejections:
        return 0
    slowest = max(rejections, key=lambda r: r[2])
    busiest = max(rejections, key=lambda r: r[3])
    largest = max(rejections, key=lambda r: r[4])
    accepted = [r[0] for r in rejections if r[1] in (0, 3)]
    met = busiest[3] < 2 and largest[4] < 300
    print(f"slowest rejection: {slowest[0]} {slowest[2]:.2f} s wall, {busiest[0]} {busiest[3]:.2f} "
          f"s CPU; largest: {largest[0]} {largest[4]:.0f} MB; targets 2 s and 300 MB "
          f"{'met' if met else 'NOT met'} (CPU time; wall time on a quiet machine)")
    if accepted:
        print(f"ACCEPTED (should be rejected): {', '.join(accepted)}")
    return 1 if accepted or not met else 0


if __name__ == "__main__":
    sys.exit(main())
