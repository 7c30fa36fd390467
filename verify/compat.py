"""Which bundle formats this verifier reads (bundle/FORMAT.md "Versions").

The signed predicate records the bundle's format version and the oldest verifier release that
reads it. A bundle of a format this release does not know is refused with one sentence that says
to upgrade, instead of a cascade of failed checks on fields this release has never heard of."""

from __future__ import annotations

from typing import Any, Final

from bundle import layout
from verify.context import Context
from verify.release import __version__
from verify.result import Failed

READS_FORMATS: Final = frozenset({1, 2})
"""The bundle format versions this release checks completely."""
DISTRIBUTION: Final = "calibration-verify"

REQUIRED_SINCE: Final[dict[int, tuple[tuple[str, str], ...]]] = {
    2: ((layout.ENVIRONMENT_JSON, "arithmetic"),
        (layout.ENVIRONMENT_JSON, "threads"),
        (layout.METRICS_JSON, "truncation"),
        (layout.METRICS_JSON, "warnings"),
        (layout.RESOURCES_JSON, "model.revision_checked_by_hub"),
        (layout.RESOURCES_JSON, "dataset.revision_checked_by_hub")),
}
"""(file, dotted field) that a format requires and earlier formats lack. Their schemas keep them
optional, so that format-1 documents still validate; this table makes them required from the
format that introduced them. A bundle relabelled as an older format is caught by its schema pins
(verify.claims.NEWER_THAN), and the warnings are recomputed for every bundle whatever its format
(verify.plausibility.warnings). The predictions' `full_token_count` column is required the same
way (verify.predictions.columns)."""


def _release(text: str) -> tuple[int, ...]:
    """A dotted release number as a tuple of ints ("1.10.0" > "1.9.2")."""
    return tuple(int(part) for part in text.split("."))


def check_format(predicate: dict[str, Any], verifier_version: str = __version__) -> str:
    """The bundle's format is one this release reads, and this release is not older than the
    oldest verifier the bundle names."""
    fmt = predicate.get("format")
    if not isinstance(fmt, dict) or not isinstance(fmt.get("version"), int) \
            or not isinstance(fmt.get("oldest_verifier"), str):
        raise Failed("the signed predicate states no format version (format.version and "
                     "format.oldest_verifier); this is not a calibration bundle this verifier reads.")
    version, oldest = fmt["version"], fmt["oldest_verifier"]
    try:
        too_old = _release(verifier_version) < _release(oldest)
    except ValueError as exc:
        raise Failed(f"format.oldest_verifier {oldest[:40]!r} is not a release number.") from exc
    if version not in READS_FORMATS or too_old:
        known = ", ".join(str(v) for v in sorted(READS_FORMATS))
        raise Failed(f"this bundle is format {version}, which {DISTRIBUTION} {verifier_version} does "
                     f"not read (it reads format {known}); upgrade the verifier to {oldest} or later "
                     f"(pip install --upgrade {DISTRIBUTION}) and verify again.")
    return f"format {version}, read by {DISTRIBUTION} {oldest} and later (this is {verifier_version})"


def bundle_format(ctx: Context) -> int:
    """The format version the signed statement states (format.version checked it is one this
    release reads)."""
    statement = ctx.need(ctx.statement, "signature.statement")
    return int(statement["predicate"]["format"]["version"])


def _has(doc: Any, dotted: str) -> bool:
    for part in dotted.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return False
        doc = doc[part]
    return True


def format_fields(ctx: Context) -> str:
    """Every record holds the fields its format requires (REQUIRED_SINCE)."""
    version = bundle_format(ctx)
    wanted = [pair for since, pairs in sorted(REQUIRED_SINCE.items()) if since <= version for pair in pairs]
    missing = [f"{path} {field}" for path, field in wanted if not _has(ctx.doc(path), field)]
    if missing:
        raise Failed(f"this format-{version} bundle lacks fields its format requires: {', '.join(missing)}.")
    return f"the {len(wanted)} fields format {version} added are present" if wanted else "no fields to add"


def format_version(ctx: Context) -> str:
    """The bundle's format version is one this verifier reads."""
    statement = ctx.need(ctx.statement, "signature.statement")
    return check_format(statement["predicate"])
