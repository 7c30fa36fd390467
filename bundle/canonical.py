"""Canonical JSON (FORMAT.md): UTF-8, sorted keys, (",", ":"), no NaN/Infinity, one trailing "\\n".

`dumps` accepts only plain JSON types (dict with str keys, list, tuple, str, int, float, bool,
None) and refuses anything else, numpy scalars included, so that what is written is exactly what
the caller meant. `loads_strict` refuses duplicate keys and NaN/Infinity, and bounds what it
reads: at most MAX_JSON_BYTES (or the caller's `max_bytes`) and MAX_JSON_DEPTH levels of arrays
and objects, so that no later recursive walk of a document read from outside can exhaust the
stack.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, Final, NoReturn

from bundle.errors import CanonicalJSONError

_SCALARS = (str, int, float, bool, type(None))

MAX_JSON_BYTES: Final = 64 * 1024 * 1024
"""The longest document `loads_strict` parses unless the caller passes a smaller `max_bytes`."""
MAX_JSON_DEPTH: Final = 64
"""Nesting of arrays and objects; the format's documents nest at most 8 levels."""


def _where(path: str, source: str | None) -> str:
    return f"{source} at {path}" if source else path


def _check(obj: Any, path: str, source: str | None) -> None:
    kind = type(obj)
    if kind is dict:
        for key, value in obj.items():
            if type(key) is not str:
                raise CanonicalJSONError(
                    f"JSON object keys must be str but {_where(path, source)} has key {key!r} "
                    f"of type {type(key).__name__}; convert the key to str before writing.",
                    source=source, reason="key-not-str", at=path)
            _check(value, f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]", source)
    elif kind is list or kind is tuple:
        for i, value in enumerate(obj):
            _check(value, f"{path}[{i}]", source)
    elif kind is float:
        if not math.isfinite(obj):
            raise CanonicalJSONError(
                f"{_where(path, source)} is {obj!r}, which canonical JSON cannot hold; "
                "write a finite number or null.", source=source, reason="not-finite", at=path)
    elif kind not in _SCALARS:
        raise CanonicalJSONError(
            f"{_where(path, source)} is a {kind.__module__}.{kind.__qualname__}, not a plain JSON "
            "type; convert it first (for example float(x), int(x) or x.tolist()).",
            source=source, reason="not-json-type", at=path)


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
            "remove lone surrogates before writing.", source=source, reason="not-unicode") from exc


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not allowed")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} overflows to {value}")
    return value


def _depth(doc: Any) -> int:
    """The nesting depth of a parsed document (a scalar: 0), without recursion."""
    deepest = 0
    stack = [(doc, 1)]
    while stack:
        node, level = stack.pop()
        if type(node) is dict:
            children: Any = node.values()
        elif type(node) is list:
            children = node
        else:
            continue
        if level > deepest:
            deepest = level
            if deepest > MAX_JSON_DEPTH:
                return deepest
        stack.extend((child, level + 1) for child in children if type(child) in (dict, list))
    return deepest


def loads_strict(data: bytes | str, *, source: str = "The document",
                 max_bytes: int = MAX_JSON_BYTES,
                 shrink: Callable[[dict[str, Any]], Any] | None = None) -> Any:
    """Parse strict JSON: UTF-8, no duplicate keys, no NaN/Infinity, at most `max_bytes` long
    and MAX_JSON_DEPTH deep; raise CanonicalJSONError.

    `shrink`, when given, sees every object as soon as it is parsed (innermost first) and what it
    returns stands for that object: a reader that needs a summary of a large document drops the
    parts it does not read while parsing, instead of holding them all at once. An object it
    replaces must itself nest at most MAX_JSON_DEPTH levels (its place in the document is not
    known yet); what remains is bounded as without `shrink`."""
    if len(data) > max_bytes:
        raise CanonicalJSONError(
            f"{source} is {len(data):,} {'bytes' if isinstance(data, bytes) else 'characters'} "
            f"long, over the {max_bytes:,} allowed; it is not a file the job wrote.",
            source=source, reason="too-long")
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CanonicalJSONError(
                f"{source} is not valid UTF-8 (byte {exc.start}); write it as UTF-8 JSON.",
                source=source, reason="not-utf8") from exc
    else:
        text = data
    if text.startswith("\ufeff"):
        raise CanonicalJSONError(f"{source} starts with a byte-order mark; write it without one.",
                                 source=source, reason="byte-order-mark")

    def pairs(items: list[tuple[str, Any]]) -> Any:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise ValueError(f"duplicate key {key!r}")
            out[key] = value
        if shrink is None:
            return out
        small = shrink(out)
        if small is not out and _depth(out) > MAX_JSON_DEPTH:
            raise ValueError(f"an object nests deeper than {MAX_JSON_DEPTH} levels")
        return small

    try:
        doc = json.loads(
            text, object_pairs_hook=pairs, parse_constant=_reject_constant, parse_float=_parse_float
        )
    except json.JSONDecodeError as exc:
        raise CanonicalJSONError(
            f"{source} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            "regenerate the file.", source=source, reason="invalid-json") from exc
    except ValueError as exc:
        raise CanonicalJSONError(
            f"{source} is not strict JSON ({exc}); regenerate the file with canonical JSON.",
            source=source, reason="not-strict") from exc
    except RecursionError as exc:
        raise CanonicalJSONError(f"{source} is nested too deeply to parse; regenerate it.",
                                 source=source, reason="too-deep") from exc
    if _depth(doc) > MAX_JSON_DEPTH:
        raise CanonicalJSONError(
            f"{source} nests arrays and objects deeper than {MAX_JSON_DEPTH} levels; it is not a "
            "file the job wrote.", source=source, reason="too-deep")
    return doc


def require_canonical(data: bytes, *, source: str) -> Any:
    """Parse `data` strictly and require it to be canonical; return the parsed document."""
    doc = loads_strict(data, source=source)
    if dumps(doc) != data:
        raise CanonicalJSONError(
            f"{source} is valid JSON but not canonical (sorted keys, no spaces, one trailing "
            "newline); write it with bundle.canonical.dumps.", source=source, reason="not-canonical")
    return doc
