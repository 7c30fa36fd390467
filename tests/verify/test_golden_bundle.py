"""tests/goldens/bundle-v1: a format-1 bundle committed once (`python -m tests.make_golden_bundle`) that
the current verifier must accept with the committed public key for as long as format 1 exists,
and that a verifier refuses with an upgrade sentence when it does not read the bundle's format."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bundle import layout
from verify import compat
from verify.result import Failed

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "goldens" / "bundle-v1"
TRUSTED_KEY = REPO / "tests" / "goldens" / "bundle-v1.pub.pem"


def test_golden_bundle_verifies_with_the_committed_key() -> None:
    result = subprocess.run([sys.executable, "-m", "verify", str(GOLDEN), "--trusted-key", str(TRUSTED_KEY)],
                            cwd=REPO, capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "PASS    format.version" in result.stdout and "VERIFIED" in result.stdout


def test_golden_bundle_is_format_1_small_and_holds_no_private_key() -> None:
    files = [p for p in GOLDEN.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 1_000_000
    assert not any(b"PRIVATE KEY" in p.read_bytes() for p in [*files, TRUSTED_KEY])
    envelope = json.loads((GOLDEN / layout.PROVENANCE).read_bytes())
    predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    assert predicate["format"] == {"version": 1, "oldest_verifier": "1.0.0"}
    assert predicate["publication"]["license"] == "https://spdx.org/licenses/CC-BY-4.0"


@pytest.mark.parametrize(("fmt", "verifier"), [({"version": 2, "oldest_verifier": "2.0.0"}, "1.0.0"),
                                               ({"version": 1, "oldest_verifier": "1.2.0"}, "1.1.9")])
def test_a_newer_format_says_to_upgrade_the_verifier(fmt: dict[str, object], verifier: str) -> None:
    with pytest.raises(Failed, match=rf"upgrade the verifier to {fmt['oldest_verifier']} or later") as info:
        compat.check_format({"format": fmt}, verifier)
    assert str(info.value).count(". ") == 0  # one sentence


def test_the_formats_this_verifier_reads_pass() -> None:
    assert "format 1" in compat.check_format({"format": {"version": 1, "oldest_verifier": "1.0.0"}}, "1.0.0")
    assert "format 1" in compat.check_format({"format": {"version": 1, "oldest_verifier": "1.0.0"}}, "1.10.0")
    with pytest.raises(Failed, match="states no format version"):
        compat.check_format({}, "1.0.0")
