"""bundle/memo.py: equal keys only for equal inputs, results that cannot be changed through a copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bundle import memo


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


def test_the_figures_are_remembered_drawings_of_draw_figures(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """render_figures hands back draw_figures' bytes; a record changed only where no figure looks
    is not drawn again, one changed where a figure looks is."""
    import json

    from bundle.views import figures
    from tests.payload import predictions_of
    from tests.synthetic import write_payload

    write_payload(tmp_path / "data", sizes=(8, 40, 60))
    metrics = json.loads((tmp_path / "data" / "metrics.json").read_text())
    audit = predictions_of(tmp_path / "data", "audit")
    z = audit.logits.astype(np.float64)
    assert set(metrics["estimators"]["results"]) - set(figures.figure_records(metrics)["estimators"]["results"])
    drawn = figures.draw_figures(metrics, z, audit.labels)
    assert figures.render_figures(metrics, z, audit.labels) == drawn
    assert figures.draw_figures(figures.figure_records(metrics), z, audit.labels) == drawn

    calls: list[int] = []
    real = figures.reliability_png
    monkeypatch.setattr(figures, "reliability_png", lambda *a, **k: calls.append(1) or real(*a, **k))
    unseen = json.loads(json.dumps(metrics))
    unseen["warnings"] = [*unseen["warnings"], "a warning no figure shows"]
    unseen["pools"]["calibration"]["raw"]["nll"] += 1.0
    for entry in unseen["estimators"]["results"].values():
        if entry["kind"] not in ("bin-intervals", "smooth-ece"):
            entry["raw"]["value"] = 0.5
    assert figures.render_figures(unseen, z, audit.labels) == drawn and calls == []
    seen = json.loads(json.dumps(unseen))
    seen["pools"]["audit"]["raw"]["ece"] = 0.25
    again = figures.render_figures(seen, z, audit.labels)
    assert calls == [1]
    assert again[figures.RELIABILITY] != drawn[figures.RELIABILITY]
    assert again[figures.CONFIDENCE] == drawn[figures.CONFIDENCE]
