"""Arrow arrays built from numpy and Python strings, and read back into numpy, without pyarrow's pandas bridge.

pyarrow's `pa.array` asks its pandas shim whether the input is a pandas object, and
`Array.to_numpy` converts through its pandas conversion code; both import pandas wherever it is
installed. A run never uses pandas, yet that import costs about 45 MB of resident memory for the
rest of the process (docs/PERFORMANCE.md, "Where a formal run's memory goes"). These functions
build the same arrays from the values' buffers (`pa.Array.from_buffers`) and read them back from
the Arrow buffers: same types, same values, so the tables and files written are the same bytes.

Contract: only fixed-width numeric and boolean types, and UTF-8 strings; no nulls in either direction."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

_INT32_MAX = 2**31 - 1


def _dtype(type_: pa.DataType) -> np.dtype[Any]:
    if not (pa.types.is_integer(type_) or pa.types.is_floating(type_)):
        raise TypeError(f"{type_} is not a fixed-width numeric Arrow type")
    dtype: np.dtype[Any] = np.dtype(type_.to_pandas_dtype())  # numpy's dtype of the type; imports nothing
    return dtype


def from_numpy(values: NDArray[Any], type_: pa.DataType) -> pa.Array:
    """pa.array(values, type_) for a 1-D numpy array of type_'s own dtype (or bool for pa.bool_()):
    a copy of the values in an Arrow array without nulls (NaN stays a value, as in pa.array)."""
    if values.ndim != 1:
        raise ValueError("from_numpy takes a 1-D array")
    if pa.types.is_boolean(type_):
        if values.dtype != np.bool_:
            raise TypeError(f"a {type_} array needs bool values, not {values.dtype}")
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(bits.tobytes())])
    dtype = _dtype(type_)
    if values.dtype != dtype:
        raise TypeError(f"a {type_} array needs {dtype} values, not {values.dtype}")
    data = np.ascontiguousarray(values).tobytes()  # a copy: the array owns its values
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(data)])


def strings(values: Iterable[str]) -> pa.Array:
    """pa.array(list(values), pa.string()): the UTF-8 bytes of each str and their offsets."""
    encoded = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    if offsets[-1] > _INT32_MAX:
        raise ValueError("the strings hold more than 2 GiB of UTF-8, more than an Arrow string array can")
    return pa.Array.from_buffers(pa.string(), len(encoded),
                                 [None, pa.py_buffer(offsets.astype(np.int32).tobytes()),
                                  pa.py_buffer(b"".join(encoded))])


def _chunk(array: pa.Array) -> NDArray[Any]:
    if array.null_count:
        raise ValueError("the Arrow array has nulls, which a numpy array of its type cannot hold")
    n, offset, buffer = len(array), array.offset, array.buffers()[1]
    if pa.types.is_boolean(array.type):
        if n == 0:
            return np.zeros(0, dtype=np.bool_)
        bits = np.frombuffer(buffer, dtype=np.uint8)
        return np.unpackbits(bits, count=offset + n, bitorder="little")[offset:].astype(np.bool_)
    dtype = _dtype(array.type)
    if n == 0:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(buffer, dtype=dtype, count=offset + n)[offset:].copy()


def to_numpy(values: pa.Array | pa.ChunkedArray) -> NDArray[Any]:
    """values.to_numpy() (zero_copy_only=False for booleans), as a new writable array."""
    if isinstance(values, pa.ChunkedArray):
        parts = [_chunk(c) for c in values.chunks]
        if not parts:
            return np.zeros(0, dtype=np.bool_ if pa.types.is_boolean(values.type) else _dtype(values.type))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
    return _chunk(values)
