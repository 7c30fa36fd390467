"""The signed predicate restates the payload: recompute each claim from the payload files and the
verifier's own schemas, and compare."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Final

from bundle import layout
from bundle.predicate import restated_claims
from bundle.schemas import SCHEMA_DIR
from verify import schemacheck
from verify.context import Context
from verify.result import Failed

CHECKED_ELSEWHERE = ("format", "publication")
"""Predicate claims with a check of their own (format.version, crate.publication)."""


def expected_predicate(ctx: Context) -> dict[str, Any]:
    """The predicate restated from the payload, the verifier's schemas and the signer."""
    resources = ctx.doc(layout.RESOURCES_JSON)
    temperature = ctx.doc(layout.TEMPERATURE_JSON)
    metrics = ctx.doc(layout.METRICS_JSON)
    return {
        **restated_claims(protocol_sha256=ctx.sha(layout.PROTOCOL_JSON), resources=resources,
                          temperature=temperature, temperature_sha256=ctx.sha(layout.TEMPERATURE_JSON),
                          metrics=metrics),
        "schemas": {path: {"id": schemacheck.schema_id(name),
                           "sha256": schemacheck.schema_sha256(name)}
                    for path, name in sorted(layout.PAYLOAD_SCHEMAS.items())
                    if path in ctx.bag().files},
        "signer_fingerprint": ctx.need(ctx.signer_fingerprint, "signature.statement"),
    }


def released_digests_file(version: int) -> Path:
    """schemas/format-N.digests.json: earlier revisions of each payload schema that bundles of
    format N may name."""
    return SCHEMA_DIR / f"format-{version}.digests.json"


@functools.lru_cache(maxsize=4)
def released_digests(version: int) -> dict[str, frozenset[str]]:
    """Schema name -> sha256 of its earlier revisions that format `version` may name."""
    path = released_digests_file(version)
    if not path.is_file():
        return {}
    doc = json.loads(path.read_bytes())
    return {name: frozenset(digests) for name, digests in doc["schemas"].items()}


NEWER_THAN: Final[dict[int, frozenset[str]]] = {1: frozenset({"environment", "metrics", "protocol", "resources"})}
"""Format -> the payload schemas whose current revision belongs to a later format. A bundle of that
format must name one of its own format's revisions of them (schemas/format-N.digests.json), so
that a newer bundle cannot be relabelled as an older format to shed the fields the newer one
requires (verify.compat.REQUIRED_SINCE)."""


def _newer_schema_pins(signed: dict[str, Any], version: int) -> list[str]:
    """The payload files whose signed schema pin names a revision newer than format `version`."""
    newer = NEWER_THAN.get(version, frozenset())
    return [path for path, pin in sorted(signed.items())
            if layout.PAYLOAD_SCHEMAS.get(path) in newer and isinstance(pin, dict)
            and pin.get("sha256") == schemacheck.schema_sha256(layout.PAYLOAD_SCHEMAS[path])]


def _released_pin(path: str, pin: Any, version: int) -> bool:
    """Whether `pin` names this path's schema at an earlier revision of format `version`."""
    name = layout.PAYLOAD_SCHEMAS.get(path)
    return (name is not None and isinstance(pin, dict) and pin.get("id") == schemacheck.schema_id(name)
            and pin.get("sha256") in released_digests(version).get(name, frozenset()))


def _diff(found: Any, expected: Any, where: str, out: list[str]) -> None:
    if isinstance(expected, dict) and isinstance(found, dict):
        for key in sorted(set(found) | set(expected)):
            if key not in found:
                out.append(f"{where}.{key} is missing")
            elif key not in expected:
                out.append(f"{where}.{key} is not a payload fact")
            else:
                _diff(found[key], expected[key], f"{where}.{key}", out)
    elif isinstance(expected, list) and isinstance(found, list) and len(found) == len(expected):
        for i, (f, e) in enumerate(zip(found, expected)):
            _diff(f, e, f"{where}[{i}]", out)
    elif type(found) is not type(expected) or found != expected:
        out.append(f"{where}: signed {str(found)[:40]!r}, payload {str(expected)[:40]!r}")


def check(predicate: dict[str, Any], ctx: Context) -> str:
    expected = expected_predicate(ctx)
    expected.update({k: predicate[k] for k in CHECKED_ELSEWHERE if k in predicate})
    signed_schemas = predicate.get("schemas")
    fmt = predicate.get("format")
    version = fmt.get("version") if isinstance(fmt, dict) else None
    if isinstance(signed_schemas, dict) and isinstance(version, int):
        newer = _newer_schema_pins(signed_schemas, version)
        if newer:
            raise Failed(f"the bundle states format {version} but names a later format's schema for "
                         f"{', '.join(newer)}; it is not a format-{version} bundle.")
        for path, pin in signed_schemas.items():
            if path in expected["schemas"] and _released_pin(path, pin, version):
                expected["schemas"][path] = pin  # an earlier revision of this format's schema
    diffs: list[str] = []
    _diff(predicate, expected, "predicate", diffs)
    schema_diffs = [d for d in diffs if d.startswith("predicate.schemas")]
    if schema_diffs:
        raise Failed(f"the bundle was written against schemas this verifier does not know: "
                     f"{schema_diffs[0]}; use the verifier release that matches the bundle.")
    if diffs:
        more = f" (+{len(diffs) - 2} more)" if len(diffs) > 2 else ""
        raise Failed("the signed predicate does not restate the payload: "
                     + "; ".join(diffs[:2]) + more + ".")
    return ("protocol, profile, resource pins, temperature, audit headline, schema pins and "
            "signer all equal the payload and the verifier's schemas")


def predicate_claims(ctx: Context) -> str:
    """Every claim of the signed predicate restates the payload and the verifier's schemas."""
    return check(ctx.doc("predicate"), ctx)
