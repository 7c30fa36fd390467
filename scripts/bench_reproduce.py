"""What re-execution costs and how far honest arithmetic moves the logits, all measured in one run.

    python scripts/bench_reproduce.py [--resources job/locks/standin.json] [--sample 32] [--seed 1]
                                      [--quick]

It runs the job once (`python -m job run`, throwaway key) on the resources of the lock, then
`python -m job reproduce` on that bundle, each reproduction in its own process:

1. cost: a full reproduction and a `--sample N --seed S` spot check (whole recorded batches), with
   wall time, the re-run's inference time (its batches' forwards), the batches run, peak RSS (the
   child's ru_maxrss), and the sampled/full ratio of inference time;
2. honest differences: a full reproduction under each ISA limit (`ONEDNN_MAX_CPU_ISA`,
   `ATEN_CPU_CAPABILITY`) and at 1, 2 and 4 threads, with its verdict, rows bit-identical and
   the largest absolute difference and ulps (skipped with --quick);
3. the smallest edits that matter, on the bundle's own logits: the smallest change of one logit
   that flips a prediction (half the smallest top-two margin), and the smallest amplitude of a
   seeded +-eps change of every logit that moves a published figure at its published precision
   (bisected over powers of two, recomputed with the job's own stages);

then the pre-registered tolerance and its margins to both. Not a test: timings depend on the machine."""

from __future__ import annotations

import argparse
import dataclasses
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

ISA_SETTINGS = (
    ("default", {}),
    ("ONEDNN_MAX_CPU_ISA=AVX2", {"ONEDNN_MAX_CPU_ISA": "AVX2"}),
    ("ATEN_CPU_CAPABILITY=avx2", {"ATEN_CPU_CAPABILITY": "avx2"}),
    ("ATEN_CPU_CAPABILITY=default", {"ATEN_CPU_CAPABILITY": "default"}),
    ("both AVX2", {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}),
)
THREADS = (1, 2, 4)


def measured(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MB, stdout) of a child process; raises when it fails."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
    return wall, usage.ru_maxrss / 1024, out


