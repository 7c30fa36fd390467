"""Which forward a run used, and why, is part of its record: environment.json `forward_choice`,
checked by the verifier against the forward check it must (or must not) come with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from verify.result import Failed
from verify.run_settings import check_forward_choice
from verify.schemacheck import validate


def _environment(bundle: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((bundle / "data" / "environment.json").read_text())
    return doc


def test_a_packed_run_records_its_choice_with_the_check(tiny_bundle: Path) -> None:
    environment = _environment(tiny_bundle)
    assert environment["forward_choice"] == {
        "name": "packed-distilbert",
        "reason": "float32 DistilBertForSequenceClassification in transformers' tensor layout, eager attention"}
    assert environment["torch"]["allocator"]["arrow_memory_pool"] == "system"
    assert check_forward_choice(environment).startswith("packed-distilbert (")


@pytest.mark.parametrize(("edit", "message"), [
    (lambda e: e.pop("forward_check"), "holds no forward_check"),
    (lambda e: e["forward_choice"].update(name="transformers", reason="fallback: x"), "holds a forward_check"),
    (lambda e: (e.pop("forward_check"), e["forward_choice"].update(name="transformers", reason="preferred")),
     "does not start with 'fallback: '"),
])
def test_the_verifier_refuses_a_choice_its_record_contradicts(tiny_bundle: Path, edit: Any, message: str) -> None:
    environment = _environment(tiny_bundle)
    edit(environment)
    with pytest.raises(Failed, match=message):
        check_forward_choice(environment)


def test_a_fallback_without_a_check_passes(tiny_bundle: Path) -> None:
    environment = _environment(tiny_bundle)
    environment.pop("forward_check")
    environment["forward_choice"] = {"name": "transformers", "reason": "fallback: config.json's model_type is 'bert'"}
    assert check_forward_choice(environment) == "transformers (fallback: config.json's model_type is 'bert')"


@pytest.mark.parametrize("choice", [{"name": "onnx", "reason": "x"}, {"name": "transformers", "reason": ""},
                                    {"name": "transformers"}, {"name": "transformers", "reason": "x", "extra": 1}])
def test_the_schema_holds_the_choice_to_its_shape(tiny_bundle: Path, choice: dict[str, Any]) -> None:
    environment = _environment(tiny_bundle)
    validate(environment, "environment", "environment.json")
    environment["forward_choice"] = choice
    with pytest.raises(Failed):
        validate(environment, "environment", "environment.json")
