#!/usr/bin/env python3
"""How often each nominal 95% interval of a run covers the truth, on pools simulated from a known model.

    .venv/bin/python scripts/bench_coverage.py [--reps 200] [--n 360] [--resamples 2000] [--beta 0.6]

The model (K = 2): a row's logit gap s ~ Normal(1.5, 2); the predicted class is the sign of s and
its top-label confidence sigmoid(|s|); it is right with probability sigmoid(a |s|). Two worlds:
`calibrated` (a = 1: the raw probabilities are the truth) and `overconfident` (a = --beta: the raw
probabilities are too sure, and the calibrated ones, softmax(beta z), are the truth). Each
replicate draws a pool of --n rows (the formal audit pool's 360 by default), runs the job's own
interval code exactly as a run does (job.estimators with the formal protocol's estimators and
bootstrap seed offset per replicate, job.bootstrap.paired_bootstrap), and records whether each
interval holds the truth: the same estimator (or metric difference) on one simulated pool of
--truth-n rows, which stands in for its population value. A Clopper-Pearson bin interval covers
when it holds the true accuracy of its bin (mean of sigmoid(a |s|) over the truth pool's rows in
that bin). Prints one line per interval: its coverage and the Monte-Carlo standard error.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from job.bootstrap import METRICS, paired_bootstrap
from job.calibration import softmax
from job.estimator_spec import DEFAULT_ESTIMATORS, parse_estimators
from job.estimators import bin_intervals, estimator_results, scorer
from job.metrics import bin_index, compute_metrics


def simulate(n: int, a: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(logits (n, 2), labels, true probability that each row's prediction is right)."""
    s = rng.normal(1.5, 2.0, size=n)
    z = np.stack([np.zeros(n), s], axis=1).astype(np.float32).astype(np.float64)
    pred = (s > 0).astype(np.int64)
    truth = 1.0 / (1.0 + np.exp(-a * np.abs(s)))
    right = rng.random(n) < truth
    return z, np.where(right, pred, 1 - pred), truth


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--n", type=int, default=360)
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--truth-n", type=int, default=400_000)
    ap.add_argument("--beta", type=float, default=0.6)
    args = ap.parse_args()
    specs = tuple(s for s in parse_estimators(DEFAULT_ESTIMATORS, True) if s.interval is not None)
    level = next(s for s in parse_estimators(DEFAULT_ESTIMATORS, True) if s.kind == "bin-intervals").level
    print(f"n = {args.n}, {args.reps} replicates, {args.resamples} resamples, truth from {args.truth_n:,} rows")
    for world, a in (("calibrated", 1.0), ("overconfident", args.beta)):
        beta = a  # the temperature that makes the calibrated probabilities the truth
        rng = np.random.default_rng(20261202)
        big_z, big_y, big_truth = simulate(args.truth_n, a, rng)
        big_pred = big_z.argmax(axis=1)
        truth: dict[str, float | None] = {}
        for scale, b in (("raw", 1.0), ("calibrated", beta)):
            p = softmax(b * big_z)
            for spec in specs:
                truth[f"{spec.id} {scale}"] = scorer(spec)(p, big_y, big_pred)
        raw_m, cal_m = compute_metrics(big_z, big_y, 1.0, 0.9), compute_metrics(big_z, big_y, beta, 0.9)
        for m in METRICS:
            truth[f"bootstrap {m} difference"] = cal_m[m] - raw_m[m]
        bins_truth = {}
        for scale, b in (("raw", 1.0), ("calibrated", beta)):
            which = bin_index(softmax(b * big_z)[np.arange(len(big_y)), big_pred])
            bins_truth[scale] = np.array([big_truth[which == k].mean() if np.any(which == k) else np.nan
                                          for k in range(10)])
        hits: dict[str, list[bool]] = {}
        started = time.perf_counter()
        for rep in range(args.reps):
            z, y, _ = simulate(args.n, a, rng)
            results = estimator_results(specs, z, y, beta, args.resamples, 1000 + rep)
            for spec in specs:
                for scale in ("raw", "calibrated"):
                    interval, target = results[spec.id][scale]["interval"], truth[f"{spec.id} {scale}"]
                    if interval is not None and target is not None:
                        covered = interval["lower"] <= target <= interval["upper"]
                        hits.setdefault(f"{spec.id} {scale}", []).append(covered)
            boot = paired_bootstrap(z, y, beta, resamples=args.resamples, seed=1000 + rep)
            for m in METRICS:
                hits.setdefault(f"bootstrap {m} difference", []).append(
                    boot.lower[m] <= truth[f"bootstrap {m} difference"] <= boot.upper[m])
            pred = z.argmax(axis=1)
            for scale, b in (("raw", 1.0), ("calibrated", beta)):
                conf = softmax(b * z)[np.arange(len(y)), pred]
                for k, entry in enumerate(bin_intervals(conf, (pred == y) * 1.0, level)):
                    if entry["count"] and not np.isnan(bins_truth[scale][k]):
                        hits.setdefault(f"clopper-pearson bins {scale}", []).append(
                            entry["lower"] <= bins_truth[scale][k] <= entry["upper"])
        print(f"\n{world} world (a = {a}), {time.perf_counter() - started:.0f} s:")
        for key in sorted(hits):
            h = np.array(hits[key], dtype=float)
            se = np.sqrt(h.mean() * (1 - h.mean()) / len(h))
            target = truth.get(key)
            shown = f"truth {target:.4f}" if isinstance(target, float) else "truth per bin"
            print(f"  {key:<36} coverage {h.mean():6.1%} +- {se:.1%}  ({len(h)} intervals; {shown})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
