"""Per-pool predictions as Parquet with fixed settings: ids, text hashes and numbers, no text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from job.calibration import softmax
from job.dataset import Strings


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
    return values.arrow() if isinstance(values, Strings) else pa.array(list(values), pa.string())


def predictions_table(ids: NDArray[np.int64], keys: Sequence[str], text_sha256: Sequence[str],
                      labels: NDArray[np.int64], out: PoolOutput) -> pa.Table:
    """One row per pool member, in pool order; columns as in bundle/FORMAT.md."""
    k = out.logits.shape[1]
    probs = softmax(out.logits.astype(np.float64))
    cols: dict[str, pa.Array] = {
        "idx": pa.array(ids.astype(np.int32), pa.int32()),
        "split_key": _strings(keys),
        "text_sha256": _strings(text_sha256),
        "label": pa.array(labels.astype(np.int64), pa.int64()),
    }
    for j in range(k):
        cols[f"logit_{j}"] = pa.array(out.logits[:, j], pa.float32())
    for j in range(k):
        cols[f"prob_{j}"] = pa.array(probs[:, j], pa.float64())
    cols["pred"] = pa.array(out.logits.argmax(axis=1).astype(np.int64), pa.int64())
    cols["token_count"] = pa.array(out.token_count.astype(np.int32), pa.int32())
    cols["truncated"] = pa.array(out.truncated, pa.bool_())
    cols["batch"] = pa.array(out.batch.astype(np.int32), pa.int32())
    cols["full_token_count"] = pa.array(out.full_token_count.astype(np.int32), pa.int32())
    return pa.table(cols)


def write_predictions(table: pa.Table, path: Path) -> None:
    """Deterministic bytes for the same table and pyarrow version."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd", use_dictionary=False, write_statistics=False,
                   version="2.6", data_page_version="1.0", store_schema=True)


def read_logits(path: Path) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """Logits [n, K] float32 and labels from a predictions file (only those columns are read)."""
    logit_names = [name for name in pq.read_schema(path).names if name.startswith("logit_")]
    table = pq.read_table(path, columns=[*logit_names, "label"])
    k = len(logit_names)
    logits = np.stack([table.column(f"logit_{j}").to_numpy() for j in range(k)], axis=1)
    return logits.astype(np.float32), table.column("label").to_numpy().astype(np.int64)
