"""Per-pool predictions as Parquet with fixed settings: ids, text hashes and numbers, no text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from bundle.arrow_arrays import from_numpy, strings, to_numpy
from job.calibration import softmax
from job.dataset import Strings
from verify.predictions import PredictionsFile, logit_matrix


@dataclass(frozen=True)
class PoolOutput:
    """What inference produced for one pool, in pool order."""

    logits: NDArray[np.float32]  # [n, K]
    token_count: NDArray[np.int64]
    truncated: NDArray[np.bool_]
    batch: NDArray[np.int64]  # index of the batch each row ran in
    full_token_count: NDArray[np.int64]  # token count before truncation


def _strings(values: Sequence[str]) -> pa.Array:
    """An Arrow `string` column of the values; a Strings column as it is, not copied."""
    return values.arrow() if isinstance(values, Strings) else strings(values)


def predictions_table(ids: NDArray[np.int64], keys: Sequence[str], text_sha256: Sequence[str],
                      labels: NDArray[np.int64], out: PoolOutput) -> pa.Table:
    """One row per pool member, in pool order; columns as in bundle/FORMAT.md."""
    k = out.logits.shape[1]
    probs = softmax(out.logits.astype(np.float64))
    cols: dict[str, pa.Array] = {
        "idx": from_numpy(ids.astype(np.int32), pa.int32()),
        "split_key": _strings(keys),
        "text_sha256": _strings(text_sha256),
        "label": from_numpy(labels.astype(np.int64), pa.int64()),
    }
    for j in range(k):
        cols[f"logit_{j}"] = from_numpy(out.logits[:, j], pa.float32())
    for j in range(k):
        cols[f"prob_{j}"] = from_numpy(probs[:, j], pa.float64())
    cols["pred"] = from_numpy(out.logits.argmax(axis=1).astype(np.int64), pa.int64())
    cols["token_count"] = from_numpy(out.token_count.astype(np.int32), pa.int32())
    cols["truncated"] = from_numpy(np.asarray(out.truncated, dtype=np.bool_), pa.bool_())
    cols["batch"] = from_numpy(out.batch.astype(np.int32), pa.int32())
    cols["full_token_count"] = from_numpy(out.full_token_count.astype(np.int32), pa.int32())
    return pa.table(cols)


def predictions_bytes(table: pa.Table) -> bytes:
    """The Parquet file of a predictions table: deterministic bytes for the same table and pyarrow version."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", use_dictionary=False, write_statistics=False,
                   version="2.6", data_page_version="1.0", store_schema=True)
    data: bytes = sink.getvalue().to_pybytes()
    return data


@dataclass(frozen=True)
class Predictions:
    """One pool's predictions file as written, for the stages after it: the float32 logits and
    labels it holds (the numbers every later record is computed from), its truncation columns and
    the sha256 of its bytes."""

    pool: str
    logits: NDArray[np.float32]  # [n, K], as stored
    labels: NDArray[np.int64]
    full_token_count: NDArray[np.int64]
    truncated: NDArray[np.bool_]
    sha256: str

    @classmethod
    def of_table(cls, pool: str, table: pa.Table, sha256: str) -> Predictions:
        """The record of `table` (predictions_table's columns), whose file has `sha256`."""
        logits, labels = table_logits(table)
        return cls(pool, logits, labels, to_numpy(table.column("full_token_count")).astype(np.int64),
                   to_numpy(table.column("truncated")).astype(np.bool_), sha256)


def table_logits(table: pa.Table) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """Logits [n, K] float32 and labels from a predictions table's logit_j and label columns."""
    k = sum(1 for name in table.column_names if name.startswith("logit_"))
    logits = np.stack([to_numpy(table.column(f"logit_{j}")) for j in range(k)], axis=1)
    return logits.astype(np.float32), to_numpy(table.column("label")).astype(np.int64)


def read_logits(path: Path) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """Logits [n, K] float32 and labels from a predictions file (only those columns are read),
    through the format's one reader (verify.predictions.PredictionsFile)."""
    source = PredictionsFile(path, str(path))
    table = source.read([*source.logit_names, "label"])
    logits = logit_matrix(table, len(source.logit_names))
    return logits.astype(np.float32), to_numpy(table.column("label")).astype(np.int64)
