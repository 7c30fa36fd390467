"""The stages hand their records on in memory: after a file is written into data/, the run never
reads it back (the freeze check of temperature.json aside, which hashes it on purpose), and the
ledger it seals from holds each file's digests and size as written."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from bundle import layout
from job.publishing.seal import payload_files


def test_execute_reads_no_payload_file_back_and_its_ledger_is_the_files(
        tiny_world: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from job.pipeline import execute
    from job.protocol import load_protocol
    from job.resources import resolve_local

    protocol_path, lock = tiny_world
    protocol = load_protocol(protocol_path)
    resources = resolve_local(lock, protocol.resources)
    data = tmp_path / "bag" / "data"
    reads: list[str] = []

    def guarded(real: Any) -> Any:
        def read(path: Any, *args: Any, **kwargs: Any) -> Any:
            if Path(str(path)).resolve().is_relative_to(data.resolve()):
                reads.append(str(path))
            return real(path, *args, **kwargs)
        return read

    monkeypatch.setattr(pq, "read_table", guarded(pq.read_table))
    monkeypatch.setattr(pq, "read_schema", guarded(pq.read_schema))
    monkeypatch.setattr(Path, "read_bytes", guarded(Path.read_bytes))
    monkeypatch.setattr(Path, "read_text", guarded(Path.read_text))
    result = execute(protocol, resources, data, progress=False)
    monkeypatch.undo()
    assert reads == []
    bag = data.parent
    assert sorted(result.ledger) == payload_files(bag) == list(layout.expected_payload(protocol.doc))
    for path, written in result.ledger.items():
        raw = (bag / path).read_bytes()
        assert (written.sha256, written.sha512, written.size) == (
            hashlib.sha256(raw).hexdigest(), hashlib.sha512(raw).hexdigest(), len(raw))
    assert result.predicate["temperature"]["sha256"] == result.ledger[layout.TEMPERATURE_JSON].sha256
