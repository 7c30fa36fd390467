"""JSON Schema validation against the verifier's own copy of the schemas (the repository's
schemas/ folder); nothing is ever read from inside the bundle to decide what is valid."""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

import jsonschema
from referencing import Registry, Resource

from bundle import layout
from bundle.canonical import dumps, loads_strict
from bundle.errors import CanonicalJSONError
from bundle.memo import memoized
from bundle.schemas import SCHEMA_DIR
from verify import bag, fastarrays
from verify.context import Context
from verify.result import Failed, SchemaCheckFailed


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


def _first_violation(doc: Any, name: str) -> tuple[str, str, str] | None:
    """(JSON path, JSON Pointer, message) of the violation jsonschema ranks first, or None.

    Large arrays of flat records whose items verify.fastarrays proves valid are emptied before
    jsonschema reads the rest; whenever that leaves anything invalid, jsonschema validates the whole
    original document, so the verdict and the message are always jsonschema's."""
    validator = _validator(name)
    pruned, proved = fastarrays.prune(doc, validator.schema)
    if proved and validator.is_valid(pruned):
        return None
    error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if error is None:
        return None
    where = "$" + "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in error.absolute_path)
    pointer = "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in error.absolute_path)
    return where, pointer, error.message[:300]


_remembered_violation = memoized(_first_violation)
"""_first_violation once per process for the same document and schema (bundle/memo.py: the key is
the exact parsed values, so 1 and 1.0 or true and 1 are different documents): a process that checks
an archive and its folder, a sweep again, or bundles that share most of their files validates each
document once."""


def validate(doc: Any, name: str, source: str) -> None:
    """Raise Failed naming the first violation (path, message) of `doc` against schema `name`."""
    found = _remembered_violation(doc, name)
    if found is not None:
        where, pointer, reason = found
        raise SchemaCheckFailed(f"{source} does not follow the verifier's schema {schema_id(name)} "
                                f"at {where}: {reason}.", file=source, pointer=pointer, reason=reason)


# -- the checks (verify/checks.py lists them in order) ---------------------------------------

def json_files(ctx: Context) -> list[dict[str, str]]:
    """One {path, name} per JSON payload file the bag holds or the format expects of it."""
    tree = ctx.tree
    try:
        expected = set(bag.expected_payload(tree)) if tree is not None else set()
    except Failed:
        expected = set(layout.PAYLOAD_FILES)
    return [{"path": path, "name": name} for path, name in layout.PAYLOAD_SCHEMAS.items()
            if path in expected or (tree is not None and path in tree.files)]


def json_file(ctx: Context, path: str, name: str) -> str:
    """A JSON payload file: strict, canonical (but protocol.json), valid against our schema."""
    tree = ctx.bag()
    if path not in tree.files:
        raise Failed(f"{path} is missing.")
    data = tree.files[path]
    try:  # the protocol's one parse is the bag's (it set the file caps); every other file is parsed here
        doc = tree.protocol() if path == layout.PROTOCOL_JSON else loads_strict(data, source=path)
    except CanonicalJSONError as exc:
        raise Failed(str(exc)) from exc
    canonical = path not in layout.NON_CANONICAL_PAYLOAD
    if canonical and dumps(doc) != data:
        raise Failed(f"{path} is valid JSON but not canonical (sorted keys, no spaces, "
                     "floats as repr, one trailing newline); it was edited by hand.")
    validate(doc, name, path)
    ctx.docs[path] = doc
    return (f"{'canonical, ' if canonical else 'strict JSON, '}valid against "
            f"{schema_id(name)}")


def signed_statement(ctx: Context) -> str:
    """The signed statement and its predicate against the verifier's schemas."""
    doc = ctx.need(ctx.statement, "signature.statement")
    validate(doc, "statement", "the signed statement")
    ctx.docs["predicate"] = doc["predicate"]
    return (f"valid against {schema_id('statement')} and "
            f"{schema_id('predicate')}")
