"""The fast path for large arrays of flat records (verify/fastarrays.py) against plain jsonschema:
the same verdict on random documents, valid and invalid, and never an item accepted that jsonschema
rejects."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verify import fastarrays, schemacheck
from verify.result import Failed

HEX = "0123456789abcdef"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def plain() -> Any:
    """The verifier's pools validator, used as jsonschema alone (no pruning)."""
    return schemacheck._validator("pools")


def pools_doc(pools: dict[str, list[Any]]) -> dict[str, Any]:
    return {"protocol_sha256": sha("p"), "dataset_sha256": sha("d"), "prefix": "cycle7:", "pools": pools,
            "sizes": {name: len(items) for name, items in pools.items()}}


def entry(i: int) -> dict[str, Any]:
    return {"idx": i, "split_key": sha(f"k{i}"), "text_sha256": sha(f"t{i}")}


hexes = st.text(alphabet=HEX, min_size=64, max_size=64)
bad_hexes = st.one_of(
    hexes.map(str.upper).filter(lambda s: s != s.lower()),
    st.text(alphabet=HEX, min_size=63, max_size=63),
    st.text(alphabet=HEX, min_size=65, max_size=65),
    hexes.map(lambda s: s[:63] + "\n"),
    hexes.map(lambda s: s + "\n"),
    st.text(max_size=70),
    st.integers(),
    st.none(),
)
idxs = st.integers(min_value=0, max_value=2**40)
bad_idxs = st.one_of(st.booleans(), st.integers(max_value=-1), st.floats(allow_nan=False), st.text(max_size=3),
                     st.none(), st.lists(st.integers(), max_size=2))


