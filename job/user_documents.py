"""Reading the JSON documents a user hands the job (protocol, resource lock), schema-checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bundle.errors import BundleError
from bundle.limits import DOCUMENT_BYTES
from bundle.schemas import validate
from bundle.userfile import read_user_file
from job.errors import JobError


def read_checked(path: Path, schema: str, label: str, option: str,
                 cap: int = DOCUMENT_BYTES) -> tuple[bytes, dict[str, Any]]:
    """(raw bytes, parsed object) of a JSON file that follows schemas/<schema>.schema.json: a
    regular file of at most `cap` bytes (JobError, one sentence, for anything else)."""
    raw = read_user_file(path, f"{label} ({option})", cap, JobError)
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise JobError(f"The {label} {path} is not valid JSON ({exc}); fix the file.", path=str(path),
                       reason="invalid-json") from exc
    try:
        validate(doc, schema)
    except BundleError as exc:
        raise JobError(f"The {label} {path} does not follow schemas/{schema}.schema.json: {exc}",
                       **{**exc.details, "path": str(path)}) from exc
    return raw, doc
