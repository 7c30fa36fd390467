"""JSON Schema validation against the verifier's own copy of the schemas (the repository's
schemas/ folder); nothing is ever read from inside the bundle to decide what is valid."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

from bundle import layout
from verify.result import Failed

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"


@functools.cache
def _schema_bytes(name: str) -> bytes:
    path = SCHEMA_DIR / f"{name}.schema.json"
    try:
        return path.read_bytes()
    except OSError as exc:
        raise Failed(f"the verifier has no schema {name!r} ({path}: {exc.strerror}); reinstall "
                     "the verifier with its schemas/ folder.") from exc


def schema_sha256(name: str) -> str:
    """sha256 of the verifier's copy of schema `name`."""
    return hashlib.sha256(_schema_bytes(name)).hexdigest()


def schema_id(name: str) -> str:
    return layout.schema_id_for(name)


@functools.lru_cache(maxsize=1)
def _registry() -> Registry:
    resources = []
    for path in sorted(SCHEMA_DIR.glob("*.schema.json")):
        doc = json.loads(path.read_bytes())
        if isinstance(doc, dict) and "$id" in doc:
            resources.append((doc["$id"], Resource.from_contents(doc)))
    return Registry().with_resources(resources)


@functools.cache
def _validator(name: str) -> Any:
    schema = json.loads(_schema_bytes(name))
    if schema.get("$id") != schema_id(name):
        raise Failed(f"the verifier's schema {name!r} has $id {schema.get('$id')!r}, expected "
                     f"{schema_id(name)!r}; reinstall the verifier.")
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, registry=_registry())


def validate(doc: Any, name: str, source: str) -> None:
    """Raise Failed naming the first violation (path, message) of `doc` against schema `name`."""
    validator = _validator(name)
    error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if error is not None:
        where = "$" + "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]"
                              for p in error.absolute_path)
        raise Failed(f"{source} does not follow the verifier's schema {schema_id(name)} at "
                     f"{where}: {error.message[:300]}.")
