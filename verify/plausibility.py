"""metrics.json's `warnings` and `truncation`, derived again from the logits, temperature.json and
the predictions' token counts (the rule of FORMAT.md "metrics.json", written here on its own)."""

# Whether a warning is called for is decided here again from the checked logits and records, an
# independent re-derivation of job/plausibility.py; only the wording is shared (bundle/wording.py).

from __future__ import annotations

from typing import Any

import numpy as np

from bundle import layout
from bundle.wording import at_bound_warning, below_chance_warning
from verify import numerics, perclass
from verify.context import POOL_NAMES, Context
from verify.result import Failed

WARNINGS_CHECK = "metrics.warnings"
UNRECORDED = " (recomputed; this bundle records no warnings)"
"""How the check's detail ends for a bundle written before metrics.json carried warnings."""
PER_CLASS_UNRECORDED = " (the per-class ones recomputed; this bundle records no per-class results)"
"""How it ends for a bundle written before per_class, whose logits call for per-class warnings."""


def expected_warnings(accuracy: float, k: int, temperature: dict[str, Any]) -> list[str]:
    """The warnings a run with this audit accuracy over k classes and this temperature record carries."""
    out = []
    chance = 1.0 / k
    if accuracy < chance:
        out.append(below_chance_warning(accuracy, chance))
    if temperature["boundary"]:
        out.append(at_bound_warning(temperature["temperature"], temperature["boundary_side"],
                                    temperature["t_min"], temperature["t_max"]))
    return out


def _has(ctx: Context, key: str) -> bool:
    """Whether metrics.json holds `key`; True when it could not be read, so that the check reports why."""
    m = ctx.docs.get(layout.METRICS_JSON)
    return not isinstance(m, dict) or key in m


def has_truncation(ctx: Context) -> bool:
    return _has(ctx, "truncation")


def warnings(ctx: Context) -> str:
    """The warnings are exactly those the audit accuracy, the temperature and the per-class counts call for."""
    m = ctx.doc(layout.METRICS_JSON)
    k = len(ctx.doc(layout.PROTOCOL_JSON)["resources"]["dataset"]["labels"])
    audit = ctx.table("audit")
    accuracy = float((numerics.first_argmax(audit.z) == audit.y).mean())
    expected = expected_warnings(accuracy, k, ctx.doc(layout.TEMPERATURE_JSON))
    by_class, _ = perclass.expected_warnings(ctx)
    if "per_class" in m:
        expected += by_class
    elif by_class:
        # A bundle written before per_class (its schema revision allows that, metrics.per-class):
        # its recorded list is checked by the earlier rule, and the per-class warnings are shown.
        recorded = m.get("warnings", [])
        if "warnings" in m and recorded != expected:
            raise Failed(f"metrics.json warns {recorded!r}, the logits and temperature.json call for "
                         f"{expected!r}.")
        return ("WARNING: " + "; WARNING: ".join(expected + by_class)
                + (PER_CLASS_UNRECORDED if "warnings" in m else UNRECORDED))
    if "warnings" not in m:
        # A bundle written before metrics.json carried warnings (format 1; format 2 requires them,
        # format.fields): the verifier says what they would be, so that writing an older format
        # cannot hide a run that went wrong.
        if expected:
            return "WARNING: " + "; WARNING: ".join(expected) + UNRECORDED
        return f"none called for (recomputed; this bundle records no warnings): audit accuracy {accuracy:.1%}"
    if m["warnings"] != expected:
        raise Failed(f"metrics.json warns {m['warnings']!r}, the logits and temperature.json call for "
                     f"{expected!r}.")
    if expected:
        return "WARNING: " + "; WARNING: ".join(expected)
    return f"none called for: audit accuracy {accuracy:.1%} at or above chance {1 / k:.1%}, T inside the fit interval"


def truncation(ctx: Context) -> str:
    """Each pool's truncation summary restates its predictions' truncated flags and full token counts."""
    m = ctx.doc(layout.METRICS_JSON)
    max_length = ctx.doc(layout.PROTOCOL_JSON)["inference"]["max_length"]
    details = []
    for pool in POOL_NAMES:
        data = ctx.table(pool)
        if data.full_token_count is None:
            raise Failed(f"metrics.json summarises truncation, but the {pool} predictions have no "
                         "full_token_count column to check it against.")
        full = np.asarray(data.full_token_count, dtype=np.int64)
        expected = {"rows": len(data.y), "truncated": int(np.count_nonzero(data.truncated)),
                    "longest_tokens": int(full.max()) if len(full) else 0, "max_length": int(max_length)}
        found = m["truncation"].get(pool)
        if found != expected:
            raise Failed(f"metrics.json truncation of {pool} is {found!r}, the predictions give {expected!r}.")
        details.append(f"{pool} {expected['truncated']} of {expected['rows']} cut (longest "
                       f"{expected['longest_tokens']} tokens)")
    return "; ".join(details) + f", at max_length {max_length}"
