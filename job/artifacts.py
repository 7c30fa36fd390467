"""Writes the run's artifacts into the bundle's data/ directory, each once, through a
job.publishing.ledger.Ledger that records every file's digests as it is written (what seal seals from).

Files are named by their bag paths (bundle.layout: "data/temperature.json"); hashes are reported
under their names inside data/ ("temperature.json"), the names stage records use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from bundle.digests import sha256_file
from bundle.layout import DATA_DIR, data_name
from job.errors import JobError
from job.predictions import predictions_bytes
from job.publishing.ledger import Ledger


class Artifacts:
    """Every JSON file is schema-validated before it is written (job.publishing.ledger.Ledger.write_json);
    every file's digests are recorded from the bytes written, in `ledger`.

    `path` arguments are bag paths (bundle.layout names); data_dir must be a bag's data/ folder."""

    def __init__(self, data_dir: Path) -> None:
        if data_dir.name != DATA_DIR:
            raise JobError(f"{data_dir} is not named {DATA_DIR}; write the payload into a bag's {DATA_DIR}/ folder.")
        self.dir = data_dir
        self.ledger = Ledger(data_dir.parent)

    def path(self, path: str) -> Path:
        return self.dir / data_name(path)

    def digest(self, path: str) -> str:
        """The sha256 recorded when `path` was written."""
        return self.ledger[path].sha256

    def write_bytes(self, path: str, data: bytes) -> str:
        return self.ledger.write_bytes(path, data).sha256

    def write_json(self, path: str, doc: dict[str, Any]) -> str:
        """Canonical JSON, validated first against the schema bundle.layout assigns to `path`."""
        return self.ledger.write_json(path, doc).sha256

    def write_table(self, path: str, table: pa.Table) -> str:
        """A predictions table as Parquet (job.predictions.predictions_bytes), serialised in memory
        so that its bytes are hashed as they are written."""
        return self.write_bytes(path, predictions_bytes(table))

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
