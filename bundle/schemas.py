"""The JSON Schemas of the bundle format (schemas/<name>.schema.json), loaded and applied.

Every schema is Draft 2020-12 with `$id` https://calibration-runs.example/schemas/<name>/v1;
`$ref`s between schemas resolve from this directory only, never from the network.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource

from bundle.canonical import loads_strict
from bundle.errors import BundleError, SchemaViolation
from bundle.layout import schema_id_for
from bundle.memo import memoized

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"

SCHEMA_NAMES = (
    "protocol",
    "resources",
    "resource-lock",
    "pools",
    "temperature",
    "trajectory",
    "metrics",
    "stages",
    "environment",
    "bootstrap",
    "stability",
    "predicate",
    "statement",
    "envelope",
    "reproduction",
    "sweep",
    "sweep-plan",
    "sweep-index",
    "vsa",
)
"""Every schema the format defines."""


def schema_path(name: str) -> Path:
    """Path of schema `name`; raise BundleError for a name the format does not define."""
    if name not in SCHEMA_NAMES:
        raise BundleError(f"Unknown schema {name!r}; use one of {', '.join(SCHEMA_NAMES)}.")
    return SCHEMA_DIR / f"{name}.schema.json"


@functools.cache
def _schema_bytes(name: str) -> bytes:
    path = schema_path(name)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise BundleError(
            f"Cannot read schema file {path} ({exc.strerror}); run from a complete checkout "
            "that has the schemas/ directory."
        ) from exc


def schema_id(name: str) -> str:
    """The `$id` of schema `name`."""
    schema_path(name)
    return schema_id_for(name)


def schema_sha256(name: str) -> str:
    """sha256 hex of the schema file's bytes, as recorded in the predicate."""
    return hashlib.sha256(_schema_bytes(name)).hexdigest()


@functools.cache
def _load(name: str) -> dict[str, Any]:
    schema = loads_strict(_schema_bytes(name), source=str(schema_path(name)))
    if not isinstance(schema, dict) or schema.get("$id") != schema_id_for(name):
        raise BundleError(
            f"{schema_path(name)} does not declare $id {schema_id_for(name)}; restore the file "
            "from the repository."
        )
    return schema


@functools.cache
def _registry() -> Registry:
    return Registry().with_resources(
        (schema_id_for(n), Resource.from_contents(_load(n))) for n in SCHEMA_NAMES
    )


@functools.cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = _load(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(
        schema, registry=_registry(), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def _json_path(error: ValidationError) -> str:
    out = "$"
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _json_pointer(error: ValidationError) -> str:
    """The failing value's JSON Pointer (RFC 6901): "" for the whole document, "/a/0/b" below it."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in error.absolute_path)


def _first_violation(obj: Any, name: str) -> tuple[str, str, str] | None:
    """(JSON path, JSON Pointer, message) of the violation jsonschema ranks first, or None."""
    error = best_match(_validator(name).iter_errors(obj))
    if error is None:
        return None
    message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    return _json_path(error), _json_pointer(error), message


_remembered_violation = memoized(_first_violation)
"""_first_violation once per process for the same document and schema (bundle/memo.py: keyed by the
exact parsed values, so 1 and 1.0 are different documents)."""


def validate(obj: Any, name: str, *, source: str | None = None) -> None:
    """Raise SchemaViolation naming the document, the field and the violation if `obj` fails."""
    found = _remembered_violation(obj, name)
    if found is None:
        return
    where, pointer, message = found
    what = source or f"The {name} document"
    raise SchemaViolation(
        f"{what} does not follow schema {name}/v1 ({schema_path(name).name}): at "
        f"{where}, {message}; correct the file (or the code that wrote it).",
        document=source or name, schema=name, pointer=pointer, reason=message)
