"""The evaluation rows: read from the pinned parquet and checked against the protocol."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from job.errors import JobError


@dataclass(frozen=True)
class Rows:
    ids: NDArray[np.int64]
    texts: tuple[str, ...]
    labels: NDArray[np.int64]
    text_sha256: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.texts)


def load_rows(path: Path, spec: dict[str, Any]) -> Rows:
    """Read the parquet and check columns, types, labels, row count and unique ids per `spec`."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise JobError(f"Cannot read the dataset {path} as Parquet ({exc}); check the file.") from exc
    want = spec["columns"]
    found = {f.name: str(f.type) for f in table.schema}
    for name, dtype in want.items():
        if found.get(name) != dtype:
            got = found.get(name, "missing")
            raise JobError(
                f"Dataset column {name!r} is {got}, expected {dtype} as pinned; "
                "use the pinned SST-2 validation file."
            )
    if table.num_rows != spec["rows"]:
        raise JobError(
            f"The dataset has {table.num_rows} rows, expected {spec['rows']} as pinned; "
            "use the pinned SST-2 validation file."
        )
    ids = table.column("idx").to_numpy().astype(np.int64)
    labels = table.column("label").to_numpy().astype(np.int64)
    texts = tuple(table.column("sentence").to_pylist())
    if any(t is None for t in texts):
        raise JobError("The dataset has a missing sentence; use the pinned SST-2 validation file.")
    unique, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        dup = unique[counts > 1][:5].tolist()
        raise JobError(f"The dataset has duplicate idx values {dup}; every row needs a unique idx.")
    n_labels = len(spec["labels"])
    bad = sorted(set(labels.tolist()) - set(range(n_labels)))
    if bad:
        raise JobError(
            f"The dataset has label values {bad[:5]} outside 0..{n_labels - 1} "
            f"({', '.join(spec['labels'])}); use the pinned file."
        )
    hashes = tuple(hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts)
    return Rows(ids=ids, texts=texts, labels=labels, text_sha256=hashes)
