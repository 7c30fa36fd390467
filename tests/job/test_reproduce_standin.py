"""Re-execution on the stand-in fixtures (a real DistilBERT-architecture classifier on real SST-2):
the job's bundle reproduces bit for bit in full and sampled on the signer's arithmetic, is
`equivalent` with oneDNN and ATen limited to AVX2 (the arithmetic of an AVX2-only machine), and a
signer's edit of three audit rows' margins is a `mismatch` under that arithmetic too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bundle.dsse import Envelope
from job.cli import main as job_main
from job.predictions import PoolOutput
from job.publishing.signing_keys import generate
from tests.factory import REPO, SHARED_FIXTURES, computes_as_avx2_or_less
from verify.__main__ import main as verify_main

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not SHARED_FIXTURES.is_dir(), reason="../shared/fixtures is absent")]

LOCK = REPO / "job" / "locks" / "standin.json"
AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}


def predicate(att: Path) -> dict[str, Any]:
    return json.loads(Envelope.from_json(att.read_bytes()).payload)["predicate"]  # type: ignore[no-any-return]


def in_child(bundle: Path, out: Path, key: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "job", "reproduce", str(bundle), "--out", str(out),
                           "--signing-key", str(key), "--resources", str(LOCK), "--no-progress"],
                          cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True, timeout=900,
                          check=False)


@pytest.mark.slow  # the stand-in under another arithmetic; the tiny world's tests of the same run in make test
def test_a_standin_bundle_is_bit_identical_here_and_equivalent_under_avx2(
        tmp_path: Path, signing_key_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if computes_as_avx2_or_less():
        pytest.skip("this CPU (or this process) computes as AVX2 or less, so the AVX2 reproduction is not "
                    "another arithmetic")
    bundle = tmp_path / "bundle"
    assert job_main(["run", "--resources", str(LOCK), "--out", str(bundle), "--no-progress",
                     "--signing-key", str(signing_key_dir / "signing-key.pem")]) == 0
    generate(tmp_path / "reproducer")
    key = tmp_path / "reproducer" / "signing-key.pem"
    full, sample, avx2 = tmp_path / "full.json", tmp_path / "sample.json", tmp_path / "avx2.json"
    common = ["--resources", str(LOCK), "--signing-key", str(key), "--no-progress"]
    assert job_main(["reproduce", str(bundle), "--out", str(full), *common]) == 0
    assert job_main(["reproduce", str(bundle), "--out", str(sample), "--sample", "32", "--seed", "2", *common]) == 0
    done = in_child(bundle, avx2, key, AVX2)
    assert done.returncode == 0, done.stdout + done.stderr
    p = predicate(avx2)
    assert p["verdict"] == "equivalent" and p["rows"]["identical"] < p["rows"]["compared"] == 616
    assert 0 < p["largest_difference"]["abs"] <= p["tolerance"]["abs"] and p["rows"]["predictions_changed"] == 0
    for changed in p["figures"]["listed"]:  # honest arithmetic moves a figure by one unit of its sixth decimal
        assert abs(float(changed["to"]) - float(changed["from"])) <= 1.0000001e-6, changed
    assert done.stdout.startswith("equivalent: 616 rows compared (full), every logit within 1e-4")
    assert "on another CPU or code path: signed on " in done.stdout and "ATen AVX2" in done.stdout
    sampled = predicate(sample)
    assert sampled["rows"]["compared"] >= 32 and sum(len(b) for b in sampled["sample"]["batches"].values()) <= 3
    capsys.readouterr()
    code = verify_main([str(bundle), "--trusted-key", str(signing_key_dir / "signing-key.pub.pem"),
                        "--reproduction", str(full), "--reproduction", str(sample), "--reproduction", str(avx2),
                        "--trusted-reproducer", str(tmp_path / "reproducer" / "signing-key.pub.pem")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "logits reproduced by 1 trusted party: bit for bit (full: 616 rows); bit for bit (sampled: " in out
    assert "equivalent on another CPU: every logit within 1e-4 (largest " in out


@pytest.mark.slow  # the stand-in under another arithmetic; the tiny world's tests of the same run in make test
def test_three_edited_margins_are_a_mismatch_under_avx2(tmp_path: Path, signing_key_dir: Path) -> None:
    import job.pipeline

    real = job.pipeline.pool_output
    calls: list[int] = []

    def edited(*args: Any, **kwargs: Any) -> PoolOutput:
        out = real(*args, **kwargs)
        calls.append(1)
        if len(calls) != 2:  # calibration first, then audit
            return out
        logits = out.logits.copy()
        top = logits[:3].argmax(axis=1)
        logits[np.arange(3), top] += np.float32(0.05)  # a wider margin, the same prediction
        return PoolOutput(logits, out.token_count, out.truncated, out.batch, out.full_token_count)

    bundle = tmp_path / "bundle"
    mp = pytest.MonkeyPatch()
    mp.setattr(job.pipeline, "pool_output", edited)
    try:
        assert job_main(["run", "--resources", str(LOCK), "--out", str(bundle), "--no-progress",
                         "--signing-key", str(signing_key_dir / "signing-key.pem")]) == 0
    finally:
        mp.undo()
    generate(tmp_path / "reproducer")
    att = tmp_path / "avx2.json"
    done = in_child(bundle, att, tmp_path / "reproducer" / "signing-key.pem", AVX2)
    assert done.returncode == 1, done.stdout + done.stderr
    p = predicate(att)
    assert p["verdict"] == "mismatch" and p["rows"]["compared"] - p["rows"]["within_tolerance"] == 3
    assert p["rows"]["predictions_changed"] == 0 and p["largest_difference"]["abs"] > 0.04
