"""web/src/pcg64.js against numpy: every draw of
`numpy.random.Generator(numpy.random.PCG64(seed)).integers(0, n, size=(resamples, n))` (int64), for
seeds from 0 to beyond 2**64 and ranges from 1 to beyond 2**32 (the 32-bit Lemire path on buffered
halves, the plain 32-bit draws at 2**32 and the 64-bit path above), run under node by
web/test/draws.mjs; and web/src/bootstrap.js's quantile against numpy.quantile(method='linear').
Needs node (skipped without, except where CI=true)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
WEB = REPO / "web"

SEEDS = [0, 1, 2, 20240508, 2**32 - 1, 2**32, 2**63, 2**64 + 12345, 10**30 + 7]
ROWS = [1, 2, 3, 255, 256, 257, 360, 1001]
"""Full matrices (resamples x n): odd n leaves a buffered 32-bit half to the next row."""
RANGES = [2**31 - 1, 2**31, 2**31 + 1, 3 * 2**30 + 5, 2**32 - 1, 2**32, 2**32 + 1, 2**40, 2**53 - 1]
"""Ranges too large for a full row: 7 rows of 5 draws each (2**31 + 1 rejects about half its draws)."""


def _draw(cases: list[dict[str, int]], tmp: Path, by: str = "wasm") -> list[np.ndarray]:
    """Each case's matrix as web/test/draws.mjs draws it; every 32-bit Lemire row drawn by `by`
    (WebAssembly, or the JavaScript loop it replaces where WebAssembly is refused)."""
    (tmp / "job.json").write_text(json.dumps([{**c, "seed": str(c["seed"]), "js": by == "js"} for c in cases]))
    done = subprocess.run(["node", str(WEB / "test" / "draws.mjs"), str(tmp / "job.json"), str(tmp)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert {line["by"] for line in lines} == {by}
    assert all(line["countsOk"] for line in lines)
    return [np.fromfile(tmp / f"{i}.bin", dtype="<i8") for i in range(len(cases))]


@pytest.mark.parametrize("by", ["wasm", "js"])
def test_resample_rows_are_numpys_draws(node_ready: None, tmp_path: Path, by: str) -> None:
    cases = [{"seed": seed, "n": n, "resamples": 1 + (seed + n) % 5 + (3 if n < 10 else 0)}
             for seed in SEEDS for n in ROWS]
    cases.append({"seed": 20240508, "n": 360, "resamples": 2000})  # the formal protocol's matrix
    for case, found in zip(cases, _draw(cases, tmp_path, by), strict=True):
        want = np.random.Generator(np.random.PCG64(case["seed"])).integers(
            0, case["n"], size=(case["resamples"], case["n"]), dtype=np.int64)
        assert found.shape == (want.size,) and np.array_equal(found, want.ravel()), case


@pytest.mark.parametrize("by", ["wasm", "js"])
def test_large_ranges_are_numpys_draws(node_ready: None, tmp_path: Path, by: str) -> None:
    cases = [{"seed": seed, "n": n, "resamples": 7, "columns": 5} for seed in SEEDS[:5] for n in RANGES]
    for case, found in zip(cases, _draw(cases, tmp_path, by), strict=True):
        want = np.random.Generator(np.random.PCG64(case["seed"])).integers(
            0, case["n"], size=(case["resamples"], case["columns"]), dtype=np.int64)
        assert np.array_equal(found, want.ravel()), case


def test_the_quantile_is_numpys_linear_quantile(node_ready: None) -> None:
    rng = np.random.default_rng(7)
    arrays = [rng.normal(size=size) * scale for size in (1, 2, 3, 40, 2000, 2001) for scale in (1e-3, 1.0)]
    arrays.append(np.array([0.1, 0.1, 0.1, 0.2]))
    quantiles = [0.0, 0.025, 0.5, 0.975, 1.0, 1 / 3]
    script = ("import { readFileSync } from 'node:fs';\n"
              "import { quantileLinear } from './web/src/bootstrap.js';\n"
              "const { arrays, quantiles } = JSON.parse(readFileSync(0, 'utf8'));\n"
              "console.log(JSON.stringify(arrays.map((a) => { const s = Float64Array.from(a).sort();"
              " return quantiles.map((q) => quantileLinear(s, q)); })));")
    payload = json.dumps({"arrays": [a.tolist() for a in arrays], "quantiles": quantiles})
    done = subprocess.run(["node", "--input-type=module", "-e", script], input=payload, cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    for a, row in zip(arrays, found, strict=True):
        want = [float(v) for v in np.quantile(a, quantiles, method="linear")]
        assert row == want, (len(a), row, want)
