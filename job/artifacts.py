"""Writes the run's artifacts into the bundle's data/ directory and remembers their hashes.

Files are named by their bag paths (bundle.layout: "data/temperature.json"); hashes are reported
under their names inside data/ ("temperature.json"), the names stage records use."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from bundle.canonical import dumps
from bundle.digests import sha256_file
from bundle.layout import PAYLOAD_SCHEMAS, data_name
from bundle.schemas import validate
from job.errors import JobError
from job.predictions import write_predictions


class Artifacts:
    """Every JSON file is schema-validated before it is written; every file's sha256 is kept.

    `path` arguments are bag paths (bundle.layout names); `sha256` is keyed by the name inside data/;
    `validated` maps the bag path of each JSON file written by write_json to the sha256 of the
    canonical, schema-valid bytes written (what bundle.bag.seal may take instead of parsing it again)."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sha256: dict[str, str] = {}
        self.validated: dict[str, str] = {}

    def path(self, path: str) -> Path:
        return self.dir / data_name(path)

    def digest(self, path: str) -> str:
        """The sha256 recorded when `path` was written."""
        return self.sha256[data_name(path)]

    def write_bytes(self, path: str, data: bytes) -> str:
        target, rel = self.path(path), data_name(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        self.sha256[rel] = hashlib.sha256(data).hexdigest()
        return self.sha256[rel]

    def write_json(self, path: str, doc: dict[str, Any]) -> str:
        """Canonical JSON, validated first against the schema bundle.layout assigns to `path`."""
        validate(doc, PAYLOAD_SCHEMAS[path])
        self.validated[path] = self.write_bytes(path, dumps(doc))
        return self.validated[path]

    def write_table(self, path: str, table: pa.Table) -> str:
        write_predictions(table, self.path(path))
        self.sha256[data_name(path)] = sha256_file(self.path(path))
        return self.digest(path)

    def unchanged(self, path: str) -> bool:
        """Whether the file at `path` still has the hash recorded when it was written."""
        return sha256_file(self.path(path)) == self.digest(path)

    def freeze(self, path: str) -> None:
        """Make a written artifact read-only and confirm it still has the hash we recorded."""
        self.path(path).chmod(0o444)
        if not self.unchanged(path):
            raise JobError(f"{path} changed while it was being frozen; something else writes into the "
                           "bundle's staging directory, so stop it and run the job again.")

    def pick(self, *paths: str) -> dict[str, str]:
        """{name inside data/: sha256} of the written files at `paths`, for a stage record."""
        return {data_name(p): self.digest(p) for p in paths}
