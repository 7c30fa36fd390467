"""Writes the run's artifacts into the bundle's data/ directory and remembers their hashes."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from bundle.canonical import dumps
from bundle.digests import sha256_file
from bundle.schemas import validate
from job.predictions import write_predictions


class Artifacts:
    """Every JSON file is schema-validated before it is written; every file's sha256 is kept."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sha256: dict[str, str] = {}

    def path(self, rel: str) -> Path:
        return self.dir / rel

    def write_bytes(self, rel: str, data: bytes) -> str:
        target = self.path(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        self.sha256[rel] = hashlib.sha256(data).hexdigest()
        return self.sha256[rel]

    def write_json(self, rel: str, doc: dict[str, Any], schema: str) -> str:
        validate(doc, schema)
        return self.write_bytes(rel, dumps(doc))

    def write_table(self, rel: str, table: pa.Table) -> str:
        write_predictions(table, self.path(rel))
        self.sha256[rel] = sha256_file(self.path(rel))
        return self.sha256[rel]

    def freeze(self, rel: str) -> None:
        """Make a written artifact read-only and confirm it still has the hash we recorded."""
        self.path(rel).chmod(0o444)
        if sha256_file(self.path(rel)) != self.sha256[rel]:
            raise RuntimeError(f"{rel} changed after it was written")

    def pick(self, *rels: str) -> dict[str, str]:
        return {rel: self.sha256[rel] for rel in rels}
