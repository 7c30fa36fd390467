"""The evaluation rows: read from the pinned data files and checked against the protocol.

How a file is read is the protocol's dataset section (`DatasetSpec`): its format (Parquet, JSON
lines or CSV), the id column (or the row number when the dataset has none), one text column or a
pair, and the label column. Every field is optional; the defaults are the SST-2 layout (Parquet,
`idx`, `sentence`, `label`), so a protocol that names none of them reads exactly as before."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np
import pyarrow as pa
import pyarrow.csv as pc
import pyarrow.json as pj
import pyarrow.parquet as pq
from numpy.typing import NDArray

from bundle import arrow_arrays
from job.errors import JobError
from job.rowcheck import check_rows

FORMATS = ("parquet", "jsonl", "csv")


@dataclass(frozen=True)
class DatasetSpec:
    """How to read the rows: `resources.dataset` fields `format`, `id_column` (null: the row number,
    0-based over the data files in listed order), `text_column`, `text_pair_column` (null: one text
    per row) and `label_column`."""

    format: str = "parquet"
    id_column: str | None = "idx"
    text_column: str = "sentence"
    text_pair_column: str | None = None
    label_column: str = "label"

    @classmethod
    def from_protocol(cls, section: dict[str, Any]) -> DatasetSpec:
        d = cls()
        spec = cls(format=str(section.get("format", d.format)),
                   id_column=section.get("id_column", d.id_column),
                   text_column=str(section.get("text_column", d.text_column)),
                   text_pair_column=section.get("text_pair_column", d.text_pair_column),
                   label_column=str(section.get("label_column", d.label_column)))
        if spec.format not in FORMATS:
            raise JobError(f"The protocol's dataset format is {spec.format!r}; use one of {', '.join(FORMATS)}.")
        return spec

    @property
    def paired(self) -> bool:
        return self.text_pair_column is not None


class Strings(Sequence[str]):
    """A column of str in one Arrow string array: a few buffers instead of a Python object per row.

    A pool's texts, hashes and split keys live from the split to the end of their inference. As
    tuples of str, 50,000 rows are about 20 MB of small objects spread over the interpreter's
    arenas, which they keep resident after the split's other objects are freed, and which stay
    resident after they are freed in turn. Here they are a few MB in large allocations that go
    back to the kernel with the column. Indexing gives a str, slicing a list of str."""

    __slots__ = ("_array",)

    def __init__(self, values: Iterable[str] | pa.Array) -> None:
        self._array: pa.Array = values if isinstance(values, pa.Array) else arrow_arrays.strings(values)

    def __len__(self) -> int:
        return len(self._array)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            values: list[str] = self._array[index].to_pylist()
            return values
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        value: str = self._array[index].as_py()
        return value

    def __iter__(self) -> Iterator[str]:
        for chunk in range(0, len(self), 4096):
            yield from self._array[chunk : chunk + 4096].to_pylist()

    def arrow(self) -> pa.Array:
        """The column as Arrow strings (type `string`), not copied."""
        return self._array


def take(values: Sequence[str], positions: Sequence[int]) -> Strings:
    """The values at `positions`, in that order, as one Strings column."""
    if isinstance(values, Strings):
        return Strings(values.arrow().take(arrow_arrays.from_numpy(np.asarray(positions, dtype=np.int64), pa.int64())))
    return Strings(values[p] for p in positions)


@dataclass(frozen=True)
class Rows:
    ids: NDArray[np.int64]
    texts: Sequence[str]
    labels: NDArray[np.int64]  # index into the dataset's label names
    text_sha256: Sequence[str]
    pairs: Sequence[str] | None = None  # the second text of each row, for pair datasets

    def __len__(self) -> int:
        return len(self.texts)

    def take(self, positions: Sequence[int]) -> Rows:
        """The rows at `positions`, in that order, their strings in Strings columns (see Strings)."""
        pos = list(positions)
        return Rows(ids=self.ids[pos], texts=take(self.texts, pos), labels=self.labels[pos],
                    text_sha256=take(self.text_sha256, pos),
                    pairs=None if self.pairs is None else take(self.pairs, pos))

    def inputs(self, positions: Sequence[int]) -> tuple[list[str], list[str] | None]:
        """The texts (and second texts, for pairs) of the rows at `positions`, in that order."""
        texts = [self.texts[p] for p in positions]
        return texts, None if self.pairs is None else [self.pairs[p] for p in positions]


def text_hash(text: str, pair: str | None = None) -> str:
    """sha256 hex of the row's text: of its UTF-8 bytes for one text; for a pair, of the UTF-8 bytes
    of the JSON array [text, pair] written with separators (",", ":") and non-ASCII kept as is."""
    if pair is None:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
    return hashlib.sha256(json.dumps([text, pair], ensure_ascii=False, separators=(",", ":"))
                          .encode("utf-8")).hexdigest()


def read_table(path: Path, fmt: str) -> pa.Table:
    """One data file as an Arrow table, by the protocol's format."""
    try:
        if fmt == "jsonl":
            return pj.read_json(path)
        if fmt == "csv":
            return pc.read_csv(path)
        with pq.ParquetFile(path) as f:  # not pq.read_table: its pyarrow.dataset imports pandas (~45 MB resident)
            return f.read()
    except (OSError, pa.ArrowInvalid) as exc:
        raise JobError(f"Cannot read the dataset {path} as {fmt} ({exc}); check the file and the protocol's "
                       "dataset format.") from exc


