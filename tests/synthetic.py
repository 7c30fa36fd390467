"""Synthetic payloads and bundles that follow bundle/FORMAT.md, for the tests of every package.

Contract: `write_payload(data)` writes a complete, mutually consistent, schema-valid payload into
the folder `data` (a bag's data/, created here; it must not exist): the protocol (the repository's
provenance.json with the pool sizes given, or the bytes given), resources of profile `other`,
pools, Parquet predictions of seeded random float32 logits, and every record computed from them;
then the derived files (figures, report.md, ro-crate-metadata.json) written by the job's own
modules, so that a verifier checking them is checked against what the job produces. The same
arguments give the same bytes. `make_bundle(out, key)` seals and signs such a payload with
job.publishing.seal.seal. No model runs, so a full-size bundle (sizes=None) takes about a second.

The payload uses its own straightforward bisection and softmax; its metrics come from
verify.numerics, whose correctness is tested separately against brute force, and its estimators
from verify.estimators, tested against the reference libraries
(tests/job/test_estimator_references.py)."""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle.canonical import dumps
from bundle.keys import fingerprint
from bundle.layout import DEFAULT_LOGIT_TOLERANCE
from bundle.memo import memoized
from job.perclass import class_warnings, per_class
from job.plausibility import run_warnings
from job.tolerance_bounds import reproduction_bounds
from tests.payload import crate_bytes_of, figures_of, seal_payload
from verify import estimators, numerics

REPO = Path(__file__).resolve().parent.parent
CAL, AUDIT = "calibration", "audit"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def protocol_bytes(sizes: tuple[int, int, int] | None) -> bytes:
    raw = (REPO / "provenance.json").read_bytes()
    if sizes is None:
        return raw
    doc = json.loads(raw)
    for pool, size in zip(doc["split"]["pools"], sizes, strict=True):
        pool["size"] = size
    doc["resources"]["dataset"]["rows"] = sum(sizes)
    return (json.dumps(doc, indent=2) + "\n").encode()


def _softmax(z: np.ndarray, beta: float) -> np.ndarray:
    s = beta * z
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _g(z: np.ndarray, y: np.ndarray, beta: float) -> float:
    p = _softmax(z, beta)
    return float(np.mean((p * z).sum(axis=1) - z[np.arange(len(y)), y]))


def bisect(z: np.ndarray, y: np.ndarray, t_min: float, t_max: float,
           steps: int) -> dict[str, Any]:
    """The protocol's bisection on beta, written plainly from FORMAT.md."""
    lo, hi = 1.0 / t_max, 1.0 / t_min
    g_lo, g_hi = _g(z, y, lo), _g(z, y, hi)
    out: dict[str, Any] = {"beta_min": lo, "beta_max": hi, "g_at_beta_min": g_lo,
                           "g_at_beta_max": g_hi, "steps": []}
    if g_lo >= 0:
        out.update(beta=lo, boundary_side="t_max", bracket=[lo, lo])
        return out
    if g_hi <= 0:
        out.update(beta=hi, boundary_side="t_min", bracket=[hi, hi])
        return out
    for step in range(1, steps + 1):
        mid = (lo + hi) / 2
        g = _g(z, y, mid)
        out["steps"].append({"step": step, "lo": lo, "hi": hi, "mid": mid, "g": g})
        if g > 0:
            hi = mid
        else:
            lo = mid
    out.update(beta=(lo + hi) / 2, boundary_side=None, bracket=[lo, hi])
    return out


def _write_json(data: Path, rel: str, doc: Any) -> str:
    raw = dumps(doc)
    path = data / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    return sha256(raw)


