"""The suite's own scheduling hint (tests/conftest.py LONGEST_FIRST) names modules that exist."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONGEST_FIRST

REPO = Path(__file__).resolve().parents[1]


def test_every_module_run_first_exists_once() -> None:
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    missing = [path for path in LONGEST_FIRST if not (REPO / path).is_file()]
    assert missing == [], f"tests/conftest.py LONGEST_FIRST names modules that do not exist: {missing}"
