"""Golden digests of what a run must never drift on: the float32 logits (predictions Parquet), the
fitted temperature and the metrics.

tests/goldens/<run>.json maps each of these payload files to its sha256. Every suite run compares
with them; `pytest --update-goldens=REASON` rewrites a golden that differs and appends REASON to
tests/goldens/CHANGELOG.md, so no golden changes without a recorded why.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from bundle.digests import sha256_file

GOLDEN_DIR = Path(__file__).resolve().parent / "goldens"
PINNED = ("data/predictions/calibration.parquet", "data/predictions/audit.parquet",
          "data/temperature.json", "data/metrics.json")
"""Payload files whose bytes are pinned, relative to the bundle."""


def digests(bundle: Path) -> dict[str, str]:
    """sha256 of each pinned file of `bundle` (a bag directory)."""
    return {rel: sha256_file(bundle / rel) for rel in PINNED}


def compare(run: str, bundle: Path, update_reason: str | None, golden_dir: Path = GOLDEN_DIR) -> None:
    """Fail the test unless `bundle`'s pinned files have the digests of golden `run`.

    With `update_reason`, a golden that differs (or is missing) is rewritten instead and one line
    naming the run, the changed files and the reason is appended to the changelog."""
    path = golden_dir / f"{run}.json"
    expected = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    found = digests(bundle)
    changed = [rel for rel in PINNED if expected.get(rel) != found[rel]]
    if not changed:
        return
    if update_reason is None:
        pytest.fail(f"{', '.join(changed)} of the {run} run differ from {path}; if the change is intended, "
                    "rerun with --update-goldens='why it changed'.", pytrace=False)
    path.write_text(json.dumps(found, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    day = datetime.datetime.now(datetime.UTC).date().isoformat()
    with (golden_dir / "CHANGELOG.md").open("a", encoding="utf-8") as log:
        log.write(f"- {day} `{run}` ({', '.join(changed)}): {update_reason.strip()}\n")