def _parquet(entries: list[dict[str, Any]], z32: np.ndarray, y: np.ndarray,
             tokens: np.ndarray, batch_size: int) -> bytes:
    k = z32.shape[1]
    prob = _softmax(z32.astype(np.float64), 1.0)
    order = sorted(range(len(entries)), key=lambda i: (-int(tokens[i]), entries[i]["split_key"]))
    batch = np.empty(len(entries), dtype=np.int32)
    for position, row in enumerate(order):
        batch[row] = position // batch_size
    cols: dict[str, pa.Array] = {
        "idx": pa.array([e["idx"] for e in entries], pa.int32()),
        "split_key": pa.array([e["split_key"] for e in entries], pa.string()),
        "text_sha256": pa.array([e["text_sha256"] for e in entries], pa.string()),
        "label": pa.array(y, pa.int64()),
    }
    for i in range(k):
        cols[f"logit_{i}"] = pa.array(z32[:, i], pa.float32())
    for i in range(k):
        cols[f"prob_{i}"] = pa.array(prob[:, i], pa.float64())
    cols["pred"] = pa.array(np.argmax(z32, axis=1), pa.int64())
    cols["token_count"] = pa.array(tokens, pa.int32())
    cols["truncated"] = pa.array(np.zeros(len(entries), dtype=bool), pa.bool_())
    cols["batch"] = pa.array(batch, pa.int32())
    cols["full_token_count"] = pa.array(tokens, pa.int32())
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table(cols), sink, compression="zstd", use_dictionary=False,
                   write_statistics=False)
    return sink.getvalue().to_pybytes()


