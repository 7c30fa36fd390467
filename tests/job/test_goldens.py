"""The tiny run's logits, temperature and metrics equal the committed goldens; how goldens are
compared and updated."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.factory import REPO
from tests.goldens import GOLDEN_DIR, PINNED, compare, digests


def test_tiny_run_matches_its_golden_digests(tiny_bundle: Path, golden: Callable[[str, Path], None]) -> None:
    golden("tiny", tiny_bundle)


def test_the_goldens_pin_exactly_the_logits_temperature_and_metrics() -> None:
    for run in ("standin", "tiny"):
        doc = json.loads((GOLDEN_DIR / f"{run}.json").read_text())
        assert sorted(doc) == sorted(PINNED) and all(len(v) == 64 for v in doc.values())


@pytest.fixture
def drifted(tiny_bundle: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(a copy of the tiny bundle whose metrics changed, a golden dir holding the real goldens)."""
    bundle = tmp_path / "bundle"
    for rel in PINNED:
        (bundle / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tiny_bundle / rel, bundle / rel)
    (bundle / "data/metrics.json").write_bytes(b"{}")
    goldens = tmp_path / "goldens"
    goldens.mkdir()
    shutil.copyfile(GOLDEN_DIR / "tiny.json", goldens / "tiny.json")
    (goldens / "CHANGELOG.md").write_text("# log\n")
    return bundle, goldens


def test_a_drift_fails_naming_the_file_and_how_to_update(drifted: tuple[Path, Path]) -> None:
    bundle, goldens = drifted
    with pytest.raises(pytest.fail.Exception, match=r"^data/metrics\.json of the tiny run differ.*--update-goldens"):
        compare("tiny", bundle, None, goldens)
    assert (goldens / "tiny.json").read_bytes() == (GOLDEN_DIR / "tiny.json").read_bytes()
    assert (goldens / "CHANGELOG.md").read_text() == "# log\n"


def test_an_update_rewrites_the_golden_and_logs_the_reason(drifted: tuple[Path, Path]) -> None:
    bundle, goldens = drifted
    compare("tiny", bundle, "metrics gained a field", goldens)
    assert json.loads((goldens / "tiny.json").read_text()) == digests(bundle)
    last = (goldens / "CHANGELOG.md").read_text().splitlines()[-1]
    assert "`tiny`" in last and "data/metrics.json" in last and last.endswith(": metrics gained a field")
    compare("tiny", bundle, None, goldens)  # now it holds


def test_update_goldens_without_a_reason_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--update-goldens= ",
         "tests/job/test_goldens.py::test_the_goldens_pin_exactly_the_logits_temperature_and_metrics"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "--update-goldens needs a reason" in done.stderr
