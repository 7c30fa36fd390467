"""tests/goldens/bundle-v<N>: a bundle of each format, committed once (`python -m tests.make_golden_bundle`),
that the current verifier must accept with the committed public key for as long as it reads that
format, and that a verifier refuses with an upgrade sentence when it does not read the bundle's format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bundle import layout
from bundle.dsse import Envelope
from tests.cli import run_verify
from verify import compat
from verify.result import Failed

REPO = Path(__file__).resolve().parents[2]
GOLDENS = REPO / "tests" / "goldens"
VERSIONS = tuple(range(1, layout.FORMAT_VERSION + 1))
OLDEST = {1: "1.0.0", 2: "2.0.0"}
"""The oldest verifier each format's golden names (bundle.layout.OLDEST_VERIFIER when it was written)."""


def _golden(version: int) -> tuple[Path, Path]:
    return GOLDENS / f"bundle-v{version}", GOLDENS / f"bundle-v{version}.pub.pem"


def test_every_format_this_code_wrote_has_a_golden() -> None:
    assert sorted(p.name for p in GOLDENS.glob("bundle-v*") if p.is_dir()) == [f"bundle-v{v}" for v in VERSIONS]
    assert set(OLDEST) == set(VERSIONS) and OLDEST[layout.FORMAT_VERSION] == layout.OLDEST_VERIFIER
    assert set(VERSIONS) <= compat.READS_FORMATS


@pytest.mark.parametrize("version", VERSIONS)
def test_golden_bundle_verifies_with_the_committed_key(version: int) -> None:
    golden, key = _golden(version)
    result = run_verify([str(golden), "--trusted-key", str(key)])
    assert result.code == 0, result.out[-4000:] + result.err[-2000:]
    assert "PASS    format.version" in result.out and "VERIFIED" in result.out
    # the tiny world's audit accuracy is below chance: every format gets the warning, recorded or not
    assert "WARNING: accuracy 45.0% is below chance (50.0%)" in result.out
    assert ("records none" in result.out) == (version == 1)


@pytest.mark.parametrize("version", VERSIONS)
def test_golden_bundle_is_of_its_format_small_and_holds_no_private_key(version: int) -> None:
    golden, key = _golden(version)
    files = [p for p in golden.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 1_000_000
    assert not any(b"PRIVATE KEY" in p.read_bytes() for p in [*files, key])
    envelope = json.loads((golden / layout.PROVENANCE).read_bytes())
    predicate = json.loads(Envelope.from_dict(envelope).payload)["predicate"]
    assert predicate["format"] == {"version": version, "oldest_verifier": OLDEST[version]}
    assert predicate["publication"]["license"] == "https://spdx.org/licenses/CC-BY-4.0"


@pytest.mark.parametrize(("fmt", "verifier"), [({"version": 3, "oldest_verifier": "3.0.0"}, "2.0.0"),
                                               ({"version": 2, "oldest_verifier": "2.0.0"}, "1.0.0"),
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
