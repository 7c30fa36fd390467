"""web/src/int64hash.js against hashlib: the SHA-256 of int64 streams (the bootstrap's indices_sha256),
by WebAssembly (hash-wasm) and by the page's JavaScript SHA-256, on lengths either side of SHA-256's
block and padding boundaries and on multi-megabyte streams fed in odd chunks, run under node by
web/test/int64hash.mjs. Needs node (skipped without, except where CI=true)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
WEB = REPO / "web"


def _hash(streams: list[tuple[np.ndarray, list[int]]], tmp: Path) -> list[dict[str, object]]:
    cases = []
    for i, (values, chunks) in enumerate(streams):
        path = tmp / f"{i}.bin"
        values.astype("<i8").tofile(path)
        cases.append({"file": str(path), "chunks": chunks})
    (tmp / "job.json").write_text(json.dumps(cases))
    done = subprocess.run(["node", str(WEB / "test" / "int64hash.mjs"), str(tmp / "job.json")],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_int64_streams_hash_as_hashlib_hashes_their_bytes(node_ready: None, tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    streams: list[tuple[np.ndarray, list[int]]] = []
    # 0 to 17 values: 0 to 136 bytes, across one block (64 bytes) and the padding's 56-byte boundary
    for count in range(18):
        streams.append((rng.integers(0, 2**32, size=count), [count or 1]))
        streams.append((rng.integers(0, 2**32, size=count), [1]))
    # several megabytes in odd chunks, with a row that leaves half a block to the next
    streams.append((rng.integers(0, 49_488, size=700_001), [1, 7, 13, 4097, 49_488, 3]))
    streams.append((rng.integers(0, 2**32, size=300_000), [49_487]))
    # values beyond 32 bits (a Float64Array row): both words of each int64
    streams.append((rng.integers(0, 2**53, size=100_003), [9, 64, 1001]))
    for (values, chunks), found in zip(streams, _hash(streams, tmp_path), strict=True):
        want = hashlib.sha256(values.astype("<i8").tobytes()).hexdigest()
        assert found == {"wasm": want, "js": want, "kinds": ["wasm", "js"]}, (len(values), chunks)