def write_payload(data: Path, *, sizes: tuple[int, int, int] | None = (8, 40, 40),
                  protocol: bytes | None = None, profile: str = "other", seed: int = 0,
                  scale: float = 6.0, fixed_beta: float | None = None,
                  signer_fingerprint: str | None = None, relabel: list[int] | None = None) -> str:
    """Write a complete FORMAT.md payload into `data`; return the protocol's sha256.

    The protocol is `protocol` byte for byte when given, else the repository's with the pool
    sizes `sizes` (None: unchanged); its optional sections decide whether bootstrap.json and
    stability.json are written. `profile` is what resources.json records (the bag must be sealed
    with the same); `seed` and `scale` shape the random logits; `fixed_beta` replaces the fitted
    beta (a payload whose temperature does not follow from its logits); `relabel` stores label
    relabel[y] for a row the model gets as y (the data's names in another order than the model's)."""
    rng = np.random.default_rng(seed)
    proto_raw = protocol_bytes(sizes) if protocol is None else protocol
    protocol = json.loads(proto_raw)
    psha = sha256(proto_raw)
    data.mkdir(parents=True)
    (data / "protocol.json").write_bytes(proto_raw)
    k = len(protocol["resources"]["dataset"]["labels"])
    rows = protocol["resources"]["dataset"]["rows"]
    dataset_sha = sha256(b"synthetic dataset %d" % seed)
    resources = {
        "profile": profile,
        "deviations": [] if profile == "formal" else
        ["The logits are synthetic test data, not the pinned model's."],
        "model": {"repo_id": "test/synthetic", "repo_type": "model", "revision": "local",
                  "source": "local", "revision_checked_by_hub": False,
                  "files": [{"path": "model.safetensors", "size": 1, "sha256": sha256(b"m"),
                             "pinned_sha256": None, "pin": "none", "matches_pin": False}]},
        "dataset": {"repo_id": "test/synthetic-sst2", "repo_type": "dataset", "revision": "local",
                    "source": "local", "revision_checked_by_hub": False,
                    "files": [{"path": "data/validation-00000-of-00001.parquet", "size": 1,
                               "sha256": dataset_sha, "pinned_sha256": dataset_sha,
                               "pin": "none", "matches_pin": True}]},
    }
    prefix = protocol["split"]["prefix"]
    keyed = sorted((sha256(f"{prefix}{i}".encode()), i) for i in range(rows))
    pools: dict[str, list[dict[str, Any]]] = {}
    start = 0
    for spec in protocol["split"]["pools"]:
        pools[spec["name"]] = [{"idx": i, "split_key": key,
                                "text_sha256": sha256(f"sentence {i}".encode())}
                               for key, i in keyed[start:start + spec["size"]]]
        start += spec["size"]
    digests: dict[str, str] = {"protocol.json": psha}
    digests["resources.json"] = _write_json(data, "resources.json", resources)
    digests["pools.json"] = _write_json(data, "pools.json", {
        "protocol_sha256": psha, "dataset_sha256": dataset_sha, "prefix": prefix, "pools": pools,
        "sizes": {name: len(entries) for name, entries in pools.items()}})
    arrays = {}
    longest = {}
    batch_size = protocol["inference"]["batch_size"]
    for name in (CAL, AUDIT):
        n = len(pools[name])
        y = rng.integers(0, k, n)
        z = rng.normal(0.0, 1.0, (n, k)) * 0.5
        z[np.arange(n), y] += scale * rng.uniform(-0.4, 1.0, n)  # confident, sometimes wrong
        if relabel is not None:
            y = np.asarray(relabel)[y]
        z32 = z.astype(np.float32)
        tokens = rng.integers(4, 60, n)
        raw = _parquet(pools[name], z32, y, tokens, batch_size)
        (data / "predictions").mkdir(exist_ok=True)
        (data / "predictions" / f"{name}.parquet").write_bytes(raw)
        digests[f"predictions/{name}.parquet"] = sha256(raw)
        arrays[name] = (z32.astype(np.float64), y.astype(np.int64))
        longest[name] = int(tokens.max())
    fit = protocol["fit"]
    z, y = arrays[CAL]
    b = bisect(z, y, fit["t_min"], fit["t_max"], fit["steps"])
    beta = b["beta"] if fixed_beta is None else fixed_beta
    temperature = {
        "protocol_sha256": psha, "pool": CAL, "n": len(y),
        "predictions_sha256": digests[f"predictions/{CAL}.parquet"],
        "temperature": 1.0 / beta, "beta": beta, "t_min": fit["t_min"], "t_max": fit["t_max"],
        "steps": len(b["steps"]), "boundary": b["boundary_side"] is not None,
        "boundary_side": b["boundary_side"], "final_gradient": _g(z, y, beta),
        "bracket": b["bracket"], "nll_before": numerics.mean_nll(z, y, 1.0),
        "nll_after": numerics.mean_nll(z, y, beta)}
    digests["temperature.json"] = _write_json(data, "temperature.json", temperature)
    digests["trajectory.json"] = _write_json(data, "trajectory.json", {
        "protocol_sha256": psha, **{k2: b[k2] for k2 in ("beta_min", "beta_max", "g_at_beta_min",
                                                         "g_at_beta_max", "steps")}})
    threshold = protocol["metrics"]["threshold"]["value"]
    metrics = {
        "protocol_sha256": psha, "temperature_sha256": digests["temperature.json"], "beta": beta,
        "temperature": 1.0 / beta, "argmax_unchanged": True,
        "pools": {name: {"role": "evidence" if name == AUDIT else "fit pool, not evidence",
                         "predictions_sha256": digests[f"predictions/{name}.parquet"],
                         "raw": numerics.metric_set(*arrays[name], 1.0, threshold),
                         "calibrated": numerics.metric_set(*arrays[name], beta, threshold)}
                  for name in (AUDIT, CAL)}}
    max_length = protocol["inference"]["max_length"]
    metrics["per_class"] = {name: per_class(*arrays[name]) for name in (AUDIT, CAL)}
    metrics["warnings"] = (run_warnings(metrics["pools"][AUDIT]["raw"]["accuracy"], k, temperature)
                           + class_warnings(metrics["per_class"][AUDIT]))
    section = protocol.get("reproduction")
    tau, source = ((section["logit_tolerance"], "protocol") if section else (DEFAULT_LOGIT_TOLERANCE, "format default"))
    metrics["reproduction_bounds"] = reproduction_bounds(
        arrays, metrics["pools"], beta, tau, source,
        {"beta_min": 1 / fit["t_max"], "beta_max": 1 / fit["t_min"], "steps": fit["steps"]})
    metrics["truncation"] = {name: {"rows": len(pools[name]), "truncated": 0, "longest_tokens": longest[name],
                                    "max_length": max_length} for name in (AUDIT, CAL)}
    if protocol["metrics"].get("estimators"):
        metrics["estimators"] = _estimators_record(protocol, *arrays[AUDIT], beta)
    digests["metrics.json"] = _write_json(data, "metrics.json", metrics)
    if "bootstrap" in protocol:
        _write_json(data, "bootstrap.json", _bootstrap(protocol, psha, digests, arrays[AUDIT],
                                                       beta, threshold))
    if "stability" in protocol:
        _write_json(data, "stability.json", _stability(protocol, psha, digests, arrays, beta))

    def pick(*names: str) -> dict[str, str]:
        return {n: digests[n] for n in names}

    stages = [
        ("split", pick("protocol.json", "resources.json"), pick("pools.json")),
        ("calibration-inference", pick("protocol.json", "resources.json", "pools.json"),
         pick(f"predictions/{CAL}.parquet")),
        ("fit", pick(f"predictions/{CAL}.parquet"), pick("temperature.json", "trajectory.json")),
        ("audit-inference", pick("protocol.json", "resources.json", "pools.json",
                                 "temperature.json"), pick(f"predictions/{AUDIT}.parquet")),
        ("metrics", pick("temperature.json", f"predictions/{CAL}.parquet",
                         f"predictions/{AUDIT}.parquet"), pick("metrics.json")),
    ]
    _write_json(data, "stages.json", {"protocol_sha256": psha, "stages": [
        {"name": n, "protocol_sha256": psha, "consumed": c, "produced": p} for n, c, p in stages]})
    _write_json(data, "environment.json", {
        "python": "3.11", "implementation": "CPython", "platform": "test", "os": "test",
        "machine": "x86_64", "cpu_model": None, "logical_cores": 2,
        "packages": {"numpy": np.__version__, "torch": None},
        "torch": {"num_threads": protocol["inference"]["torch_threads"]},
        "threads": {"used": protocol["inference"]["torch_threads"], "chosen_by": "--threads",
                    "protocol_bound": protocol["inference"]["torch_threads"], "physical_cores": 2, "cpu_quota": None},
        "arithmetic": {"cpu_vendor": "SyntheticVendor", "cpu_model": None, "cpu_flags": ["avx2"],
                       "aten_capability": "AVX2", "onednn_isa": None, "mkl": None, "env": {}},
        "env": {"CALIBRATION_IMAGE": None}, "image": None, "git_commit": None,
        "timings_s": {name: 1.0 for name, _, _ in stages},
        "stage_times": [{"stage": name, "start": f"2024-05-07T00:00:0{i}Z",
                         "end": f"2024-05-07T00:00:0{i + 1}Z"}
                        for i, (name, _, _) in enumerate(stages)],
        "peak_rss_mb": 1.0})
    write_derived(data, signer_fingerprint)
    return psha


