"""Probabilities and metrics recomputed from float32 logits in float64 (provenance.json "metrics").

Written from the protocol text alone: log-probabilities by an explicit logsumexp, the reliability
table by explicit comparisons with the edges k/10, everything in float64."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]

N_BINS = 10
BLOCK_CELLS: Final = 1 << 20
"""Logits (rows x classes) handled at once: every function here that computes per class works on
row blocks of about this many cells, so its temporaries take a few times 8 MB whatever the
pool's size (100,000 rows or 1,000 classes: FORMAT.md, "Limits"). Each row is computed exactly
as it would be alone, so blocking changes no per-row value; the means are taken over the
per-row values as before."""


def row_blocks(n: int, k: int, cells: int | None = None) -> Iterator[slice]:
    """Consecutive row slices covering 0..n, each of at most max(1, cells // k) rows (cells:
    BLOCK_CELLS unless given)."""
    step = max(1, (BLOCK_CELLS if cells is None else cells) // max(k, 1))
    for start in range(0, n, step):
        yield slice(start, min(n, start + step))


def log_probs(z: F64, beta: float) -> F64:
    """log softmax(beta * z) row by row, with the row maximum subtracted before exp. Its
    temporaries are the size of z: pass a row block (row_blocks) of a large pool."""
    s = z * beta
    top = s.max(axis=1, keepdims=True)
    lse = top + np.log(np.exp(s - top).sum(axis=1, keepdims=True))
    return np.asarray(s - lse, dtype=np.float64)


def probabilities(z: F64, beta: float) -> F64:
    """softmax(beta * z) of a row block (see log_probs)."""
    return np.asarray(np.exp(log_probs(z, beta)), dtype=np.float64)


def first_argmax(z: F64) -> I64:
    """The first index of the row maximum (np.argmax returns the first occurrence)."""
    return np.asarray(np.argmax(z, axis=1), dtype=np.int64)


def _per_row(z: F64, fn: Callable[[slice], F64]) -> F64:
    """fn(block) -> one value per row, over the row blocks of z, as one array of len(z)."""
    out = np.empty(len(z), dtype=np.float64)
    for b in row_blocks(len(z), z.shape[1]):
        out[b] = fn(b)
    return out


def nll_rows(z: F64, y: I64, beta: float) -> F64:
    """-log p_y of every row at inverse temperature beta."""
    def block(b: slice) -> F64:
        lp = log_probs(z[b], beta)
        return np.asarray(-lp[np.arange(len(lp)), y[b]], dtype=np.float64)

    return _per_row(z, block)


def mean_nll(z: F64, y: I64, beta: float) -> float:
    return float(nll_rows(z, y, beta).mean())


def gradient(z: F64, y: I64, beta: float) -> float:
    """g(beta) = d/dbeta mean NLL = mean_i (E_p[z_i] - z_i,y)."""
    def block(b: slice) -> F64:
        zb = z[b]
        p = probabilities(zb, beta)
        return np.asarray((p * zb).sum(axis=1) - zb[np.arange(len(zb)), y[b]], dtype=np.float64)

    return float(_per_row(z, block).mean())


def gradients(z: F64, y: I64, betas: F64) -> F64:
    """g at many betas (for checking a trajectory), one beta and one row block at a time."""
    def at(beta: float) -> float:
        def block(b: slice) -> F64:
            zb = z[b]
            s = beta * zb
            e = np.exp(s - s.max(axis=1, keepdims=True))
            p = e / e.sum(axis=1, keepdims=True)
            return np.asarray((p * zb).sum(axis=1) - zb[np.arange(len(zb)), y[b]], dtype=np.float64)

        return float(_per_row(z, block).mean())

    return np.array([at(float(beta)) for beta in betas], dtype=np.float64)


def curvature(z: F64, beta: float) -> float:
    """g'(beta) = mean_i Var_p(z_i) >= 0."""
    def block(b: slice) -> F64:
        zb = z[b]
        p = probabilities(zb, beta)
        mean = (p * zb).sum(axis=1, keepdims=True)
        return np.asarray((p * (zb - mean) ** 2).sum(axis=1), dtype=np.float64)

    return float(_per_row(z, block).mean())


def bin_edges() -> list[float]:
    return [k / N_BINS for k in range(N_BINS + 1)]


