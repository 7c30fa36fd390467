"""Verify the largest bundles the format's limits allow, and print the verifier's time and peak RSS.

    python scripts/bench_limits.py [--shape wide|long|both] [--workdir DIR] [--scale 1.0]

Each shape is a synthetic bundle at the limits of bundle/FORMAT.md "Limits" (verify/limits.py):
the protocol asks for the most bisection steps (MAX_STEPS) and the most bootstrap resamples the
audit pool allows (MAX_RESAMPLES, MAX_RESAMPLE_CELLS), and each predictions file is as large as
MAX_FILE_BYTES lets it be.

- wide: MAX_CLASSES (1,000) classes, a dataset of MAX_ROWS (100,000) rows, and calibration and
  audit pools of as many rows as a predictions file of 1,000 classes holds (the rest is explore).
- long: MAX_ROWS rows, split evenly between calibration and audit, with as many classes as a
  predictions file of 50,000 rows holds.

No model runs: the logits are seeded random float32 numbers, and every record is written from
them by the job's own stage code (fit, metrics, bootstrap, stability, views), then sealed and
signed with a fresh key. `python -m verify` then runs in a child process started from a small
process (so that ru_maxrss is the verifier's alone) with the bundle's public key, and the script
prints its exit code, wall time and peak RSS. The target (FORMAT.md, "Limits"): exit 0 under
1 GB. --scale shrinks the pools (a quick look; the figures that count are at 1.0). Not a test:
timings depend on the machine."""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle import layout, limits
from bundle.keys import fingerprint, public_key_pem

TARGET_MB = 1024
CELL_BYTES = 4 + 8
"""One logit (float32) and one probability (float64) per row and class in a predictions file."""
ROW_BYTES = 256
"""A predictions row's other columns (idx, two hex digests, label, pred, tokens, truncated,
batch, ~170 bytes) with room for Parquet's own overhead."""


@dataclass(frozen=True)
class Shape:
    name: str
    rows: int  # the dataset's rows (protocol resources.dataset.rows)
    classes: int
    pool: int  # rows of the calibration pool and of the audit pool each


def pool_rows_for(classes: int) -> int:
    """The most rows a predictions file of `classes` classes may hold under MAX_FILE_BYTES."""
    return (limits.MAX_FILE_BYTES - limits.SLACK_BYTES) // (classes * CELL_BYTES + ROW_BYTES)


