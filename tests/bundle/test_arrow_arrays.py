"""Arrow arrays from numpy and back without pyarrow's pandas bridge: the same arrays as pyarrow's own
conversions, and no pandas import on a run's path."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from bundle.arrow_arrays import from_numpy, strings, to_numpy
from tests.factory import REPO

NUMERIC = [(pa.int32(), np.int32), (pa.int64(), np.int64), (pa.uint64(), np.uint64), (pa.float32(), np.float32),
           (pa.float64(), np.float64)]


@pytest.mark.parametrize(("type_", "dtype"), NUMERIC)
@pytest.mark.parametrize("n", [0, 1, 7, 65])
def test_numeric_arrays_equal_pyarrows(type_: pa.DataType, dtype: type, n: int) -> None:
    rng = np.random.default_rng(n)
    values = (rng.standard_normal(n) * 1e6).astype(dtype)
    if n > 2 and np.issubdtype(dtype, np.floating):
        values[1], values[2] = np.nan, -np.inf  # values, not nulls, as in pa.array
    ours, theirs = from_numpy(values, type_), pa.array(values, type_)
    assert ours.type == theirs.type and ours.null_count == 0
    assert ours.buffers()[1].to_pybytes()[: values.nbytes] == theirs.buffers()[1].to_pybytes()[: values.nbytes]
    for array in (theirs, theirs.slice(min(n, 3)), pa.chunked_array([theirs, theirs.slice(min(n, 1))], type_)):
        got, want = to_numpy(array), array.to_numpy()
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes() and got.flags.writeable


def test_a_strided_column_is_copied_in_order() -> None:
    logits = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert from_numpy(logits[:, 1], pa.float32()).equals(pa.array(logits[:, 1], pa.float32()))
    column = np.arange(3, dtype=np.int64)
    array = from_numpy(column, pa.int64())
    column[0] = 99  # the array owns a copy
    assert array.to_pylist() == [0, 1, 2]


@pytest.mark.parametrize("n", [0, 1, 9, 100])
def test_boolean_arrays_equal_pyarrows(n: int) -> None:
    values = np.random.default_rng(n).random(n) < 0.5
    ours, theirs = from_numpy(values, pa.bool_()), pa.array(values, pa.bool_())
    assert ours.equals(theirs)
    for array in (theirs, theirs.slice(min(n, 3)), pa.chunked_array([theirs, theirs.slice(min(n, 5))])):
        got = to_numpy(array)
        assert got.dtype == np.bool_ and got.tolist() == array.to_pylist()


def test_strings_equal_pyarrows() -> None:
    values = ["", "abc", "é✓ naïve", "x" * 300, "\x00"]
    assert strings(values).equals(pa.array(values, pa.string()))
    assert strings([]).equals(pa.array([], pa.string()))


def test_what_the_conversions_refuse() -> None:
    with pytest.raises(ValueError, match="nulls"):
        to_numpy(pa.array([1, None], pa.int64()))
    with pytest.raises(TypeError, match="needs int32"):
        from_numpy(np.arange(3, dtype=np.int64), pa.int32())
    with pytest.raises(TypeError, match="not a fixed-width numeric"):
        to_numpy(pa.array(["a"]))
    with pytest.raises(ValueError, match="1-D"):
        from_numpy(np.zeros((2, 2), dtype=np.float32), pa.float32())


@pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas is not installed")
def test_reading_a_split_writing_predictions_and_verifying_them_imports_no_pandas() -> None:
    code = (
        "import json, sys, tempfile\n"
        "from pathlib import Path\n"
        "import numpy as np\n"
        "import pyarrow as pa, pyarrow.parquet as pq\n"
        "from bundle.arrow_arrays import strings, from_numpy\n"
        "from job.dataset import load_rows, take\n"
        "from job.batching import batch_plan\n"
        "from job.predictions import PoolOutput, Predictions, predictions_table, predictions_bytes\n"
        "d = Path(tempfile.mkdtemp())\n"
        "texts = ['a b', 'c', 'd e f', 'g']\n"
        "t = pa.Table.from_arrays([from_numpy(np.arange(4, dtype=np.int32), pa.int32()), strings(texts),"
        " from_numpy(np.array([0, 1, 0, 1]), pa.int64())], names=['idx', 'sentence', 'label'])\n"
        "pq.write_table(t, d / 'data.parquet')\n"
        "spec = {'rows': 4, 'columns': {'idx': 'int32', 'sentence': 'string', 'label': 'int64'},"
        " 'labels': ['negative', 'positive']}\n"
        "rows = load_rows(d / 'data.parquet', spec)\n"
        "keys = take(rows.texts, [3, 1, 0])\n"
        "plan = batch_plan(np.array([1, 1, 2]), keys, 2)\n"
        "out = PoolOutput(np.ones((3, 2), np.float32), np.ones(3, np.int64), np.zeros(3, bool),"
        " np.zeros(3, np.int64), np.ones(3, np.int64))\n"
        "table = predictions_table(rows.ids[:3], keys, keys, rows.labels[:3], out)\n"
        "Predictions.of_table('audit', table, 'x')\n"
        "data = predictions_bytes(table)\n"
        "from verify.predictions import read_pool\n"
        "pool = read_pool('audit', data, 2)\n"
        "print(json.dumps({'pandas': 'pandas' in sys.modules, 'rows': len(rows.ids), 'read': len(pool.y)}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                         check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"pandas": False, "rows": 4, "read": 3}
