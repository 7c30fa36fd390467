"""Streaming file digests (1 MiB chunks)."""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 1 << 20


def file_digests(path: Path) -> tuple[str, str]:
    """(sha256 hex, sha512 hex) of a file."""
    sha256, sha512 = hashlib.sha256(), hashlib.sha512()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            sha256.update(chunk)
            sha512.update(chunk)
    return sha256.hexdigest(), sha512.hexdigest()


def sha256_file(path: Path) -> str:
    """sha256 hex of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
