"""verify/memo.py: equal keys only for equal inputs, results that cannot be changed through a copy,
and a warm memo that still rejects a figure the records do not support."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bundle import layout
from bundle.views.figures import reliability_png
from tests.verify.tamper import Keys, reseal, verify_keys  # noqa: F401
from verify import memo
from verify.api import verify_path
from verify.checks import Trust


def test_inputs_that_differ_in_type_or_bits_have_different_keys() -> None:
    a = np.arange(6, dtype=np.float64)
    apart = [
        ((1,), (1.0,)),
        ((0.0,), (-0.0,)),
        (("1",), (1,)),
        ((a,), (a.astype(np.float32),)),
        ((a,), (a.reshape(2, 3),)),
        ((a,), (np.nextafter(a, 9),)),
        (({"x": 1},), ({"x": 1.0},)),
        ((a, a), (a,)),
        ((1, 2), ((1, 2),)),
        ((), ({},)),
    ]
    for left, right in apart:
        assert memo.key_of(*left) != memo.key_of(*right), (left, right)
    assert memo.key_of(a, {"x": [1, 2.5]}) == memo.key_of(a.copy(), {"x": [1, 2.5]})
    assert memo.key_of(np.asfortranarray(a.reshape(2, 3))) == memo.key_of(a.reshape(2, 3))
    assert memo.key_of(k=1) != memo.key_of(1)


def test_a_memoized_function_runs_once_per_input_and_hands_back_copies() -> None:
    calls: list[Any] = []

    @memo.memoized
    def record(z: np.ndarray, beta: float) -> dict[str, list[float]]:
        calls.append(beta)
        return {"values": [float(v) * beta for v in z]}

    z = np.array([1.0, 2.0])
    first = record(z, 2.0)
    first["values"].append(99.0)
    assert record(z.copy(), 2.0) == {"values": [2.0, 4.0]}
    assert record(z, 3.0) == {"values": [3.0, 6.0]}
    assert calls == [2.0, 3.0]
    for beta in range(10, 10 + memo.SIZE):
        record(z, float(beta))
    record(z, 2.0)
    assert calls[-1] == 2.0 and len(calls) == 3 + memo.SIZE  # the least recently used was dropped


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
