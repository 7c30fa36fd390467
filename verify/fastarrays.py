"""Large arrays of flat records checked without jsonschema, where the schema allows it.

jsonschema walks every item of an array through its general machinery; for data/pools.json (one entry
per dataset row) that is most of the verifier's time. This module derives, from the schema itself, a
plain-Python predicate for an array's items when the item schema lies in a small subset:

    {"type": "object", "additionalProperties": false, "required": [...], "properties": {NAME: P, ...}}

where each P (or the local "#/$defs/..." definition it is a bare {"$ref": ...} to) is
{"type": "integer", "minimum": m} or {"type": "string", "pattern": r, "minLength": a, "maxLength": b}
with every keyword but "type" optional. Arrays are found only by descending through "properties" of
object schemas made of the keywords listed in PASS_THROUGH, so that each value emptied here is checked
by that one subschema and nothing else (no allOf, unevaluatedProperties, patternProperties, ...).

The predicate is conservative: True only where jsonschema would accept the item (an int that is not a
bool, a str matched by the same re.search, a dict with exactly the allowed keys), False for anything it
does not prove, floats included. `prune` returns the document with every array whose items all pass
replaced by [] (the array schema being only {"type": "array", "items": ...}, an empty list stands for
it exactly); the caller validates that with jsonschema, and on any doubt validates the original."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Predicate = Callable[[Any], bool]

ANNOTATIONS = frozenset({"title", "description", "$comment"})
DRAFT = "https://json-schema.org/draft/2020-12/schema"
"""The only dialect prune() reads; a schema in any other is validated by jsonschema alone."""
PASS_THROUGH = frozenset({"type", "additionalProperties", "required", "properties", "$defs"})
"""Keywords an object schema may hold for prune() to descend into its properties ($schema and $id at the
root only: a nested $id would move the base of the $refs below it)."""
ARRAY_KEYS = frozenset({"type", "items"})
ITEM_KEYS = frozenset({"type", "additionalProperties", "required", "properties"})
INTEGER_KEYS = frozenset({"type", "minimum"})
STRING_KEYS = frozenset({"type", "pattern", "minLength", "maxLength"})


def _resolve(schema: Any, root: dict[str, Any]) -> Any:
    """A bare {"$ref": "#/$defs/NAME"} as the definition it names (once; None when absent); others as they are."""
    if isinstance(schema, dict) and set(schema) - ANNOTATIONS == {"$ref"}:
        ref = schema["$ref"]
        defs = root.get("$defs")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and isinstance(defs, dict):
            target = defs.get(ref[len("#/$defs/"):])
            return target if isinstance(target, dict) and "$ref" not in target else None
        return None
    return schema


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _length(value: Any) -> bool:
    return type(value) is int and value >= 0


def _property(schema: Any) -> Predicate | None:
    """The predicate of one property schema of the subset, or None when it lies outside."""
    if not isinstance(schema, dict):
        return None
    keys = set(schema) - ANNOTATIONS
    if schema.get("type") == "integer" and keys <= INTEGER_KEYS:
        if "minimum" not in schema:
            return lambda v: type(v) is int
        low = schema["minimum"]
        if not _number(low):
            return None
        return lambda v: type(v) is int and v >= low
    if schema.get("type") == "string" and keys <= STRING_KEYS:
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        if not _length(low) or not (high is None or _length(high)):
            return None
        pattern = schema.get("pattern")
        if pattern is not None and not isinstance(pattern, str):
            return None
        try:
            search = re.compile(pattern).search if pattern is not None else None
        except re.error:
            return None
        return lambda v: (type(v) is str and len(v) >= low and (high is None or len(v) <= high)
                          and (search is None or search(v) is not None))
    return None


def item_predicate(schema: Any, root: dict[str, Any]) -> Predicate | None:
    """A predicate that is True only for items `schema` accepts, or None when the schema lies outside
    the subset this module proves things for."""
    schema = _resolve(schema, root)
    if not isinstance(schema, dict) or set(schema) - ANNOTATIONS - ITEM_KEYS:
        return None
    props, required = schema.get("properties", {}), schema.get("required", [])
    if (schema.get("type") != "object" or schema.get("additionalProperties") is not False
            or not isinstance(props, dict) or not isinstance(required, list)
            or not all(isinstance(k, str) and k in props for k in required)):
        return None
    checks: dict[str, Predicate] = {}
    for name, sub in props.items():
        check = _property(_resolve(sub, root))
        if check is None:
            return None
        checks[name] = check
    must = frozenset(required)
    allowed = frozenset(checks)
    ordered = tuple(checks.items())

    def accept(item: Any) -> bool:
        if type(item) is not dict:
            return False
        keys = item.keys()
        if not (must <= keys <= allowed):
            return False
        for name, check in ordered:
            if name in item and not check(item[name]):
                return False
        return True

    return accept


def prune(doc: Any, schema: dict[str, Any]) -> tuple[Any, int]:
    """`doc` with every array of the subset whose items all pass emptied, and how many items were
    proved so. The input is not changed; containers on the way to an emptied array are copied."""
    if schema.get("$schema") != DRAFT:
        return doc, 0
    return _prune(doc, {k: v for k, v in schema.items() if k not in ("$schema", "$id")}, schema)


def _prune(doc: Any, schema: Any, root: dict[str, Any]) -> tuple[Any, int]:
    schema = _resolve(schema, root)
    if not isinstance(schema, dict):
        return doc, 0
    keys = set(schema) - ANNOTATIONS
    if isinstance(doc, list) and keys == ARRAY_KEYS and schema["type"] == "array":
        accept = item_predicate(schema["items"], root)
        if accept is not None and all(accept(item) for item in doc):
            return [], len(doc)
        return doc, 0
    props = schema.get("properties")
    if (type(doc) is not dict or schema.get("type") != "object" or keys - PASS_THROUGH
            or not isinstance(props, dict)):
        return doc, 0
    out, proved = doc, 0
    for name, sub in props.items():
        if name in doc:
            value, n = _prune(doc[name], sub, root)
            if n:
                if out is doc:
                    out = dict(doc)
                out[name] = value
                proved += n
    return out, proved
