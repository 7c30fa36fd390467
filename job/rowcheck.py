"""The split's rows checked before a protocol is written and before a run reads them: every text is
text, every label is one of the K classes, and there is at least one row.

Each problem is reported in the user's words, with how many rows have it and the ids of the first
ones (the id column's values, or row numbers when the dataset has none), so the rows can be found
and fixed in the data rather than in a file the user never wrote."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from job.errors import JobError

SHOWN = 5
"""How many row ids a message names."""


def _row_ids(table: pa.Table, id_column: str | None) -> list[object]:
    if id_column is not None and id_column in table.column_names:
        return list(table.column(id_column).to_pylist())
    return list(range(table.num_rows))


def _count(bad: Sequence[int], table: pa.Table) -> str:
    return f"{len(bad)} of the split's {table.num_rows} rows {'has' if len(bad) == 1 else 'have'}"


def _first(ids: Sequence[object], where: Sequence[int], id_column: str | None) -> str:
    shown = ", ".join(str(ids[i]) for i in where[:SHOWN])
    more = ", ..." if len(where) > SHOWN else ""
    kind = f"{id_column} " if id_column is not None else "row numbers "
    return f"{kind}{shown}{more}"


def require_rows(table: pa.Table) -> None:
    """JobError when the split has no rows."""
    if table.num_rows == 0:
        raise JobError("The split has no rows; pick a split (and data files) with at least one example.")


def check_rows(table: pa.Table, *, text_columns: Sequence[str], label_column: str, labels: Sequence[str],
               id_column: str | None) -> None:
    """JobError (one sentence) on the first kind of bad row found: an empty split; a text column with
    a missing or non-text value; a label that is missing, not an integer class index 0..K-1 or, for
    string labels, not one of `labels`. Returns None when every row is usable."""
    require_rows(table)
    idc = id_column if id_column is not None and id_column in table.column_names else None
    ids = _row_ids(table, idc)
    for column in text_columns:
        values = table.column(column).to_pylist()
        bad = [i for i, v in enumerate(values) if not isinstance(v, str)]
        if bad:
            raise JobError(f"{_count(bad, table)} a missing or non-text "
                           f"{column!r} ({_first(ids, bad, idc)}); fix or drop those rows in the data.")
    values = table.column(label_column)
    k = len(labels)
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        known = set(labels)
        bad = [i for i, v in enumerate(values.to_pylist()) if v not in known]
        what = f"not one of the labels {list(labels)}"
    elif pa.types.is_integer(values.type):
        raw = values.to_pylist()
        bad = [i for i, v in enumerate(raw) if v is None or not 0 <= int(v) < k]
        found = sorted({v for v in (raw[i] for i in bad) if v is not None})
        what = (f"outside the class indices 0..{k - 1} ({', '.join(labels)})"
                + (f": {found[:SHOWN]}" if found else "") + (" or missing" if None in [raw[i] for i in bad] else ""))
    else:
        raise JobError(f"The label column {label_column!r} holds {values.type}, not class indices or names; "
                       "pick the column that holds each row's class.")
    if bad:
        raise JobError(f"{_count(bad, table)} a {label_column!r} {what} "
                       f"({_first(ids, bad, idc)}); fix or drop those rows in the data.")