def write_derived(data: Path, signer_fingerprint: str | None) -> None:
    """Figures, report.md, then the crate (last), written by the job's own modules."""
    from job.publishing.dates import bagging_date
    from job.rocrate import CRATE
    from scripts.payload_report import REPORT, report_markdown

    for rel, png in figures_of(data).items():
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        (data / rel).write_bytes(png)
    (data / REPORT).write_bytes(report_markdown(data).encode("utf-8"))
    (data / CRATE).write_bytes(crate_bytes_of(data, signer_fingerprint=signer_fingerprint,
                                           date_published=bagging_date()))


def _bootstrap(protocol: dict[str, Any], psha: str, digests: dict[str, str],
               audit: tuple[np.ndarray, np.ndarray], beta: float,
               threshold: float) -> dict[str, Any]:
    """The paired bootstrap written plainly: score each resample's rows with metric_set."""
    spec = protocol["bootstrap"]
    z, y = audit
    n = len(y)
    out, indices_sha256 = _kept_paired_differences(spec, z, y, beta, threshold)
    q = spec["interval"]["quantiles"]
    return {"protocol_sha256": psha, "pool": spec["pool"], "n": n,
            "predictions_sha256": digests[f"predictions/{AUDIT}.parquet"],
            "temperature_sha256": digests["temperature.json"],
            "metrics_sha256": digests["metrics.json"], "beta": beta,
            "resamples": spec["resamples"], "seed": spec["seed"],
            "rng": "numpy.random.Generator(numpy.random.PCG64(seed)).integers(0, n, "
                   "size=(resamples, n))",
            "indices_sha256": indices_sha256,
            "statistic": "calibrated minus raw",
            "interval": {"level": spec["interval"]["level"], "quantiles": q,
                         "method": spec["interval"]["method"]},
            "differences": out}


