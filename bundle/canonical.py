"""Canonical JSON (FORMAT.md): UTF-8, sorted keys, (",", ":"), no NaN/Infinity, one trailing "\\n".

`dumps` accepts only plain JSON types (dict with str keys, list, tuple, str, int, float, bool,
None) and refuses anything else, numpy scalars included, so that what is written is exactly what
the caller meant. `loads_strict` refuses duplicate keys and NaN/Infinity.
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn

from bundle.errors import CanonicalJSONError

_SCALARS = (str, int, float, bool, type(None))


def _where(path: str, source: str | None) -> str:
    return f"{source} at {path}" if source else path


def _check(obj: Any, path: str, source: str | None) -> None:
    kind = type(obj)
    if kind is dict:
        for key, value in obj.items():
            if type(key) is not str:
                raise CanonicalJSONError(
                    f"JSON object keys must be str but {_where(path, source)} has key {key!r} "
                    f"of type {type(key).__name__}; convert the key to str before writing."
                )
            _check(value, f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]", source)
    elif kind is list or kind is tuple:
        for i, value in enumerate(obj):
            _check(value, f"{path}[{i}]", source)
    elif kind is float:
        if not math.isfinite(obj):
            raise CanonicalJSONError(
                f"{_where(path, source)} is {obj!r}, which canonical JSON cannot hold; "
                "write a finite number or null."
            )
    elif kind not in _SCALARS:
        raise CanonicalJSONError(
            f"{_where(path, source)} is a {kind.__module__}.{kind.__qualname__}, not a plain JSON "
            "type; convert it first (for example float(x), int(x) or x.tolist())."
        )


def dumps(obj: Any, *, source: str | None = None) -> bytes:
    """Canonical UTF-8 bytes of `obj`; raise CanonicalJSONError for non-JSON types or NaN/Infinity."""
    _check(obj, "$", source)
    try:
        text = json.dumps(
            obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalJSONError(
            f"{source or 'The document'} holds a string that is not valid Unicode ({exc.reason}); "
            "remove lone surrogates before writing."
        ) from exc


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not allowed")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} overflows to {value}")
    return value


def loads_strict(data: bytes | str, *, source: str = "The document") -> Any:
    """Parse strict JSON: UTF-8, no duplicate keys, no NaN/Infinity; raise CanonicalJSONError."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CanonicalJSONError(
                f"{source} is not valid UTF-8 (byte {exc.start}); write it as UTF-8 JSON."
            ) from exc
    else:
        text = data
    if text.startswith("\ufeff"):
        raise CanonicalJSONError(f"{source} starts with a byte-order mark; write it without one.")

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise ValueError(f"duplicate key {key!r}")
            out[key] = value
        return out

    try:
        return json.loads(
            text, object_pairs_hook=pairs, parse_constant=_reject_constant, parse_float=_parse_float
        )
    except json.JSONDecodeError as exc:
        raise CanonicalJSONError(
            f"{source} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            "regenerate the file."
        ) from exc
    except ValueError as exc:
        raise CanonicalJSONError(
            f"{source} is not strict JSON ({exc}); regenerate the file with canonical JSON."
        ) from exc
    except RecursionError as exc:
        raise CanonicalJSONError(f"{source} is nested too deeply to parse; regenerate it.") from exc


def require_canonical(data: bytes, *, source: str) -> Any:
    """Parse `data` strictly and require it to be canonical; return the parsed document."""
    doc = loads_strict(data, source=source)
    if dumps(doc) != data:
        raise CanonicalJSONError(
            f"{source} is valid JSON but not canonical (sorted keys, no spaces, one trailing "
            "newline); write it with bundle.canonical.dumps."
        )
    return doc
