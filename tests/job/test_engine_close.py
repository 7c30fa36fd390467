"""Closing the local engine lets go of the model and its forward (which holds the weights): dropped at
once when nothing else holds them, and collected when a reference cycle does; the process-wide
garbage collection runs only then."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from job.engines import LocalEngine


class _Forward:
    def __init__(self, cyclic: bool) -> None:
        self.me: Any = self if cyclic else None


class _Model:
    def __init__(self, cyclic: bool, forward_cyclic: bool = False) -> None:
        self.me: Any = self if cyclic else None
        self.forward = _Forward(forward_cyclic)


def _engine_holding(model: _Model) -> LocalEngine:
    engine = object.__new__(LocalEngine)  # the model only: close() touches nothing else
    engine.__dict__["model"] = model
    return engine


@pytest.mark.parametrize(("cyclic", "forward_cyclic"), [(False, False), (True, False), (False, True)],
                         ids=["no-cycle", "model-in-a-cycle", "forward-in-a-cycle"])
def test_close_frees_the_model_and_collects_only_for_a_cycle(cyclic: bool, forward_cyclic: bool,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    collections: list[int] = []
    collect = gc.collect

    def counted(generation: int = 2) -> int:
        collections.append(generation)
        return collect(generation)

    monkeypatch.setattr(gc, "collect", counted)
    model = _Model(cyclic, forward_cyclic)
    engine = _engine_holding(model)
    gone, forward_gone = weakref.ref(model), weakref.ref(model.forward)
    del model
    engine.close()
    assert gone() is None and forward_gone() is None
    assert "model" not in engine.__dict__
    assert collections == ([2] if cyclic or forward_cyclic else [])


def test_closing_twice_is_harmless() -> None:
    engine = _engine_holding(_Model(False))
    engine.close()
    engine.close()
    assert "model" not in engine.__dict__
