"""A verifier that remembers its drawing of the figures (bundle/memo.py) still compares them with
the bundle's: a warm memo never lets a picture the records do not support pass."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bundle import layout
from bundle.views.figures import reliability_png
from tests.verify.tamper import Keys, reseal, verify_keys  # noqa: F401
from verify.api import verify_path
from verify.checks import Trust


def test_a_warm_memo_still_rejects_a_figure_the_records_do_not_support(
        synthetic_bag: Path, verify_keys: Keys, tmp_path: Path) -> None:  # noqa: F811
    trust = Trust(key=verify_keys.real.public_key(), source="real.pem")
    assert verify_path(synthetic_bag, trust).verdict == "verified"  # draws and remembers the figures
    bag = tmp_path / "bag"
    shutil.copytree(synthetic_bag, bag)
    metrics = json.loads((bag / layout.METRICS_JSON).read_bytes())
    # A well-formed PNG of the same records, drawn without the estimators' whiskers and curves.
    (bag / layout.RELIABILITY_FIGURE).write_bytes(
        reliability_png(metrics["pools"]["audit"], metrics["temperature"], legend_above=True))
    reseal(bag, verify_keys.real)
    outcome = verify_path(bag, trust)
    statuses = {c.id: c.status for c in outcome.checks}
    assert outcome.verdict == "failed"
    assert statuses["figures.png"] == "pass" and statuses["figures.regenerated"] == "fail", statuses


@pytest.fixture
def synthetic_bag(tmp_path_factory: pytest.TempPathFactory, verify_keys: Keys) -> Path:  # noqa: F811
    from tests.synthetic import make_bundle

    return make_bundle(tmp_path_factory.mktemp("memo") / "bag", verify_keys.real)