def child(bundle: Path, out: Path, key: Path, lock: Path, sample: int | None, seed: int | None,
          threads: int | None) -> None:
    """One reproduction in this process, timing its phases; prints them as JSON on the last line.
    `threads` overrides the protocol's torch_threads (a measurement of honest differences only)."""
    from job import engines, runtime
    from job import reproduce as r
    from job.protocol import Protocol
    from job.resources import resolve_local

    if threads is not None:
        pinned = runtime.Settings.from_protocol

        def with_threads(inference: Any, count: int | None = None, layout: str = runtime.BATCHES) -> runtime.Settings:
            return dataclasses.replace(pinned(inference, count, layout), threads=threads)

        runtime.Settings.from_protocol = with_threads  # type: ignore[method-assign]
    t0 = time.perf_counter()
    options = r.ReproduceOptions(bundle, out, key, sample=sample, seed=seed, progress=False)
    phases: dict[str, float] = {"inference": 0.0, "batches": 0}
    real_batches = engines.run_batches  # what the local engine runs each pool's batches with

    def timed_batches(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        logits = real_batches(*args, **kwargs)
        phases["inference"] += time.perf_counter() - t
        phases["batches"] += len(args[3])
        return logits

    engines.run_batches = timed_batches  # type: ignore[assignment]

    def resolve(protocol: Protocol) -> Any:
        return resolve_local(lock, protocol.resources)

    code = r.reproduce(options, resolve)
    phases["total_in_process"] = time.perf_counter() - t0
    print(json.dumps({"code": code, **phases}))


def predicate(att: Path) -> dict[str, Any]:
    from bundle.dsse import Envelope

    return json.loads(Envelope.from_json(att.read_bytes()).payload)["predicate"]  # type: ignore[no-any-return]


def smallest_edits(bundle: Path) -> tuple[float, float, float]:
    """(smallest top-two margin / 2, smallest +-eps amplitude that moves a published figure, the
    largest amplitude tried that moved none) on the bundle's own logits and labels."""
    import numpy as np

    from bundle import layout
    from job.reproduce import bundle_protocol, figures_of
    from job.verified_bundle import load_verified

    vb = load_verified(bundle)
    protocol = bundle_protocol(vb)
    pools = {n: vb.pool(n) for n in layout.REPRODUCTION_POOLS}
    margins = []
    for pool in pools.values():
        top2 = np.sort(pool.logits.astype(np.float64), axis=1)[:, -2:]
        margins.append(float((top2[:, 1] - top2[:, 0]).min()))
    flip = min(margins) / 2
    rng = np.random.default_rng(0)
    signs = {n: rng.choice([-1.0, 1.0], size=p.logits.shape) for n, p in pools.items()}

    def moves(eps: float) -> bool:
        logits = {n: (p.logits.astype(np.float64) + eps * signs[n]).astype(np.float32) for n, p in pools.items()}
        return int(figures_of(vb, protocol, logits, {n: p.label for n, p in pools.items()})["changed"]) > 0

    lo, hi = 2.0 ** -30, 2.0 ** -30
    while not moves(hi):
        lo, hi = hi, hi * 2
    for _ in range(6):  # to within 2 ** (1/64) of the boundary
        mid = (lo * hi) ** 0.5
        lo, hi = (lo, mid) if moves(mid) else (mid, hi)
    return flip, hi, lo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=Path, default=REPO / "job" / "locks" / "standin.json")
    parser.add_argument("--sample", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="cost only: no ISA or thread runs")
    parser.add_argument("--child", nargs=7, metavar=("BUNDLE", "OUT", "KEY", "LOCK", "N", "SEED", "THREADS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        b, o, k, lock, n, s, t = args.child
        child(Path(b), Path(o), Path(k), Path(lock), None if n == "-" else int(n), None if s == "-" else int(s),
              None if t == "-" else int(t))
        return 0
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="bench-reproduce-") as tmp:
        bundle = Path(tmp) / "bundle"
        run_wall, run_rss, _ = measured([py, "-m", "job", "run", "--resources", str(args.resources), "--out",
                                         str(bundle), "--ephemeral-key", "--no-progress"])
        env = json.loads((bundle / "data" / "environment.json").read_text())
        infer = env["timings_s"]["calibration-inference"] + env["timings_s"]["audit-inference"]
        key = Path(tmp) / "bundle.key" / "signing-key.pem"  # the throwaway key; any Ed25519 key would do

        def reproduce(label: str, n: str = "-", seed: str = "-", threads: str = "-",
                      isa: dict[str, str] | None = None) -> dict[str, Any]:
            att = Path(tmp) / f"att-{len(os.listdir(tmp))}.json"
            wall, rss, out = measured([py, __file__, "--child", str(bundle), str(att), str(key),
                                       str(args.resources), n, seed, threads], isa)
            phases = json.loads(out.strip().splitlines()[-1])
            return {"label": label, "wall": wall, "rss": rss, "phases": phases, "p": predicate(att)}

        full = reproduce("full")
        sampled = reproduce(f"--sample {args.sample}", str(args.sample), str(args.seed))
        honest = [] if args.quick else (
            [reproduce(label, isa=isa) for label, isa in ISA_SETTINGS[1:]]
            + [reproduce(f"{t} threads", threads=str(t)) for t in THREADS])
        flip, moved, unmoved = smallest_edits(bundle)
    tolerance = full["p"]["tolerance"]["abs"]
    print(f"original run: {run_wall:.1f} s wall, inference {infer:.2f} s (calibration + audit batches), "
          f"peak RSS {run_rss:.0f} MB; {env.get('arithmetic', {}).get('cpu_model')}")
    print(f"{'reproduction':<14} {'rows':>5} {'batches':>8} {'wall s':>7} {'infer s':>8} {'peak RSS MB':>12}  verdict")
    for r in (full, sampled):
        print(f"{r['label']:<14} {r['p']['rows']['compared']:>5} {int(r['phases']['batches']):>8} {r['wall']:>7.1f} "
              f"{r['phases']['inference']:>8.2f} {r['rss']:>12.0f}  {r['p']['verdict']}")
    ratio = sampled["phases"]["inference"] / full["phases"]["inference"]
    print(f"sampled / full inference: {ratio:.3f} ({int(sampled['phases']['batches'])} of "
          f"{int(full['phases']['batches'])} batches); wall {sampled['wall'] / full['wall']:.2f}")
    worst = 0.0
    if honest:
        print(f"\n{'honest setting':<28} {'identical':>10} {'largest abs':>12} {'ulps':>6} {'figures moved':>14}"
              "  verdict")
        for r in [full, *honest]:
            p = r["p"]
            label = "default (as signed)" if r is full else r["label"]
            worst = max(worst, p["largest_difference"]["abs"])
            moved_here = f"{p['figures']['changed']} of {p['figures']['compared']}"
            print(f"{label:<28} {p['rows']['identical']:>4} / {p['rows']['compared']:<4} "
                  f"{p['largest_difference']['abs']:>12.3g} {p['largest_difference']['ulps']:>6} {moved_here:>14}"
                  f"  {p['verdict']}")
            for c in p["figures"]["listed"][:3]:
                print(f"{'':<30}{c['figure']}: {c['from']} -> {c['to']}")
    print(f"\nsmallest edit of one logit that flips a prediction: {flip:.3g} (half the smallest top-two margin)")
    print(f"smallest +-eps on every logit that moves a published figure: {moved:.3g} (none moved at {unmoved:.3g})")
    print(f"tolerance {tolerance:g}: {tolerance / worst:.0f}x the largest honest difference, "
          f"{flip / tolerance:.0f}x below the smallest prediction flip" if worst else
          f"tolerance {tolerance:g}: {flip / tolerance:.0f}x below the smallest prediction flip")
    if worst and moved < worst:
        print(f"  figures published at 6 decimals move with edits ({moved:.3g}) smaller than honest differences "
              f"({worst:.3g}): they are recomputed and listed by every full reproduction, not used for the verdict")
    return 0


if __name__ == "__main__":
    sys.exit(main())
