"""Pre-registered paired bootstrap over the audit pool: calibrated-minus-raw NLL, Brier and ECE.

The resamples are fixed by the protocol's `bootstrap` section and reproducible with numpy alone:

    idx = numpy.random.Generator(numpy.random.PCG64(seed)).integers(0, n, size=(resamples, n))

(int64; row b holds the audit-pool positions, in pool order, drawn for resample b). For each
resample the same drawn rows are scored raw (beta = 1) and calibrated (beta of temperature.json),
each metric exactly as job.metrics defines it over the drawn rows with repeats counted, and the
statistic is calibrated minus raw. The interval is
`numpy.quantile(differences, [q_lo, q_hi], method="linear")`.

Vectorised: a (resamples x n) matrix of draw counts W (bincount over row-offset indices) turns
every per-resample mean into one weighted sum W x / n (elementwise products and numpy's pairwise
sum, not a BLAS product: `weighted_sums`); ECE uses the identity
ECE = (1/n) sum_b |sum_{i in b} w_i (correct_i - conf_i)|, so the per-bin signed sums are W D with
D[i, b] = (correct_i - conf_i) [bin_i = b].

Bounded memory: the matrix is drawn and scored in consecutive blocks of resamples, at most
CHUNK_CELLS draws each (a block is still one call of `integers`, and the generator fills in order,
so the blocks are the rows of the one matrix above, and its sha256 is hashed block by block). A pool
of up to CHUNK_CELLS / resamples rows (the formal protocol's 360 audit rows among them) is one block,
computed exactly as the whole matrix; a larger pool's products are the same sums per resample, which
BLAS may round differently in the last bits of a float64.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bundle.wording import interval_verdict
from job.calibration import log_softmax
from job.metrics import BINS, bin_index
from job.predictions import Predictions
from job.protocol import AUDIT, BootstrapSpec

F64 = NDArray[np.float64]
METRICS = ("nll", "brier", "ece")
CHUNK_CELLS = 1_000_000  # draws per block of resamples: 8 MB of int64 indices, then 8 MB of float64 counts


def resample_blocks(n: int, resamples: int, seed: int, cells: int = CHUNK_CELLS) -> Iterator[NDArray[np.int64]]:
    """The rows of bootstrap_indices(n, resamples, seed), in order, in blocks of at most `cells`
    draws (at least one resample per block)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    step = max(1, cells // max(n, 1))
    for start in range(0, resamples, step):
        yield rng.integers(0, n, size=(min(step, resamples - start), n), dtype=np.int64)


def bootstrap_indices(n: int, resamples: int, seed: int) -> NDArray[np.int64]:
    """The protocol's resample matrix: Generator(PCG64(seed)).integers(0, n, size=(resamples, n))."""
    rng = np.random.Generator(np.random.PCG64(seed))
    return rng.integers(0, n, size=(resamples, n), dtype=np.int64)


def indices_sha256(idx: NDArray[np.int64]) -> str:
    """sha256 hex of the index matrix as little-endian int64, C order (a cheap RNG cross-check)."""
    return hashlib.sha256(np.ascontiguousarray(idx, dtype="<i8").tobytes()).hexdigest()


def offset_counts(idx: NDArray[np.int64], n: int) -> NDArray[np.int64]:
    """W[b, i] = how often row i is drawn in resample b (int64), computed in place: idx (B, n) is
    overwritten (row b shifted by b * n) so that a block of resamples never holds a second array of
    its size besides the counts."""
    b = idx.shape[0]
    idx += (np.arange(b, dtype=np.int64) * n)[:, None]
    return np.bincount(idx.ravel(), minlength=b * n).reshape(b, n)


def row_terms(logits: F64, labels: NDArray[np.int64], beta: float) -> dict[str, F64]:
    """Per-row quantities whose weighted sums give each metric of softmax(beta * logits).

    nll: -log p_y; brier: sum_k (p_k - 1[y=k])^2; ece: an (n, BINS) matrix holding
    correct_i - conf_i in the column of row i's confidence bin. The predicted label is the first
    argmax of the logits (as in job.metrics), so `correct` does not depend on beta.
    """
    n, k = logits.shape
    rows = np.arange(n)
    lp = log_softmax(beta * logits)
    p = np.exp(lp)
    pred = logits.argmax(axis=1)
    conf = p[rows, pred]
    onehot = np.zeros((n, k))
    onehot[rows, labels] = 1.0
    signed = np.zeros((n, BINS))
    signed[rows, bin_index(conf)] = (pred == labels).astype(np.float64) - conf
    return {"nll": -lp[rows, labels], "brier": ((p - onehot) ** 2).sum(axis=1), "ece": signed}


def weighted_sums(weights: F64, column: F64) -> F64:
    """weights @ column for a column of n values, as each row's elementwise products summed by
    numpy's pairwise sum. A matrix product takes the BLAS kernel OpenBLAS selects for the machine
    (or OPENBLAS_CORETYPE names), and kernels round differently; this sum's bits are the same
    wherever it runs, so a host run and a container run write the same bootstrap.json."""
    return (weights * column).sum(axis=1)  # type: ignore[no-any-return]


def metric_values(terms: dict[str, F64], weights: F64) -> dict[str, F64]:
    """Each metric for every weight row (weights: (B, n) draw counts summing to n per row)."""
    n = weights.shape[1]
    signed = terms["ece"]
    per_bin = np.stack([weighted_sums(weights, signed[:, b]) for b in range(signed.shape[1])], axis=1)
    return {
        "nll": weighted_sums(weights, terms["nll"]) / n,
        "brier": weighted_sums(weights, terms["brier"]) / n,
        "ece": np.abs(per_bin).sum(axis=1) / n,
    }


@dataclass(frozen=True)
class Bootstrap:
    n: int
    resamples: int
    seed: int
    indices_sha256: str
    point: dict[str, float]  # calibrated - raw on the whole pool
    differences: dict[str, F64]  # calibrated - raw per resample, shape (resamples,)
    lower: dict[str, float]
    upper: dict[str, float]


def paired_bootstrap(logits: F64, labels: NDArray[np.int64], beta: float, *, resamples: int,
                     seed: int, quantiles: tuple[float, float] = (0.025, 0.975),
                     cells: int = CHUNK_CELLS) -> Bootstrap:
    """Paired percentile bootstrap of calibrated-minus-raw NLL, Brier and ECE, drawn and scored in
    blocks of at most `cells` draws."""
    n = len(labels)
    raw, cal = row_terms(logits, labels, 1.0), row_terms(logits, labels, beta)
    full = np.ones((1, n))
    d_point = {m: float(metric_values(cal, full)[m][0] - metric_values(raw, full)[m][0]) for m in METRICS}
    digest = hashlib.sha256()
    parts: dict[str, list[F64]] = {m: [] for m in METRICS}
    for idx in resample_blocks(n, resamples, seed, cells):
        # Hash the drawn indices first: offset_counts then overwrites them (so that at most two arrays
        # of the block's size exist at a time).
        digest.update(np.ascontiguousarray(idx, dtype="<i8").data)  # the bytes, not a copy of them
        counts = offset_counts(idx, n)
        del idx
        w = counts.astype(np.float64)
        del counts
        v_raw, v_cal = metric_values(raw, w), metric_values(cal, w)
        del w
        for m in METRICS:
            parts[m].append(v_cal[m] - v_raw[m])
    diffs = {m: np.concatenate(parts[m]) for m in METRICS}
    lo, hi = {}, {}
    for m in METRICS:
        q = np.quantile(diffs[m], list(quantiles), method="linear")
        lo[m], hi[m] = float(q[0]), float(q[1])
    return Bootstrap(n=n, resamples=resamples, seed=seed, indices_sha256=digest.hexdigest(),
                     point=d_point, differences=diffs, lower=lo, upper=hi)


def bootstrap_record(spec: BootstrapSpec, protocol_sha256: str, audit: Predictions, beta: float,
                     temperature_sha256: str, metrics_sha256: str) -> dict[str, Any]:
    """data/bootstrap.json (schema bootstrap/v1) from the audit pool's predictions as written, the
    fitted beta and the sha256 of temperature.json and metrics.json, under the protocol's
    `bootstrap` section."""
    boot = paired_bootstrap(audit.logits.astype(np.float64), audit.labels, beta,
                            resamples=spec.resamples, seed=spec.seed, quantiles=spec.quantiles)
    wanted = [m for m in METRICS if m in spec.metrics]
    return {
        "protocol_sha256": protocol_sha256,
        "pool": AUDIT,
        "n": boot.n,
        "predictions_sha256": audit.sha256,
        "temperature_sha256": temperature_sha256,
        "metrics_sha256": metrics_sha256,
        "beta": beta,
        "resamples": boot.resamples,
        "seed": boot.seed,
        "rng": "numpy.random.Generator(numpy.random.PCG64(seed)).integers(0, n, size=(resamples, n))",
        "indices_sha256": boot.indices_sha256,
        "statistic": "calibrated minus raw",
        "interval": {"level": spec.level, "quantiles": list(spec.quantiles),
                     "method": "linear"},
        "differences": {
            m: {"point": boot.point[m], "lower": boot.lower[m], "upper": boot.upper[m],
                "verdict": interval_verdict(boot.lower[m], boot.upper[m])}
            for m in wanted
        },
    }