def _concat(paths: Sequence[Path], fmt: str) -> pa.Table:
    tables = [read_table(p, fmt) for p in paths]
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(tables)
    except pa.ArrowInvalid as exc:
        raise JobError(f"The dataset's files have different columns ({exc}); pin files of one split.") from exc


def _label_indices(column: pa.ChunkedArray, names: Sequence[str]) -> NDArray[np.int64]:
    """Label values as indices into `names`: integers as they are, strings by their name."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        index = {n: i for i, n in enumerate(names)}  # every value is a name: job.rowcheck checked it
        return np.array([index[v] for v in column.to_pylist()], dtype=np.int64)
    return np.asarray(arrow_arrays.to_numpy(column), dtype=np.int64)


def load_rows(path: Path | Sequence[Path], spec: dict[str, Any], reading: DatasetSpec | None = None) -> Rows:
    """Read the data files (in order) and check columns, types, labels, row count and unique ids per
    `spec` (rows, columns, labels), reading them as `reading` says (default: the SST-2 layout)."""
    r = reading or DatasetSpec()
    table = _concat([path] if isinstance(path, Path) else list(path), r.format)
    found = {f.name: str(f.type) for f in table.schema}
    for name, dtype in spec["columns"].items():
        if found.get(name) != dtype:
            got = found.get(name, "missing")
            raise JobError(f"Dataset column {name!r} is {got}, expected {dtype} as pinned; "
                           "use the pinned dataset file.")
    needed = [c for c in (r.id_column, r.text_column, r.text_pair_column, r.label_column) if c is not None]
    absent = [c for c in needed if c not in found]
    if absent:
        raise JobError(f"The dataset has no column {absent[0]!r}, which the protocol reads; found "
                       f"{sorted(found)}: fix the protocol's dataset columns.")
    if table.num_rows != spec["rows"]:
        raise JobError(f"The dataset has {table.num_rows} rows, expected {spec['rows']} as pinned; "
                       "use the pinned dataset file.")
    if r.id_column is None:
        ids = np.arange(table.num_rows, dtype=np.int64)
    else:
        id_col = table.column(r.id_column)
        if not pa.types.is_integer(id_col.type) or id_col.null_count:
            raise JobError(f"The dataset's id column {r.id_column!r} is {id_col.type}, not integers; set "
                           "id_column to null in the protocol to use the row number instead.")
        ids = arrow_arrays.to_numpy(id_col).astype(np.int64)
        if len(ids) and ids.min() < 0:
            raise JobError(f"The dataset's id column {r.id_column!r} holds negative values; ids must be "
                           "0 or more, or set id_column to null to use the row number.")
    names = list(spec["labels"])
    check_rows(table, text_columns=[c for c in (r.text_column, r.text_pair_column) if c is not None],
               label_column=r.label_column, labels=names, id_column=r.id_column)
    labels = _label_indices(table.column(r.label_column), names)
    texts = tuple(table.column(r.text_column).to_pylist())
    pairs = tuple(table.column(r.text_pair_column).to_pylist()) if r.text_pair_column is not None else None
    unique, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        dup = unique[counts > 1][:5].tolist()
        raise JobError(f"The dataset has duplicate {r.id_column} values {dup}; every row needs a unique id, "
                       "or set id_column to null to use the row number.")
    hashes = tuple(text_hash(t, None if pairs is None else pairs[i]) for i, t in enumerate(texts))
    return Rows(ids=ids, texts=texts, labels=labels, text_sha256=hashes, pairs=pairs)
