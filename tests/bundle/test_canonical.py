"""Canonical JSON: sorted, compact, UTF-8, one newline; strict parsing refuses what JSON should not carry."""

from __future__ import annotations

import json
import math
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bundle.canonical import dumps, loads_strict, require_canonical
from bundle.errors import BundleError, CanonicalJSONError


def test_sorted_compact_utf8_trailing_newline() -> None:
    assert dumps({"b": 1, "a": [1.5, None, True], "é": "ü"}) == (
        '{"a":[1.5,null,true],"b":1,"é":"ü"}\n'.encode()
    )


def test_floats_are_shortest_repr() -> None:
    assert dumps([0.1, 1e-07, 1.0, -0.0, 2.5e300]) == b"[0.1,1e-07,1.0,-0.0,2.5e+300]\n"


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_refused(value: float) -> None:
    with pytest.raises(CanonicalJSONError, match=r"\$\.x\[1\].*finite number or null"):
        dumps({"x": [0, value]})


@pytest.mark.parametrize("value", [Decimal("1.5"), {1, 2}, b"bytes", object()])
def test_non_json_types_refused(value: object) -> None:
    with pytest.raises(CanonicalJSONError, match="not a plain JSON type"):
        dumps({"x": value})


def test_numpy_scalars_refused_with_hint() -> None:
    np = pytest.importorskip("numpy")
    with pytest.raises(CanonicalJSONError, match=r"numpy.*float\(x\)"):
        dumps({"t": np.float32(1.5)})
    with pytest.raises(CanonicalJSONError, match="numpy"):
        dumps([np.int64(3)])


def test_non_string_keys_refused() -> None:
    with pytest.raises(CanonicalJSONError, match="keys must be str"):
        dumps({1: "a"})


def test_errors_are_bundle_errors_naming_the_source() -> None:
    with pytest.raises(BundleError, match="data/x.json at"):
        dumps({"v": math.nan}, source="data/x.json")


def test_duplicate_keys_refused() -> None:
    with pytest.raises(CanonicalJSONError, match="duplicate key 'a'"):
        loads_strict(b'{"a":1,"b":{"c":2},"a":3}')
    with pytest.raises(CanonicalJSONError, match="duplicate key 'c'"):
        loads_strict(b'{"b":{"c":2,"c":2}}')


@pytest.mark.parametrize("text", [b"NaN", b"[Infinity]", b'{"a":-Infinity}', b"[1e400]"])
def test_non_finite_refused_when_parsing(text: bytes) -> None:
    with pytest.raises(CanonicalJSONError, match="not strict JSON"):
        loads_strict(text, source="f.json")


@pytest.mark.parametrize("text", [b"\xff{}", b"\xef\xbb\xbf{}", b"{", b""])
def test_bad_bytes_refused(text: bytes) -> None:
    with pytest.raises(CanonicalJSONError):
        loads_strict(text)


@pytest.mark.parametrize("text", [b'{"a": 1}\n', b'{"a":1}', b'{"b":1,"a":2}\n'])
def test_require_canonical_refuses_other_spellings(text: bytes) -> None:
    assert require_canonical(b'{"a":1}\n', source="data/t.json") == {"a": 1}
    with pytest.raises(CanonicalJSONError, match="not canonical"):
        require_canonical(text, source="data/t.json")


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_round_trip_is_stable(value: object) -> None:
    data = dumps(value)
    assert data.endswith(b"\n") and b"\n" not in data[:-1]
    assert loads_strict(data) == json.loads(data)
    assert dumps(loads_strict(data)) == data
    assert require_canonical(data, source="t") == loads_strict(data)


def test_shrink_replaces_each_object_as_parsed_innermost_first() -> None:
    seen: list[list[str]] = []

    def shrink(obj: dict[str, object]) -> object:
        seen.append(sorted(obj))
        return None if "row" in obj else obj

    doc = loads_strict(b'{"rows":[{"row":1},{"row":2}],"n":{"size":2}}', shrink=shrink)
    assert doc == {"rows": [None, None], "n": {"size": 2}}
    assert seen == [["row"], ["row"], ["size"], ["n", "rows"]]


def test_shrink_keeps_the_strict_checks() -> None:
    with pytest.raises(CanonicalJSONError, match="duplicate key"):
        loads_strict(b'{"a":{"row":1,"row":2}}', shrink=lambda o: None)
    with pytest.raises(CanonicalJSONError):
        loads_strict(b'{"a":NaN}', shrink=lambda o: o)
    deep = b'{"rows":[{"row":' + b"[" * 70 + b"]" * 70 + b"}]}"
    with pytest.raises(CanonicalJSONError, match="deeper than 64"):
        loads_strict(deep, shrink=lambda o: None if "row" in o else o)  # dropped, yet still bounded
