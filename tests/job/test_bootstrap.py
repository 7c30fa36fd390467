"""The pre-registered paired bootstrap (job/bootstrap.py): RNG rule, agreement with a naive
per-resample recomputation through job.metrics, the quantile rule, speed, and the record."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from bundle.canonical import dumps
from bundle.wording import interval_verdict
from job.bootstrap import (
    bootstrap_indices,
    indices_sha256,
    offset_counts,
    paired_bootstrap,
)
from job.metrics import compute_metrics
from job.protocol import load_protocol

REPO = Path(__file__).resolve().parents[2]
from tests.payload import bootstrap_from_files


def validate(doc: dict, name: str) -> None:
    schema = json.loads((REPO / "schemas" / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).validate(doc)


def synthetic(n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) * 3
    logits[np.arange(n), labels] += 2.0  # mostly right, overconfident
    return logits.astype(np.float32).astype(np.float64), labels.astype(np.int64)


def naive(logits, labels, beta, idx, metric):
    """calibrated - raw of one metric for every resample, through job.metrics.compute_metrics."""
    return np.array([compute_metrics(logits[r], labels[r], beta, 0.9)[metric]
                     - compute_metrics(logits[r], labels[r], 1.0, 0.9)[metric] for r in idx])


def test_rng_rule_is_numpy_pcg64_integers():
    idx = bootstrap_indices(360, 2000, 20240508)
    ref = np.random.Generator(np.random.PCG64(20240508)).integers(0, 360, size=(2000, 360))
    assert idx.dtype == np.int64 and idx.shape == (2000, 360)
    assert np.array_equal(idx, ref)
    assert indices_sha256(idx) == indices_sha256(ref.astype("<i8"))
    assert indices_sha256(idx) != indices_sha256(bootstrap_indices(360, 2000, 20240509))


def test_draw_counts_match_bincount_per_row():
    idx = bootstrap_indices(17, 50, 3)
    kept = idx.copy()
    w = offset_counts(idx, 17)
    assert w.dtype == np.int64 and w.shape == (50, 17) and (w.sum(axis=1) == 17).all()
    for b in range(50):
        assert np.array_equal(w[b], np.bincount(kept[b], minlength=17))
    assert not np.array_equal(idx, kept)  # offset_counts spends its input


@pytest.mark.parametrize("k", [2, 3, 5])
def test_vectorised_equals_naive_recomputation(k):
    logits, labels = synthetic(120, k, seed=k)
    beta, resamples, seed = 0.7, 200, 11
    boot = paired_bootstrap(logits, labels, beta, resamples=resamples, seed=seed)
    idx = bootstrap_indices(len(labels), resamples, seed)
    for metric in ("nll", "brier", "ece"):
        ref = naive(logits, labels, beta, idx, metric)
        np.testing.assert_allclose(boot.differences[metric], ref, rtol=0, atol=1e-12)
        lo, hi = np.quantile(ref, [0.025, 0.975], method="linear")
        assert boot.lower[metric] == pytest.approx(lo, abs=1e-12)
        assert boot.upper[metric] == pytest.approx(hi, abs=1e-12)
        full = (compute_metrics(logits, labels, beta, 0.9)[metric]
                - compute_metrics(logits, labels, 1.0, 0.9)[metric])
        assert boot.point[metric] == pytest.approx(full, abs=1e-12)


def test_same_seed_same_result_and_beta_one_gives_zero():
    logits, labels = synthetic(80, 2)
    a = paired_bootstrap(logits, labels, 0.5, resamples=300, seed=1)
    b = paired_bootstrap(logits, labels, 0.5, resamples=300, seed=1)
    for m in ("nll", "brier", "ece"):
        assert np.array_equal(a.differences[m], b.differences[m])
    z = paired_bootstrap(logits, labels, 1.0, resamples=50, seed=1)
    for m in ("nll", "brier", "ece"):
        assert np.abs(z.differences[m]).max() == 0.0 and z.lower[m] == z.upper[m] == 0.0


def test_verdict_rule():
    assert interval_verdict(-0.3, -0.1) == "decrease"
    assert interval_verdict(0.1, 0.3) == "increase"
    assert interval_verdict(-0.1, 0.1) == "no claim"
    assert interval_verdict(-0.1, 0.0) == "no claim" and interval_verdict(0.0, 0.1) == "no claim"


def test_record_from_the_payload_files(tiny_data: Path, tmp_path: Path):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    protocol = load_protocol(data / "protocol.json")
    assert protocol.bootstrap is not None, "the tiny protocol is a copy of provenance.json"
    rec = bootstrap_from_files(protocol.bootstrap, protocol.sha256, data)
    validate(rec, "bootstrap")
    dumps(rec)  # canonical JSON accepts it
    assert rec == bootstrap_from_files(protocol.bootstrap, protocol.sha256, data)
    spec = protocol.doc["bootstrap"]
    assert rec["resamples"] == spec["resamples"] and rec["seed"] == spec["seed"]
    assert rec["indices_sha256"] == indices_sha256(
        np.random.Generator(np.random.PCG64(spec["seed"])).integers(0, rec["n"], size=(spec["resamples"], rec["n"])))
    metrics = json.loads((data / "metrics.json").read_text())["pools"]["audit"]
    temperature = json.loads((data / "temperature.json").read_text())
    assert rec["beta"] == temperature["beta"]
    for m, d in rec["differences"].items():
        assert d["point"] == pytest.approx(metrics["calibrated"][m] - metrics["raw"][m], abs=1e-12)
        assert d["lower"] <= d["upper"]
        assert d["verdict"] == interval_verdict(d["lower"], d["upper"])
