"""The predictions Parquet files: exact columns, rows in pool order, stored probabilities and
predictions recomputed from the float32 logits, batches following the protocol's batch order."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bundle import layout, limits
from bundle.arrow_arrays import to_numpy
from verify import compat, numerics
from verify.context import METRIC_TOL, POOL_NAMES, Context
from verify.parsed import PoolData
from verify.protocol_checks import bounded_dimensions
from verify.result import Failed


def expected_schema(k: int, full_counts: bool = True) -> pa.Schema:
    """The columns of a K-class predictions file; `full_token_count` (the count before truncation)
    is last, and absent from files written before it existed (full_counts False)."""
    fields = [("idx", pa.int32()), ("split_key", pa.string()), ("text_sha256", pa.string()),
              ("label", pa.int64())]
    fields += [(f"logit_{i}", pa.float32()) for i in range(k)]
    fields += [(f"prob_{i}", pa.float64()) for i in range(k)]
    fields += [("pred", pa.int64()), ("token_count", pa.int32()), ("truncated", pa.bool_()),
               ("batch", pa.int32())]
    if full_counts:
        fields.append(("full_token_count", pa.int32()))
    return pa.schema(fields)


class PredictionsFile:
    """One predictions Parquet file, opened: its footer is read, no column is decoded yet.

    The one reader of the file format, for the verifier and for the job (which reads its own
    predictions and, in `reproduce`, a verified bundle's): opening, choosing columns and stacking
    the logit columns into a matrix happen here, and every failure is one Failed naming the file.
    What the numbers mean, and every check of them, stays with each caller."""

    def __init__(self, data: bytes | Path, path: str) -> None:
        self.path = path
        try:
            # a job's own file is memory-mapped; a bundle's is already in memory
            self.source = pq.ParquetFile(io.BytesIO(data) if isinstance(data, bytes) else data,
                                         memory_map=not isinstance(data, bytes))
        except Exception as exc:  # pyarrow raises many types for corrupt files
            raise Failed(f"{path} cannot be read as Parquet ({type(exc).__name__}: "
                         f"{str(exc)[:200]}).") from exc

    @property
    def names(self) -> list[str]:
        return list(self.source.schema_arrow.names)

    @property
    def logit_names(self) -> list[str]:
        """logit_0, logit_1, ...: the columns the file has, in class order."""
        k = sum(1 for name in self.names if name.startswith("logit_"))
        return [f"logit_{j}" for j in range(k)]

    def read(self, columns: list[str] | None = None) -> pa.Table:
        """The named columns (all when None), decoded; Failed when the data does not decode."""
        try:
            return self.source.read(columns=columns)
        except Exception as exc:  # pyarrow raises many types for corrupt files
            raise Failed(f"{self.path} cannot be read as Parquet ({type(exc).__name__}: "
                         f"{str(exc)[:200]}).") from exc


def logit_matrix(table: pa.Table, k: int) -> np.ndarray:
    """The [n, k] float32 logits of a predictions table, columns logit_0 .. logit_{k-1}."""
    if k == 0:
        return np.empty((table.num_rows, 0), dtype=np.float32)
    return np.stack([to_numpy(table.column(f"logit_{j}")) for j in range(k)], axis=1)


def _check_metadata(path: str, source: pq.ParquetFile, k: int, max_rows: int) -> None:
    """Refuse a file whose footer declares more rows, columns or uncompressed bytes than the
    pool can hold, before a column is decoded: zstd turns a few kilobytes of identical rows
    into gigabytes."""
    meta = source.metadata
    want = len(expected_schema(k))
    if meta.num_columns not in (want, want - 1):
        raise Failed(f"{path} has {meta.num_columns} columns, the format has {want} for {k} "
                     "classes.")
    if meta.num_rows > max_rows:
        raise Failed(f"{path} declares {meta.num_rows:,} rows, the protocol's pool holds "
                     f"{max_rows:,}.")
    cap = limits.parquet_cap(max_rows, k)
    size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if size > cap:
        raise Failed(f"{path} declares {size:,} bytes of column data, over the {cap:,} its "
                     f"{max_rows:,} rows may hold (FORMAT.md, Limits).")


def read_pool(name: str, data: bytes, k: int, max_rows: int = limits.MAX_ROWS,
              full_counts_required: bool = True) -> PoolData:
    """The predictions of pool `name`, at most `max_rows` rows (checked in the footer first);
    `full_token_count` may be absent only where `full_counts_required` is false (format 1)."""
    path = f"data/predictions/{name}.parquet"
    source = PredictionsFile(data, path)
    _check_metadata(path, source.source, k, max_rows)
    table = source.read()
    want = expected_schema(k, full_counts=full_counts_required or "full_token_count" in table.column_names)
    got = [(f.name, str(f.type)) for f in table.schema]
    expected = [(f.name, str(f.type)) for f in want]
    if got != expected:
        diff = [f"{g} != {e}" for g, e in zip(got, expected) if g != e]
        raise Failed(f"{path} has columns {len(got)} columns, expected {len(expected)} in the "
                     f"format's order and types; first differences: {diff[:3] or 'count'}.")
    for column in table.column_names:
        if table.column(column).null_count:
            raise Failed(f"{path} column {column!r} holds nulls.")
    z32 = logit_matrix(table, k)
    if not np.isfinite(z32).all():
        raise Failed(f"{path} holds a logit that is NaN or infinite.")
    y = to_numpy(table.column("label")).astype(np.int64)
    if len(y) and (y.min() < 0 or y.max() >= k):
        raise Failed(f"{path} holds labels outside 0..{k - 1}.")
    return PoolData(
        name=name,
        idx=table.column("idx").to_pylist(),
        split_key=table.column("split_key").to_pylist(),
        text_sha256=table.column("text_sha256").to_pylist(),
        z32=z32,
        z=z32.astype(np.float64),
        y=y,
        prob=np.stack([to_numpy(table.column(f"prob_{i}")) for i in range(k)], axis=1),
        pred=to_numpy(table.column("pred")).astype(np.int64),
        token_count=to_numpy(table.column("token_count")),
        truncated=to_numpy(table.column("truncated")),
        batch=to_numpy(table.column("batch")),
        full_token_count=(to_numpy(table.column("full_token_count"))
                          if "full_token_count" in table.column_names else None),
    )


def check_rows(pool: PoolData, entries: list[dict[str, Any]]) -> str:
    path = f"data/predictions/{pool.name}.parquet"
    if len(pool.idx) != len(entries):
        raise Failed(f"{path} has {len(pool.idx)} rows, pools.json lists {len(entries)} for "
                     f"{pool.name!r}.")
    for i, entry in enumerate(entries):
        row = (pool.idx[i], pool.split_key[i], pool.text_sha256[i])
        want = (entry["idx"], entry["split_key"], entry["text_sha256"])
        if row != want:
            raise Failed(f"{path} row {i} is (idx {row[0]}, key {row[1][:12]}…, text "
                         f"{row[2][:12]}…), pools.json lists (idx {want[0]}, key {want[1][:12]}…, "
                         f"text {want[2][:12]}…).")
    return f"{len(entries)} rows in pool order, ids and text hashes equal pools.json"


def check_probabilities(pool: PoolData, tol: float) -> str:
    path = f"data/predictions/{pool.name}.parquet"
    for b in numerics.row_blocks(len(pool.z), pool.z.shape[1]):
        p = numerics.probabilities(pool.z[b], 1.0)
        err = np.abs(p - pool.prob[b])
        if not (err <= tol).all():
            row, col = np.unravel_index(int(np.argmax(np.where(np.isnan(err), np.inf, err))),
                                        err.shape)
            raise Failed(f"{path} row {b.start + row} prob_{col} is {pool.prob[b][row, col]!r}, "
                         f"softmax of the logits gives {p[row, col]!r}.")
    pred = numerics.first_argmax(pool.z)
    bad = np.nonzero(pred != pool.pred)[0]
    if len(bad):
        raise Failed(f"{path} row {bad[0]} pred is {pool.pred[bad[0]]}, the first argmax of the "
                     f"logits is {pred[bad[0]]}.")
    return f"probabilities within {tol:g} of softmax(logits) in float64; pred = first argmax"


def check_batches(pool: PoolData, inference: dict[str, Any]) -> str:
    """Batches: rows sorted by token count descending, ties by split key ascending, then
    consecutive batches of batch_size; truncation only at max_length."""
    path = f"data/predictions/{pool.name}.parquet"
    size, max_length = inference["batch_size"], inference["max_length"]
    if len(pool.token_count) and (pool.token_count.min() < 1
                                  or pool.token_count.max() > max_length):
        raise Failed(f"{path} token counts span {pool.token_count.min()}.."
                     f"{pool.token_count.max()}, outside 1..{max_length}.")
    wrong_trunc = np.nonzero(pool.truncated & (pool.token_count != max_length))[0]
    if len(wrong_trunc):
        raise Failed(f"{path} row {wrong_trunc[0]} is marked truncated with "
                     f"{pool.token_count[wrong_trunc[0]]} tokens, not max_length {max_length}.")
    if pool.full_token_count is not None:
        full = pool.full_token_count
        wrong_full = np.nonzero(np.where(pool.truncated, full <= max_length, full != pool.token_count))[0]
        if len(wrong_full):
            r = wrong_full[0]
            raise Failed(f"{path} row {r} has {full[r]} tokens before truncation and {pool.token_count[r]} "
                         f"after, truncated {bool(pool.truncated[r])}; a row is cut exactly when it is longer "
                         f"than max_length {max_length}.")
    order = sorted(range(len(pool.idx)),
                   key=lambda i: (-int(pool.token_count[i]), pool.split_key[i]))
    expected = np.empty(len(order), dtype=np.int64)
    for position, row in enumerate(order):
        expected[row] = position // size
    bad = np.nonzero(expected != pool.batch)[0]
    if len(bad):
        raise Failed(f"{path} row {bad[0]} is in batch {pool.batch[bad[0]]}, the protocol's batch "
                     f"order puts it in batch {expected[bad[0]]}.")
    return f"{int(expected.max()) + 1 if len(expected) else 0} batches of {size} in protocol order"


# -- the checks (verify/checks.py lists them in order) ---------------------------------------

def each_pool(ctx: Context) -> list[dict[str, str]]:
    """One {pool} per pool with predictions, in report order."""
    return [{"pool": pool} for pool in POOL_NAMES]


def columns(ctx: Context, pool: str) -> str:
    """Parquet columns, order and types as FORMAT.md; no nulls; finite logits; labels in range."""
    path = f"data/predictions/{pool}.parquet"
    tree = ctx.bag()
    if path not in tree.files:
        raise Failed(f"{path} is missing.")
    protocol = ctx.doc(layout.PROTOCOL_JSON)
    dims = bounded_dimensions(protocol)
    k = len(protocol["resources"]["dataset"]["labels"])
    ctx.tables[pool] = read_pool(pool, tree.files[path], k, dims.pool_sizes.get(pool, dims.rows),
                                 full_counts_required=compat.bundle_format(ctx) >= 2)
    return f"{len(ctx.tables[pool].y)} rows, {k} classes, columns and types as specified"


def rows(ctx: Context, pool: str) -> str:
    """The rows are the pool's entries in order (idx, split key, text hash)."""
    return check_rows(ctx.table(pool), ctx.doc(layout.POOLS_JSON)["pools"][pool])


def probabilities(ctx: Context, pool: str) -> str:
    """prob_k is the softmax of the float32 logits in float64; pred is the first argmax."""
    return check_probabilities(ctx.table(pool), METRIC_TOL)


def batches(ctx: Context, pool: str) -> str:
    """Batches in the protocol's order; truncation at max_length, exactly for the longer rows."""
    return check_batches(ctx.table(pool), ctx.doc(layout.PROTOCOL_JSON)["inference"])
