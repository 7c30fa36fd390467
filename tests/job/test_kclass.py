"""A 3-class model through the whole job (python -m job run) and the torch-free verifier, and the
derived files (bootstrap, stability, figures, report, crate) of that bundle checked for K = 3."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bundle.views.report import expected_tables
from job.bootstrap import bootstrap_indices
from job.metrics import compute_metrics
from job.predictions import read_logits
from job.protocol import StabilitySpec, load_protocol
from scripts.payload_report import load_docs, report_markdown
from tests.cli import run_verify
from tests.factory import make_world
from tests.payload import bootstrap_from_files, stability_from_files
from verify.report_md import compare, parse_tables

REPO = Path(__file__).resolve().parents[2]
K = 3


@pytest.fixture(scope="module")
def three_class_bundle(tmp_path_factory: pytest.TempPathFactory, signing_key_dir: Path) -> Path:
    from job.cli import main

    root = tmp_path_factory.mktemp("k3")
    protocol, lock = make_world(root, num_labels=K, sizes=(8, 24, 30))
    out = root / "run"
    rc = main(["run", "--protocol", str(protocol), "--resources", str(lock), "--out", str(out),
               "--signing-key", str(signing_key_dir / "signing-key.pem"), "--no-progress"])
    assert rc == 0
    return out


def test_predictions_have_k_columns(three_class_bundle: Path):
    import pyarrow.parquet as pq

    for pool in ("calibration", "audit"):
        names = pq.read_table(three_class_bundle / "data" / "predictions" / f"{pool}.parquet").column_names
        assert [c for c in names if c.startswith("logit_")] == [f"logit_{j}" for j in range(K)]
        assert [c for c in names if c.startswith("prob_")] == [f"prob_{j}" for j in range(K)]
    metrics = json.loads((three_class_bundle / "data" / "metrics.json").read_text())
    for pool in ("audit", "calibration"):
        for kind in ("raw", "calibrated"):
            assert 0.0 <= metrics["pools"][pool][kind]["brier"] <= 2.0


@pytest.mark.skipif(not (REPO / "verify" / "__main__.py").exists(), reason="verify/ is absent")
def test_the_verifier_accepts_the_three_class_bundle(three_class_bundle: Path, signing_key_dir: Path,
                                                      tmp_path: Path):
    report = tmp_path / "verify.json"
    ran = run_verify([str(three_class_bundle), "--trusted-key", str(signing_key_dir / "signing-key.pub.pem"),
                      "--json", str(report)])
    failed = [c for c in json.loads(report.read_text())["checks"] if c["status"] == "fail"] \
        if report.exists() else ran.out[-3000:]
    assert ran.code == 0, failed


def test_derived_files_for_k_classes(three_class_bundle: Path, tmp_path: Path):
    """bootstrap, stability and report recomputed from the K = 3 payload (whether or not the job
    already wrote them) agree with the job's metrics and, where present, the job's own files."""
    data = tmp_path / "data"
    shutil.copytree(three_class_bundle / "data", data)
    protocol = load_protocol(data / "protocol.json")
    z32, y = read_logits(data / "predictions" / "audit.parquet")
    z = z32.astype(np.float64)
    assert z.shape[1] == K

    boot = bootstrap_from_files(protocol.bootstrap, protocol.sha256, data)
    beta = boot["beta"]
    idx = bootstrap_indices(len(y), boot["resamples"], boot["seed"])[:100]
    for metric, d in boot["differences"].items():
        whole = compute_metrics(z, y, beta, 0.9)[metric] - compute_metrics(z, y, 1.0, 0.9)[metric]
        assert d["point"] == pytest.approx(whole, abs=1e-12)
        per = [compute_metrics(z[r], y[r], beta, 0.9)[metric] - compute_metrics(z[r], y[r], 1.0, 0.9)[metric]
               for r in idx]
        assert min(per) <= d["upper"] and max(per) >= d["lower"]
    if (data / "bootstrap.json").exists():
        assert json.loads((data / "bootstrap.json").read_text()) == boot

    stab = stability_from_files(StabilitySpec(sizes=(6, 12, 24)), protocol.fit, protocol.sha256, data)
    assert [e["m"] for e in stab["sizes"]] == [6, 12, 24]
    assert stab["sizes"][-1]["temperature"] == json.loads((data / "temperature.json").read_text())["temperature"]

    md = report_markdown(data)
    assert compare(parse_tables(md), expected_tables(load_docs(data))) == []
    if (data / "report.md").exists():
        assert (data / "report.md").read_text(encoding="utf-8") == md
