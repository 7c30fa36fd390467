"""Hostile bundles are rejected (exit 1) quickly, by the check that names the problem, even when
signed with the real key: the caps and the protocol's bounds are what protect then."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.verify.tamper import HOSTILE, Keys, base, copy_bag, synthetic_bag, verify_keys  # noqa: F401
from tests.verify.tarcraft import ATTACKS
from verify.api import verify_path
from verify.checks import Trust
from verify.result import EXIT_FAILED, EXIT_OK

EXPECTED_FAILURE: dict[str, str | tuple[str, ...] | None] = {
    "pools-empty-objects": "bag.layout",
    "pools-archive-bomb": "bag.layout",  # at full size archive.safe, before extracting
    "bootstrap-resamples": "bootstrap.intervals",
    "trajectory-steps": "bag.layout",
    # the on-disk cap or the footer's row count, whichever the file's compression trips first
    "parquet-identical-rows": ("bag.layout", "predictions.audit.columns"),
    "report-image-brackets": "report.regenerated",  # prose the records do not give, found in linear time
    "protocol-resamples": "protocol.bounds",
    "archive-trailing-member": "archive.safe",
    "formal-extra-file": "resources.pins",
    "formal-pin-none": "resources.pins",
    "stage-times-audit-first": "stages.records",
    "audit-digest-renamed": "stages.audit-after-fit",
    **{name: "archive.safe" for name in ATTACKS},
}


def test_every_hostile_class_names_its_check() -> None:
    assert sorted(EXPECTED_FAILURE) == sorted(HOSTILE)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_rejected_in_bounded_time(name: str, base: tuple[Path, Keys],  # noqa: F811
                                          tmp_path: Path) -> None:
    src, keys = base
    target = HOSTILE[name](copy_bag(src, tmp_path / "bag"), keys, 0.02)
    start = time.perf_counter()
    outcome = verify_path(target, Trust(key=keys.real.public_key()))
    elapsed = time.perf_counter() - start
    failed = {c.id: c.detail for c in outcome.checks if c.status == "fail"}
    expected = EXPECTED_FAILURE[name]
    if expected is None:
        assert outcome.exit_code == EXIT_OK, failed
    else:
        assert outcome.exit_code == EXIT_FAILED
        wanted = (expected,) if isinstance(expected, str) else expected
        assert any(check in failed for check in wanted), failed
        figures = [c for c in outcome.checks if c.id == "figures.regenerated"]
        assert all(c.status == "skip" for c in figures), "a rejected bundle's figures were drawn again"
    assert elapsed < 10, f"{name} took {elapsed:.1f} s"
