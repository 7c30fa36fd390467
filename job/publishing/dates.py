"""The dates a bundle states, decided here once: the Bagging-Date (also the crate's datePublished)
and the archive's member mtime, both from SOURCE_DATE_EPOCH when it is set (reproducible builds)."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from bundle.errors import BundleError

TAR_MTIME_LIMIT = 8**11
"""A ustar header holds an mtime below 8**11 seconds (the year 2242)."""


def source_date_epoch() -> int | None:
    """SOURCE_DATE_EPOCH as whole seconds since 1970, or None when unset or empty; BundleError when
    it is not an integer."""
    value = os.environ.get("SOURCE_DATE_EPOCH", "")
    if not value:
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise BundleError(f"SOURCE_DATE_EPOCH is {value!r}, not a whole number of seconds since 1970; set it "
                          "to an integer or unset it.") from exc


def bagging_date() -> str:
    """YYYY-MM-DD (UTC) of SOURCE_DATE_EPOCH when set, else of now: the run's Bagging-Date and its
    crate's datePublished."""
    epoch = source_date_epoch()
    if epoch is None:
        return datetime.now(UTC).strftime("%Y-%m-%d")
    try:
        return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d")
    except (ValueError, OverflowError, OSError) as exc:
        raise BundleError(f"SOURCE_DATE_EPOCH is {epoch}, outside the dates this system can represent; "
                          "set it to a time since 1970 or unset it.") from exc


def archive_mtime() -> int:
    """The mtime of every archive member: SOURCE_DATE_EPOCH when set, else 0."""
    epoch = source_date_epoch()
    if epoch is None:
        return 0
    if not 0 <= epoch < TAR_MTIME_LIMIT:
        raise BundleError(f"SOURCE_DATE_EPOCH {epoch} is outside what a tar header holds; set it to a time "
                          "between 1970 and 2242.")
    return epoch