_estimators_record = memoized(estimators.expected_record)
"""verify.estimators.expected_record, once per process for the same inputs (bundle/memo.py): its
paired-bootstrap intervals take a few tenths of a second on every synthetic payload."""


def _paired_differences(spec: dict[str, Any], z: np.ndarray, y: np.ndarray, beta: float,
                        threshold: float) -> tuple[dict[str, Any], str]:
    """Each metric's point, interval and verdict of the paired bootstrap, and the sha256 of the
    resample matrix."""
    n = len(y)
    idx = np.random.Generator(np.random.PCG64(spec["seed"])).integers(
        0, n, size=(spec["resamples"], n))
    diffs: dict[str, list[float]] = {m: [] for m in spec["metrics"]}
    for row in idx:
        raw = numerics.metric_set(z[row], y[row], 1.0, threshold)
        cal = numerics.metric_set(z[row], y[row], beta, threshold)
        for m, values in diffs.items():
            values.append(cal[m] - raw[m])
    whole_raw = numerics.metric_set(z, y, 1.0, threshold)
    whole_cal = numerics.metric_set(z, y, beta, threshold)
    q = spec["interval"]["quantiles"]
    out = {}
    for m, values in diffs.items():
        lower, upper = (float(v) for v in np.quantile(np.array(values), q, method="linear"))
        out[m] = {"point": whole_cal[m] - whole_raw[m], "lower": lower, "upper": upper,
                  "verdict": "decrease" if upper < 0 else "increase" if lower > 0 else "no claim"}
    return out, sha256(idx.astype("<i8").tobytes())


_kept_paired_differences = memoized(_paired_differences)
"""_paired_differences once per process for the same inputs (bundle/memo.py): many tests write the
same synthetic payload, and its plain loop over 2,000 resamples takes about a second."""


def _stability(protocol: dict[str, Any], psha: str, digests: dict[str, str],
               arrays: dict[str, tuple[np.ndarray, np.ndarray]], beta: float) -> dict[str, Any]:
    fit = protocol["fit"]
    zc, yc = arrays[CAL]
    za, ya = arrays[AUDIT]
    sizes = []
    for m in sorted(protocol["stability"]["sizes"]):
        if m > len(yc):
            continue
        b = bisect(zc[:m], yc[:m], fit["t_min"], fit["t_max"], fit["steps"])
        sizes.append({"m": m, "temperature": 1.0 / b["beta"], "beta": b["beta"],
                      "boundary": b["boundary_side"] is not None,
                      "boundary_side": b["boundary_side"],
                      "calibration_nll_after": numerics.mean_nll(zc[:m], yc[:m], b["beta"]),
                      "audit_nll": numerics.mean_nll(za, ya, b["beta"])})
    return {"protocol_sha256": psha,
            "role": "descriptive only; never used to choose the temperature",
            "nesting": "first m rows of the calibration pool in pool order (ascending split key)",
            "calibration_predictions_sha256": digests[f"predictions/{CAL}.parquet"],
            "audit_predictions_sha256": digests[f"predictions/{AUDIT}.parquet"],
            "temperature_sha256": digests["temperature.json"], "calibration_n": len(yc),
            "audit_n": len(ya), "t_min": fit["t_min"], "t_max": fit["t_max"],
            "steps": fit["steps"], "audit_nll_raw": numerics.mean_nll(za, ya, 1.0),
            "sizes": sizes,
            "skipped_sizes": [m for m in sorted(protocol["stability"]["sizes"]) if m > len(yc)]}


def make_bundle(out: Path, key: Ed25519PrivateKey, **kwargs: Any) -> Path:
    """A synthetic, signed bag at `out` sealed by job.publishing.seal.seal."""
    psha = write_payload(out / "data", signer_fingerprint=fingerprint(key), **kwargs)
    seal_payload(out, description="synthetic test bundle", protocol_sha256=psha,
         profile=kwargs.get("profile", "other"), private_key=key)
    return out


def tiny_png() -> bytes:
    """A valid 1x1 white greyscale PNG."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\xff")) + chunk(b"IEND", b""))
