"""The payload as it is written: each file's sha256, sha512 and size, taken from the bytes as they
are written, which job.publishing.seal.seal seals from (no payload file is read or hashed again).

A `Ledger` is the only writer of a bag's data/: every file goes through `write_bytes` or
`write_json`, once. A JSON payload file (bundle.layout.PAYLOAD_SCHEMAS) is schema-checked before
a byte of it is written: `write_json` validates the document and writes its canonical bytes;
`write_bytes` given a JSON path parses the bytes strictly first (canonical, except protocol.json,
which is copied byte for byte). So what a ledger lists is what seal may sign.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundle import layout
from bundle.canonical import dumps, loads_strict, require_canonical
from bundle.errors import BundleError
from bundle.schemas import validate

__all__ = ["Ledger", "Written"]


@dataclass(frozen=True)
class Written:
    """One payload file as written: its digests (hex) and its size in bytes."""

    sha256: str
    sha512: str
    size: int

    @classmethod
    def of(cls, data: bytes) -> Written:
        return cls(hashlib.sha256(data).hexdigest(), hashlib.sha512(data).hexdigest(), len(data))


class Ledger(Mapping[str, Written]):
    """The files written under bag/data/, by bag path ("data/temperature.json"), each written once."""

    def __init__(self, bag: Path) -> None:
        self.bag = Path(bag)
        (self.bag / layout.DATA_DIR).mkdir(parents=True, exist_ok=True)
        self._written: dict[str, Written] = {}

    def __getitem__(self, path: str) -> Written:
        return self._written[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._written)

    def __len__(self) -> int:
        return len(self._written)

    def write_bytes(self, path: str, data: bytes) -> Written:
        """Write `data` at bag path `path` (under data/), fsync it and record its digests. A JSON
        payload path is parsed and schema-checked first; a path already written is refused."""
        if not path.startswith(f"{layout.DATA_DIR}/"):
            raise BundleError(f"{path} is not under {layout.DATA_DIR}/; write payload files only.")
        if path in self._written:
            raise BundleError(f"{path} was already written; write each payload file once.")
        if path in layout.PAYLOAD_SCHEMAS:
            parse = loads_strict if path == layout.PROTOCOL_JSON else require_canonical
            validate(parse(data, source=path), layout.PAYLOAD_SCHEMAS[path], source=path)
        return self._write(path, data)

    def write_json(self, path: str, doc: Mapping[str, Any]) -> Written:
        """Validate `doc` against the schema bundle.layout assigns to `path`, then write its
        canonical bytes (bundle.canonical.dumps)."""
        if path in self._written:
            raise BundleError(f"{path} was already written; write each payload file once.")
        validate(doc, layout.PAYLOAD_SCHEMAS[path])
        return self._write(path, dumps(doc))

    def _write(self, path: str, data: bytes) -> Written:
        target = self.bag / path
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        self._written[path] = Written.of(data)
        return self._written[path]
