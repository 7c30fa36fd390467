"""The pre-registered protocol (provenance.json): loaded, schema-checked and hashed before any work."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from job.documents import read_checked

DEFAULT_PROTOCOL = Path(__file__).resolve().parent.parent / "provenance.json"


@dataclass(frozen=True)
class Protocol:
    raw: bytes  # the exact bytes: their sha256 is the protocol's identity
    sha256: str
    doc: dict[str, Any]

    @property
    def pool_sizes(self) -> list[tuple[str, int]]:
        return [(p["name"], int(p["size"])) for p in self.doc["split"]["pools"]]

    @property
    def prefix(self) -> str:
        return str(self.doc["split"]["prefix"])

    @property
    def inference(self) -> dict[str, Any]:
        return dict(self.doc["inference"])

    @property
    def fit(self) -> dict[str, Any]:
        return dict(self.doc["fit"])

    @property
    def threshold(self) -> float:
        return float(self.doc["metrics"]["threshold"]["value"])

    @property
    def resources(self) -> dict[str, Any]:
        return dict(self.doc["resources"])


def load_protocol(path: Path = DEFAULT_PROTOCOL) -> Protocol:
    """Read, parse and schema-validate the protocol; its hash is fixed here, before inference."""
    raw, doc = read_checked(path, "protocol", "protocol", "--protocol")
    return Protocol(raw=raw, sha256=hashlib.sha256(raw).hexdigest(), doc=doc)