@st.composite
def items(draw: st.DrawFn) -> Any:
    """Mostly valid pool entries; otherwise one thing wrong (or several) with them."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3),
                              st.builds(list, st.just([("idx", 0)]))))
    item: dict[str, Any] = {"idx": draw(idxs), "split_key": draw(hexes), "text_sha256": draw(hexes)}
    for key, bad in (("idx", bad_idxs), ("split_key", bad_hexes), ("text_sha256", bad_hexes)):
        if draw(st.integers(0, 9)) == 0:
            item[key] = draw(bad)
    if draw(st.integers(0, 14)) == 0:
        del item[draw(st.sampled_from(sorted(item)))]
    if draw(st.integers(0, 14)) == 0:
        item[draw(st.sampled_from(["extra", "IDX", "split_key ", ""]))] = draw(st.one_of(st.integers(), hexes))
    return item


def verdict(doc: Any) -> bool:
    try:
        schemacheck.validate(doc, "pools", "data/pools.json")
    except Failed:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(st.lists(items(), max_size=4), st.lists(items(), max_size=4), st.lists(items(), max_size=4))
def test_same_verdict_as_jsonschema(explore: list[Any], calibration: list[Any], audit: list[Any]) -> None:
    doc = pools_doc({"explore": explore, "calibration": calibration, "audit": audit})
    before = copy.deepcopy(doc)
    assert verdict(doc) == plain().is_valid(doc)
    assert doc == before  # pruning never changes the caller's document


@settings(max_examples=400, deadline=None)
@given(items())
def test_an_accepted_item_is_one_jsonschema_accepts(item: Any) -> None:
    schema = plain().schema
    accept = fastarrays.item_predicate(schema["$defs"]["pool"]["items"], schema)
    assert accept is not None
    item_valid = plain().evolve(schema=schema["$defs"]["pool"]["items"] | {"$defs": schema["$defs"]}).is_valid(item)
    if accept(item):
        assert item_valid
    elif not any(isinstance(v, float) for v in (item.values() if isinstance(item, dict) else ())):
        assert not item_valid  # exact where no float is involved (floats are left to jsonschema)


def test_valid_pools_are_proved_item_by_item_and_the_rest_left_to_jsonschema() -> None:
    doc = pools_doc({"explore": [entry(0)], "calibration": [entry(1), entry(2)], "audit": [entry(3)]})
    pruned, proved = fastarrays.prune(doc, plain().schema)
    assert proved == 4
    assert pruned["pools"] == {"explore": [], "calibration": [], "audit": []}
    assert pruned["sizes"] is doc["sizes"] and doc["pools"]["audit"] == [entry(3)]
    assert verdict(doc)


@pytest.mark.parametrize("change, where", [
    (lambda e: e.update(idx=True), "['idx']: True is not of type 'integer'"),
    (lambda e: e.update(idx=-1), "['idx']: -1 is less than the minimum of 0"),
    (lambda e: e.update(split_key=e["split_key"].upper()), "['split_key']"),
    (lambda e: e.pop("text_sha256"), "'text_sha256' is a required property"),
    (lambda e: e.update(extra=1), "Additional properties are not allowed"),
])
def test_an_invalid_item_fails_with_jsonschemas_message(change: Any, where: str) -> None:
    doc = pools_doc({"explore": [], "calibration": [entry(0)], "audit": [entry(1), entry(2)]})
    change(doc["pools"]["audit"][1])
    assert fastarrays.prune(doc, plain().schema)[1] == 1  # only calibration was proved
    with pytest.raises(Failed, match=r"at \$\['pools'\]\['audit'\]\[1\]") as exc:
        schemacheck.validate(doc, "pools", "data/pools.json")
    assert where in str(exc.value)
    best = jsonschema.exceptions.best_match(plain().iter_errors(doc))
    assert best is not None and best.message[:300] in str(exc.value)


ITEM = {"type": "object", "additionalProperties": False, "required": ["a"],
        "properties": {"a": {"type": "integer", "minimum": 0}}}


@pytest.mark.parametrize("schema", [
    {"type": "array", "items": ITEM, "minItems": 1},  # an array keyword an empty list would not satisfy
    {"type": "array", "items": ITEM | {"additionalProperties": True}},
    {"type": "array", "items": ITEM | {"properties": {"a": {"type": "number"}}}},
    {"type": "array", "items": ITEM | {"properties": {"a": {"type": "integer", "maximum": 3}}}},
    {"type": "array", "items": ITEM | {"properties": {"a": {"type": "string", "format": "date"}}}},
    {"type": "array", "items": {"$ref": "https://elsewhere.example/item"}},
    {"type": "array", "items": {"$ref": "#/$defs/missing"}},
])
def test_schemas_outside_the_subset_are_left_to_jsonschema(schema: dict[str, Any]) -> None:
    root = {"$schema": fastarrays.DRAFT, "type": "object", "properties": {"x": schema}}
    assert fastarrays.prune({"x": [{"a": 1}]}, root) == ({"x": [{"a": 1}]}, 0)


@pytest.mark.parametrize("root", [
    {"$schema": fastarrays.DRAFT, "type": "object", "properties": {"x": {"type": "array", "items": ITEM}},
     "unevaluatedProperties": False},
    {"$schema": fastarrays.DRAFT, "type": "object",
     "properties": {"x": {"type": "array", "items": ITEM}}, "allOf": [{"properties": {"x": {"maxItems": 0}}}]},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
     "properties": {"x": {"type": "array", "items": ITEM}}},
])
def test_no_pruning_under_keywords_that_also_see_the_array(root: dict[str, Any]) -> None:
    assert fastarrays.prune({"x": [{"a": 1}]}, root)[1] == 0


def test_the_subset_with_refs_is_proved() -> None:
    root = {"$schema": fastarrays.DRAFT, "type": "object", "properties": {"x": {"$ref": "#/$defs/list"}},
            "$defs": {"list": {"type": "array", "items": {"$ref": "#/$defs/item"}}, "item": ITEM}}
    assert fastarrays.prune({"x": [{"a": 1}, {"a": 0}]}, root) == ({"x": []}, 2)
    assert fastarrays.prune({"x": [{"a": 1}, {"a": -1}]}, root)[1] == 0
