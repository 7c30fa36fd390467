"""Re-execution on the stand-in fixtures: the job's bundle from a real DistilBERT-architecture
classifier on real SST-2 reproduces bit for bit, in full and sampled, and the verifier says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundle.keys import generate
from job.cli import main as job_main
from tests.factory import REPO, SHARED_FIXTURES
from verify.__main__ import main as verify_main

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not SHARED_FIXTURES.is_dir(), reason="../shared/fixtures is absent")]

LOCK = REPO / "job" / "resources" / "standin.json"


def test_a_standin_bundle_reproduces_in_full_and_sampled(tmp_path: Path, signing_key_dir: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    bundle = tmp_path / "bundle"
    assert job_main(["run", "--resources", str(LOCK), "--out", str(bundle), "--no-progress",
                     "--signing-key", str(signing_key_dir / "signing-key.pem")]) == 0
    generate(tmp_path / "reproducer")
    key = str(tmp_path / "reproducer" / "signing-key.pem")
    full, sample = tmp_path / "full.json", tmp_path / "sample.json"
    common = ["--resources", str(LOCK), "--signing-key", key, "--no-progress"]
    assert job_main(["reproduce", str(bundle), "--out", str(full), *common]) == 0
    assert job_main(["reproduce", str(bundle), "--out", str(sample), "--sample", "32", "--seed", "2", *common]) == 0
    capsys.readouterr()
    code = verify_main([str(bundle), "--trusted-key", str(signing_key_dir / "signing-key.pub.pem"),
                        "--reproduction", str(full), "--reproduction", str(sample),
                        "--trusted-reproducer", str(tmp_path / "reproducer" / "signing-key.pub.pem")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.rstrip().endswith("logits reproduced bit for bit by 1 trusted party (full: 616 rows; "
                                 "sampled: 32 rows)")