def classes_for(rows: int) -> int:
    """The most classes a predictions file of `rows` rows may hold under MAX_FILE_BYTES."""
    per_row = (limits.MAX_FILE_BYTES - limits.SLACK_BYTES) // rows
    return min(limits.MAX_CLASSES, (per_row - ROW_BYTES) // CELL_BYTES)


def shapes(scale: float) -> dict[str, Shape]:
    wide_pool = int(pool_rows_for(limits.MAX_CLASSES) * scale)
    long_pool = int(limits.MAX_ROWS // 2 * scale)
    return {
        "wide": Shape("wide", int(limits.MAX_ROWS * scale), limits.MAX_CLASSES, wide_pool),
        "long": Shape("long", 2 * long_pool, classes_for(limits.MAX_ROWS // 2), long_pool),
    }


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def protocol_bytes(shape: Shape) -> bytes:
    """The repository's protocol at the limits: pools, labels, steps and resamples."""
    doc = json.loads((REPO / "provenance.json").read_bytes())
    sizes = {"explore": shape.rows - 2 * shape.pool, "calibration": shape.pool, "audit": shape.pool}
    for pool in doc["split"]["pools"]:
        pool["size"] = sizes[pool["name"]]
    doc["resources"]["dataset"]["rows"] = shape.rows
    doc["resources"]["dataset"]["labels"] = [f"label {j}" for j in range(shape.classes)]
    doc["fit"]["steps"] = limits.MAX_STEPS
    doc["bootstrap"]["resamples"] = min(limits.MAX_RESAMPLES, limits.MAX_RESAMPLE_CELLS // shape.pool)
    doc["stability"]["sizes"] = [m for m in doc["stability"]["sizes"] if m <= shape.pool]
    return (json.dumps(doc, indent=2) + "\n").encode()


def _batches(keys: list[str], tokens: np.ndarray, batch_size: int) -> np.ndarray:
    """The batch of each row: longest first, ties by split key, cut into batch_size (FORMAT.md)."""
    order = sorted(range(len(keys)), key=lambda i: (-int(tokens[i]), keys[i]))
    batch = np.empty(len(keys), dtype=np.int64)
    for position, row in enumerate(order):
        batch[row] = position // batch_size
    return batch


def build(out: Path, key: Ed25519PrivateKey, shape: Shape, seed: int = 0) -> Path:
    """A signed bag at `out` whose records follow from seeded random logits of `shape`."""
    from bundle.predicate import restated_predicate
    from bundle.views.figures import render_figures
    from job.artifacts import Artifacts
    from job.bootstrap import bootstrap_record
    from job.calibration import fit_temperature
    from job.predictions import PoolOutput, Predictions, predictions_table
    from job.protocol import Protocol
    from job.publishing.dates import bagging_date
    from job.publishing.seal import seal
    from job.records import metrics_record, stage_record, temperature_record, trajectory_record
    from job.rocrate import Publication, crate_bytes
    from job.stability import stability_record
    from scripts.payload_report import report_markdown

    rng = np.random.default_rng(seed)
    raw = protocol_bytes(shape)
    protocol = Protocol.from_bytes(raw, json.loads(raw))
    data = out / layout.DATA_DIR
    art = Artifacts(data)
    art.write_bytes(layout.PROTOCOL_JSON, raw)
    dataset_sha = _sha256(b"synthetic dataset %d" % seed)
    resources = {
        "profile": "other", "deviations": ["The logits are synthetic benchmark data, not the pinned model's."],
        "model": {"repo_id": "bench/synthetic", "repo_type": "model", "revision": "local", "source": "local",
                  "files": [{"path": "model.safetensors", "size": 1, "sha256": _sha256(b"m"),
                             "pinned_sha256": None, "pin": "none", "matches_pin": False}]},
        "dataset": {"repo_id": "bench/synthetic", "repo_type": "dataset", "revision": "local", "source": "local",
                    "files": [{"path": "data/validation-00000-of-00001.parquet", "size": 1,
                               "sha256": dataset_sha, "pinned_sha256": dataset_sha, "pin": "none",
                               "matches_pin": True}]}}
    art.write_json(layout.RESOURCES_JSON, resources)
    keyed = sorted((_sha256(f"{protocol.prefix}{i}".encode()), i) for i in range(shape.rows))
    pools: dict[str, list[dict[str, Any]]] = {}
    start = 0
    for name, size in protocol.pool_sizes:
        pools[name] = [{"idx": i, "split_key": k, "text_sha256": _sha256(f"sentence {i}".encode())}
                       for k, i in keyed[start:start + size]]
        start += size
    del keyed
    art.write_json(layout.POOLS_JSON, {
        "protocol_sha256": protocol.sha256, "dataset_sha256": dataset_sha, "prefix": protocol.prefix,
        "pools": pools, "sizes": {name: len(entries) for name, entries in pools.items()}})
    stages = [stage_record(protocol, "split", art.pick(layout.PROTOCOL_JSON, layout.RESOURCES_JSON),
                    art.pick(layout.POOLS_JSON))]
    fit = None
    predictions: dict[str, Predictions] = {}
    for name in ("calibration", "audit"):
        entries, n, k = pools[name], shape.pool, shape.classes
        y = rng.integers(0, k, n)
        z = rng.normal(0.0, 1.0, (n, k)).astype(np.float32)
        z[np.arange(n), y] += (6.0 * rng.uniform(-0.4, 1.0, n)).astype(np.float32)
        tokens = rng.integers(4, 60, n)
        keys = [e["split_key"] for e in entries]
        output = PoolOutput(z, tokens, np.zeros(n, dtype=bool),
                            _batches(keys, tokens, protocol.inference.batch_size), tokens)
        path = layout.PREDICTIONS[name]
        table = predictions_table(np.array([e["idx"] for e in entries]), tuple(keys),
                                  tuple(e["text_sha256"] for e in entries), y, output)
        predictions[name] = Predictions.of_table(name, table, art.write_table(path, table))
        if name == "calibration":
            stages.append(stage_record(protocol, "calibration-inference",
                                art.pick(layout.PROTOCOL_JSON, layout.RESOURCES_JSON, layout.POOLS_JSON),
                                art.pick(path)))
            f = protocol.fit
            fit = fit_temperature(z.astype(np.float64), y.astype(np.int64), f.t_min, f.t_max, f.steps)
            temperature = temperature_record(protocol, fit, n, art.digest(path))
            art.write_json(layout.TEMPERATURE_JSON, temperature)
            art.write_json(layout.TRAJECTORY_JSON, trajectory_record(protocol, fit))
            stages.append(stage_record(protocol, "fit", art.pick(path),
                                art.pick(layout.TEMPERATURE_JSON, layout.TRAJECTORY_JSON)))
        else:
            stages.append(stage_record(protocol, "audit-inference",
                                art.pick(layout.PROTOCOL_JSON, layout.RESOURCES_JSON, layout.POOLS_JSON,
                                         layout.TEMPERATURE_JSON), art.pick(path)))
        del z, output
    assert fit is not None
    del pools
    temperature_sha256 = art.digest(layout.TEMPERATURE_JSON)
    metrics = metrics_record(protocol, predictions, fit.beta, temperature, temperature_sha256)
    metrics_sha256 = art.write_json(layout.METRICS_JSON, metrics)
    stages.append(stage_record(protocol, "metrics", art.pick(layout.TEMPERATURE_JSON, *layout.PREDICTIONS.values()),
                        art.pick(layout.METRICS_JSON)))
    assert protocol.bootstrap is not None and protocol.stability is not None
    cal, audit = predictions["calibration"], predictions["audit"]
    art.write_json(layout.BOOTSTRAP_JSON, bootstrap_record(protocol.bootstrap, protocol.sha256, audit, fit.beta,
                                                           temperature_sha256, metrics_sha256))
    art.write_json(layout.STABILITY_JSON, stability_record(protocol.stability, protocol.fit, protocol.sha256,
                                                           cal, audit, temperature_sha256))
    art.write_json(layout.STAGES_JSON, {"protocol_sha256": protocol.sha256, "stages": stages})
    environment = {
        "python": "3.11", "implementation": "CPython", "platform": "bench", "os": "bench",
        "machine": "x86_64", "cpu_model": None, "logical_cores": 1,
        "packages": {"numpy": np.__version__}, "torch": {"threads": 1},
        "env": {"CALIBRATION_IMAGE": None}, "image": None, "git_commit": None,
        "timings_s": {s["name"]: 1.0 for s in stages},
        "stage_times": [{"stage": s["name"], "start": f"2024-05-07T00:00:0{i}Z", "end": f"2024-05-07T00:00:0{i + 1}Z"}
                        for i, s in enumerate(stages)],
        "peak_rss_mb": 1.0}
    art.write_json(layout.ENVIRONMENT_JSON, environment)
    for rel, png in render_figures(metrics, audit.logits.astype(np.float64), audit.labels).items():
        art.write_bytes(f"{layout.DATA_DIR}/{rel}", png)
    art.write_bytes(layout.REPORT_MD, report_markdown(data).encode("utf-8"))
    art.write_bytes(layout.RO_CRATE_JSON, crate_bytes(
        {layout.data_name(path): facts for path, facts in art.ledger.items()}, protocol=protocol.doc,
        resources=resources, environment=environment, signer_fingerprint=fingerprint(key),
        date_published=bagging_date()))
    predicate = restated_predicate(protocol_sha256=protocol.sha256, resources=resources, temperature=temperature,
                                   temperature_sha256=temperature_sha256, metrics=metrics,
                                   publication=Publication().record())
    seal(out, art.ledger, date=bagging_date(), description="bundle at the format's limits",
         protocol_sha256=protocol.sha256,
         profile="other", predicate=predicate, private_key=key)
    return out


def measure(bag: Path, pub: Path) -> tuple[int, float, float, str]:
    """(exit code, wall seconds, peak RSS in MB, the verifier's output) of `python -m verify`, run
    by a small parent so that the child's ru_maxrss is the verifier's alone."""
    script = ("import os, subprocess, sys, time\n"
              "start = time.perf_counter()\n"
              "child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)\n"
              "out = child.stdout.read()\n"
              "_, status, usage = os.wait4(child.pid, 0)\n"
              "sys.stdout.write(f'{os.waitstatus_to_exitcode(status)} {time.perf_counter() - start} '\n"
              "                 f'{usage.ru_maxrss / 1024}\\n')\n"
              "sys.stdout.write(out.decode('utf-8', 'replace'))\n")
    res = subprocess.run([sys.executable, "-c", script, sys.executable, "-m", "verify", str(bag),
                          "--trusted-key", str(pub)], cwd=REPO, check=True, capture_output=True, text=True)
    head, _, text = res.stdout.partition("\n")
    code, seconds, mb = head.split()
    return int(code), float(seconds), float(mb), text


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=("wide", "long", "both"), default="both")
    p.add_argument("--workdir", type=Path, help="keep the bundles here (default: a temporary folder)")
    p.add_argument("--scale", type=float, default=1.0)
    args = p.parse_args()
    chosen = shapes(args.scale)
    names = ["wide", "long"] if args.shape == "both" else [args.shape]
    worst = 0
    with tempfile.TemporaryDirectory(prefix="bench-limits-") as tmp:
        root = args.workdir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for name in names:
            shape = chosen[name]
            key = Ed25519PrivateKey.generate()
            pub = root / f"{name}.pub.pem"
            pub.write_bytes(public_key_pem(key))
            t = time.perf_counter()
            bag = build(root / name, key, shape)
            built = time.perf_counter() - t
            size = sum(f.stat().st_size for f in (bag / layout.DATA_DIR).rglob("*") if f.is_file())
            code, seconds, mb, text = measure(bag, pub)
            print(f"{name}: {shape.rows:,} dataset rows, calibration and audit {shape.pool:,} rows each, "
                  f"{shape.classes:,} classes, {limits.MAX_STEPS:,} steps, "
                  f"{min(limits.MAX_RESAMPLES, limits.MAX_RESAMPLE_CELLS // shape.pool):,} resamples; "
                  f"payload {size / 2**20:.1f} MiB, built in {built:.0f} s")
            print(f"{name}: verify exit {code}, {seconds:.1f} s, peak RSS {mb:.0f} MB "
                  f"(target under {TARGET_MB} MB)")
            if code != 0:
                print(text, file=sys.stderr)
            worst = max(worst, int(code != 0 or mb >= TARGET_MB))
    return worst


if __name__ == "__main__":
    sys.exit(main())
