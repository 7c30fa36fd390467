"""The page's estimators (web/src/estimators.js, web/src/beta.js) under node against the Python
verifier's (verify/estimators.py) and scipy: every figure to 1e-12.

The logits: pools like the stand-in's (872 rows, two classes, a confident and partly wrong
classifier), a K=3 pool, and edge sets (one row, two rows, every row right or wrong, tied and
saturated confidences, a debiased estimate left undefined, a fixed bandwidth). The paired-bootstrap
intervals are given the resample rows numpy's PCG64 draws (the page takes them as an argument).
Needs node (skipped without, except where CI=true)."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from verify import estimators

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "web" / "test" / "estimators.mjs"
TOL = 1e-12
PROTOCOL = json.loads((REPO / "provenance.json").read_bytes())


def _page(cases: list[dict[str, Any]], clopper: list[tuple[int, int, float]] | None = None) -> dict[str, Any]:
    done = subprocess.run(["node", str(SCRIPT)], input=json.dumps({"cases": cases, "clopper": clopper or []}),
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _close(page: Any, python: Any, where: str) -> None:
    """Equal structure, keys and JSON kinds; floats within TOL (relative above 1)."""
    if isinstance(python, dict):
        assert isinstance(page, dict) and set(page) == set(python), (where, page, python)
        for key, value in python.items():
            _close(page[key], value, f"{where}.{key}")
    elif isinstance(python, list):
        assert isinstance(page, list) and len(page) == len(python), where
        for i, (a, b) in enumerate(zip(page, python, strict=True)):
            _close(a, b, f"{where}[{i}]")
    elif isinstance(python, float):
        assert isinstance(page, (int, float)) and abs(page - python) <= TOL * max(1.0, abs(python)), (
            where, page, python)
    else:
        assert page == python, (where, page, python)


def _protocol(entries: list[dict[str, Any]] | None = None, resamples: int = 40) -> dict[str, Any]:
    doc = copy.deepcopy(PROTOCOL)
    if entries is not None:
        doc["metrics"]["estimators"] = entries
    doc["bootstrap"]["resamples"] = resamples
    return doc


def _case(protocol: dict[str, Any], z: np.ndarray, y: np.ndarray, beta: float,
          with_rows: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the node job's case, the Python verifier's record) for one pool."""
    python = estimators.expected_record(protocol, z, y, beta)
    boot = protocol["bootstrap"]
    rows = (np.random.Generator(np.random.PCG64(boot["seed"])).integers(0, len(y), size=(boot["resamples"], len(y)))
            .tolist() if with_rows else None)
    case = {"protocol": protocol, "k": int(z.shape[1]), "z": z.ravel().tolist(), "y": y.tolist(), "beta": beta,
            "rows": rows}
    return case, python


