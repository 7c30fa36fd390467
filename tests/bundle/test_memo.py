"""bundle/memo.py: equal keys only for equal inputs, results that cannot be changed through a copy."""

from __future__ import annotations

from typing import Any

import numpy as np

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


def test_the_figures_are_remembered_drawings_of_draw_figures() -> None:
    from bundle.views.figures import draw_figures, render_figures

    assert render_figures.__wrapped__ is draw_figures  # type: ignore[attr-defined]