def bin_index(conf: F64) -> NDArray[np.intp]:
    """Bin of each confidence: edges[b] <= c < edges[b+1], c = 1.0 in the last bin; explicit
    comparisons with the edges k/10. -1 marks a confidence outside [0, 1]."""
    edges = bin_edges()
    out = np.full(len(conf), -1, dtype=np.intp)
    for b in range(N_BINS):
        if b == N_BINS - 1:
            inside = (conf >= edges[b]) & (conf <= edges[b + 1])
        else:
            inside = (conf >= edges[b]) & (conf < edges[b + 1])
        out[inside] = b
    return out


def metric_set(z: F64, y: I64, beta: float, threshold: float) -> dict[str, Any]:
    """The metrics.json `M` object for logits z, labels y and inverse temperature beta (per-row
    terms computed in row blocks)."""
    n = len(y)
    nll = np.empty(n, dtype=np.float64)
    conf = np.empty(n, dtype=np.float64)
    brier = np.empty(n, dtype=np.float64)
    for blk in row_blocks(n, z.shape[1]):
        lp = log_probs(z[blk], beta)
        p = np.exp(lp)
        rows = np.arange(len(p))
        onehot = np.zeros_like(p)
        onehot[rows, y[blk]] = 1.0
        nll[blk] = -lp[rows, y[blk]]
        conf[blk] = p.max(axis=1)
        brier[blk] = ((p - onehot) ** 2).sum(axis=1)
    pred = first_argmax(z)
    correct_mask = pred == y
    edges = bin_edges()
    bins: list[dict[str, Any]] = []
    ece = 0.0
    gaps: list[float] = []
    placed = 0
    for b in range(N_BINS):
        lower, upper = edges[b], edges[b + 1]
        if b == N_BINS - 1:
            inside = (conf >= lower) & (conf <= upper)
        else:
            inside = (conf >= lower) & (conf < upper)
        count = int(inside.sum())
        placed += count
        if count:
            acc = float(correct_mask[inside].sum()) / count
            mean_conf = float(conf[inside].sum()) / count
            gap = abs(acc - mean_conf)
            ece += (count / n) * gap
            gaps.append(gap)
            bins.append({"lower": lower, "upper": upper, "count": count, "accuracy": acc,
                         "mean_confidence": mean_conf})
        else:
            bins.append({"lower": lower, "upper": upper, "count": 0, "accuracy": None,
                         "mean_confidence": None})
    if placed != n:
        raise ValueError(f"{n - placed} confidences fell outside [0, 1]")
    accepted = conf >= threshold
    return {
        "n": n,
        "correct": int(correct_mask.sum()),
        "accuracy": float(correct_mask.sum()) / n,
        "mean_confidence": float(conf.sum()) / n,
        "nll": float(nll.sum()) / n,
        "brier": float(brier.sum()) / n,
        "ece": ece,
        "mce": max(gaps) if gaps else 0.0,
        "bins": bins,
        "threshold": {"value": threshold, "accepted": int(accepted.sum()),
                      "wrong_accepted": int((accepted & ~correct_mask).sum())},
    }


def compare(found: Any, expected: Any, where: str, tol: float, out: list[str], rel: float = 0.0) -> None:
    """Append 'where: bundle X, recomputed Y' for every leaf that differs (floats within
    tol + rel * |Y|)."""
    if isinstance(expected, dict):
        if not isinstance(found, dict) or set(found) != set(expected):
            out.append(f"{where}: keys {sorted(found) if isinstance(found, dict) else found!r}, "
                       f"expected {sorted(expected)}")
            return
        for key in expected:
            compare(found[key], expected[key], f"{where}.{key}", tol, out, rel)
    elif isinstance(expected, list):
        if not isinstance(found, list) or len(found) != len(expected):
            out.append(f"{where}: {len(found) if isinstance(found, list) else found!r} entries, "
                       f"expected {len(expected)}")
            return
        for i, (f, e) in enumerate(zip(found, expected)):
            compare(f, e, f"{where}[{i}]", tol, out, rel)
    elif isinstance(expected, float):
        if isinstance(found, bool) or not isinstance(found, (int, float)) or not (
                abs(found - expected) <= tol + rel * abs(expected)):
            out.append(f"{where}: bundle {found!r}, recomputed {expected!r}")
    elif expected is None or isinstance(expected, (bool, int, str)):
        if type(found) is not type(expected) or found != expected:
            out.append(f"{where}: bundle {found!r}, recomputed {expected!r}")
    else:  # pragma: no cover - programming error
        raise TypeError(type(expected))