def _logits(n: int, k: int, seed: int, scale: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    """float32-representable logits of a confident classifier that is right about 85% of the time."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, size=n)
    z = rng.normal(0.0, 1.0, size=(n, k))
    right = rng.random(n) < 0.85
    z[np.arange(n), np.where(right, y, (y + 1) % k)] += scale
    return z.astype(np.float32).astype(np.float64), y.astype(np.int64)


def test_every_estimator_agrees_with_the_python_verifier_on_standin_like_pools(node_ready: None) -> None:
    cases, expected = [], []
    for n, k, seed, beta in ((872, 2, 1, 0.62), (872, 2, 2, 1.7), (300, 3, 3, 0.8)):
        z, y = _logits(n, k, seed)
        case, python = _case(_protocol(), z, y, beta)
        cases.append(case)
        expected.append(python)
    found = _page(cases)["records"]
    for i, (page, python) in enumerate(zip(found, expected, strict=True)):
        _close(page, python, f"case {i}")
        assert set(python["results"]) == {e["id"] for e in PROTOCOL["metrics"]["estimators"]}


def test_edge_sets_agree_with_the_python_verifier(node_ready: None) -> None:
    binned = [{"id": f"b-{binning}-{bins}-{conf}-{norm}-{debias}", "kind": "binned", "confidence": conf,
               "binning": binning, "bins": bins, "norm": norm, "debias": debias}
              for binning, bins in (("equal-mass", 15), ("equal-width", 7), ("equal-mass", 1))
              for conf in ("top-label", "classwise") for norm, debias in (("l1", False), ("l2", False), ("l2", True))]
    entries = [*binned, {"id": "ks", "kind": "ks", "confidence": "top-label"},
               {"id": "smooth", "kind": "smooth-ece", "confidence": "top-label", "bandwidth": "fixed-point",
                "eps": 0.001, "refine": 10, "mesh": 200},
               {"id": "smooth-fixed", "kind": "smooth-ece", "confidence": "top-label", "bandwidth": 0.05,
                "eps": 0.001, "refine": 10, "mesh": 50},
               {"id": "bins", "kind": "bin-intervals", "method": "clopper-pearson", "level": 0.9}]
    entries[0]["interval"] = {"method": "paired-bootstrap", "level": 0.95}
    entries[2]["interval"] = {"method": "paired-bootstrap", "level": 0.9}
    protocol = _protocol(entries, resamples=25)
    z2, _ = _logits(60, 2, 7)
    sets = {
        "one row": (np.array([[1.0, -1.0]]), np.array([0])),
        "two rows": (np.array([[1.0, -1.0], [0.5, 0.25]]), np.array([1, 1])),
        "all right": (z2, np.argmax(z2, axis=1)),
        "all wrong": (z2, 1 - np.argmax(z2, axis=1)),
        "ties": (np.tile(np.array([[2.0, 0.0], [0.0, 0.0], [0.0, 3.0]]), (20, 1)), np.arange(60) % 2),
        "saturated": (np.array([[100.0, -100.0], [-90.0, 90.0], [80.0, -80.0], [0.0, 0.0]]), np.array([0, 1, 1, 0])),
        "K=3": _logits(45, 3, 11),
    }
    cases, expected = [], []
    for z, y in sets.values():
        for beta in (1.0, 0.37):
            case, python = _case(protocol, z, y.astype(np.int64), beta)
            cases.append(case)
            expected.append(python)
    found = _page(cases)["records"]
    names = [name for name in sets for _ in (0, 1)]
    for name, page, python in zip(names, found, expected, strict=True):
        _close(page, python, name)
    # the sets reach the rules they are for: an undefined debiased estimate and its no-claim difference
    one_row = expected[0]["results"]
    assert one_row["b-equal-mass-15-top-label-l2-True"]["raw"]["value"] is None
    assert any(r["difference"]["verdict"] == "no claim" and r["difference"]["lower"] is None
               for e in expected for r in e["results"].values() if "difference" in r)


def test_without_resample_rows_the_page_gives_the_points_and_leaves_the_intervals_out(node_ready: None) -> None:
    z, y = _logits(200, 2, 5)
    case, python = _case(_protocol(), z, y, 0.7, with_rows=False)
    page = _page([case])["records"][0]
    for entry_id, entry in python["results"].items():
        got = page["results"][entry_id]
        if "difference" not in entry:
            _close(got, entry, entry_id)
            continue
        assert set(got["difference"]) == {"point"}
        _close(got["difference"]["point"], entry["difference"]["point"], entry_id)
        for which in ("raw", "calibrated"):
            assert "interval" not in got[which]
            _close(got[which]["value"], entry[which]["value"], f"{entry_id}.{which}")


def test_smooth_ece_bandwidth_search_on_50000_rows_is_bounded(node_ready: None) -> None:
    """1 + refine evaluations of smECE at most, each bounded by the grid: the 50,000-row search
    agrees with Python's and finishes in seconds under node."""
    entries = [e for e in PROTOCOL["metrics"]["estimators"] if e["kind"] == "smooth-ece"]
    z, y = _logits(50_000, 2, 13, scale=2.0)
    case, python = _case(_protocol(entries), z, y, 0.9, with_rows=False)
    _close(_page([case])["records"][0], python, "50,000 rows")


def test_clopper_pearson_agrees_with_scipy(node_ready: None) -> None:
    """The inverse regularized incomplete beta: k = 0, k = n, n = 1 and large n, to 1e-12."""
    from scipy.stats import beta as beta_dist  # deferred: scipy.stats takes 0.6 s to import

    rng = np.random.default_rng(3)
    asked: list[tuple[int, int, float]] = []
    for n in (1, 2, 3, 7, 10, 37, 100, 1000, 9_999, 49_488, 100_000):
        ks = {0, 1, n // 2, n - 1, n, *rng.integers(0, n + 1, size=4).tolist()}
        asked += [(int(k), n, level) for k in sorted(ks) if 0 <= k <= n for level in (0.5, 0.9, 0.95, 0.99)]
    found = _page([], asked)["clopper"]
    for (k, n, level), (lower, upper) in zip(asked, found, strict=True):
        alpha = 1.0 - level
        want_lower = 0.0 if k == 0 else float(beta_dist.ppf(alpha / 2, k, n - k + 1))
        want_upper = 1.0 if k == n else float(beta_dist.ppf(1 - alpha / 2, k + 1, n - k))
        assert abs(lower - want_lower) <= TOL and abs(upper - want_upper) <= TOL, (k, n, level, lower, upper)
        if k == 0:
            assert lower == 0.0
        if k == n:
            assert upper == 1.0
