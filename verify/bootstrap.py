"""The paired bootstrap of the calibration effect (data/bootstrap.json) recomputed: the resample
matrix from the protocol's seed, every resample scored raw and calibrated from the logits, the
quantile interval and the verdict.

Resamples are scored through draw counts: W[b, i] = how often row i was drawn in resample b, so a
metric that is a mean over drawn rows is W @ per-row values / n, and the ECE of a resample is
sum over bins |sum of W * correct - sum of W * confidence| / n over the rows in that bin. The
matrix is drawn and scored in blocks of resamples (BLOCK_CELLS draws at most), so memory stays
bounded however many resamples of however many rows the protocol asks for."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bundle import layout
from bundle.wording import interval_verdict
from verify import numerics
from verify.context import Context
from verify.numerics import F64, I64
from verify.protocol_checks import bounded_dimensions
from verify.result import Failed

TOL = 1e-9
BLOCK_CELLS = 4_000_000
"""Draws per block of resamples: 32 MB of indices and 32 MB of counts per block, at most three blocks of
indices and two of counts at once (block_sums), whatever the protocol asks."""


def resample_indices(seed: int, resamples: int, n: int) -> NDArray[np.int64]:
    return np.random.Generator(np.random.PCG64(seed)).integers(0, n, size=(resamples, n))


def resample_blocks(seed: int, resamples: int, n: int, cells: int = BLOCK_CELLS) -> Iterator[NDArray[np.int64]]:
    """The rows of resample_indices(seed, resamples, n), in order, in blocks of at most `cells`
    draws (at least one resample each): the generator fills in order, so drawing block by block
    gives the same numbers as drawing the whole matrix, in bounded memory."""
    rng = np.random.Generator(np.random.PCG64(seed))
    step = max(1, cells // max(n, 1))
    for start in range(0, resamples, step):
        yield rng.integers(0, n, size=(min(step, resamples - start), n))


def indices_sha256(indices: NDArray[np.int64]) -> str:
    return hashlib.sha256(np.ascontiguousarray(indices, dtype="<i8").tobytes()).hexdigest()


def draw_counts(indices: NDArray[np.int64], n: int, out: F64 | None = None) -> F64:
    """W[b, i] = how often row i was drawn in resample b, as float64 (ready for the scoring product),
    written into `out` when given (shape (len(indices), n) or larger along the first axis)."""
    r = indices.shape[0]
    counts = out[:r] if out is not None and out.shape[0] >= r and out.shape[1:] == (n,) else np.empty((r, n))
    # Row by row: each count row is built and converted in cache, with no offset index array and
    # no second full-size copy for the int-to-float conversion.
    for b in range(r):
        counts[b] = np.bincount(indices[b], minlength=n)
    return counts


def block_sums(seed: int, resamples: int, n: int, columns: F64, digest: Any) -> F64:
    """draw_counts(resample_indices(seed, resamples, n), n) @ columns, one row per resample, built
    block by block (resample_blocks); every block's little-endian int64 bytes are fed to `digest` in
    order, so that it ends as the sha256 of the whole matrix.

    The draws and the counting hold the GIL; hashing and the product release it, so a second thread
    does those while this one draws and counts the next block. Two count buffers alternate, and a
    buffer is refilled only once the product that reads it is done: at most three blocks of indices
    and two of counts are in memory at once."""
    with ThreadPoolExecutor(max_workers=1) as worker:  # one worker: the digest is fed in block order
        buffers: list[F64] = []
        products: list[Future[F64]] = []
        hashes: list[Future[None]] = []
        for k, indices in enumerate(resample_blocks(seed, resamples, n)):
            if k >= 2:
                products[k - 2].result()
            hashes.append(worker.submit(digest.update, np.ascontiguousarray(indices, dtype="<i8")))
            if len(buffers) < 2:
                buffers.append(np.empty(indices.shape))
            counts = draw_counts(indices, n, buffers[k % 2])
            del indices
            products.append(worker.submit(np.matmul, counts, columns))
        for h in hashes:
            h.result()
        return np.concatenate([p.result() for p in products]) if products else np.empty((0, columns.shape[1]))


def row_terms(z: F64, y: I64, beta: float) -> tuple[F64, F64, F64]:
    """Per-row values whose count-weighted sums give each metric at inverse temperature beta:
    -log p_y, the Brier sum, and an (n, bins) matrix holding correct - confidence in the column
    of the row's confidence bin. The per-class work runs in row blocks (numerics.row_blocks)."""
    n = len(y)
    rows = np.arange(n)
    nll = np.empty(n, dtype=np.float64)
    brier = np.empty(n, dtype=np.float64)
    conf = np.empty(n, dtype=np.float64)
    for b in numerics.row_blocks(n, z.shape[1]):
        lp = numerics.log_probs(z[b], beta)
        p = np.exp(lp)
        at = np.arange(len(p))
        onehot = np.zeros_like(p)
        onehot[at, y[b]] = 1.0
        nll[b] = -lp[at, y[b]]
        brier[b] = ((p - onehot) ** 2).sum(axis=1)
        conf[b] = p.max(axis=1)
    correct = (numerics.first_argmax(z) == y).astype(np.float64)
    bins = numerics.bin_index(conf)
    if (bins < 0).any():
        raise ValueError("a confidence fell outside [0, 1]")
    member = np.zeros((n, numerics.N_BINS))
    member[rows, bins] = 1.0
    return nll, brier, member * (correct - conf)[:, None]


def scored(terms: tuple[F64, F64, F64], counts: F64) -> dict[str, F64]:
    """nll, brier and ece of every resample (rows of `counts`) from row_terms."""
    nll, brier, gap = terms
    n = counts.shape[1]
    return {"nll": counts @ nll / n, "brier": counts @ brier / n, "ece": np.abs(counts @ gap).sum(axis=1) / n}


def check_record(doc: dict[str, Any], protocol: dict[str, Any], audit_n: int, beta: float,
                 shas: dict[str, str]) -> str:
    spec = protocol["bootstrap"]
    problems = []
    for key, want in (("pool", spec["pool"]), ("n", audit_n), ("beta", beta),
                      ("resamples", spec["resamples"]), ("seed", spec["seed"]),
                      ("predictions_sha256", shas["predictions"]),
                      ("temperature_sha256", shas["temperature"]),
                      ("metrics_sha256", shas["metrics"])):
        if doc[key] != want:
            problems.append(f"{key} is {str(doc[key])[:20]!r}, expected {str(want)[:20]!r}")
    interval = spec["interval"]
    if (doc["interval"]["quantiles"] != interval["quantiles"]
            or doc["interval"]["level"] != interval["level"]
            or doc["interval"]["method"] != interval["method"]):
        problems.append(f"interval {doc['interval']}, the protocol fixes {interval['quantiles']} "
                        f"{interval['method']}")
    if sorted(doc["differences"]) != sorted(spec["metrics"]):
        problems.append(f"metrics {sorted(doc['differences'])}, the protocol names "
                        f"{sorted(spec['metrics'])}")
    if problems:
        raise Failed("bootstrap.json: " + "; ".join(problems) + ".")
    return (f"{doc['resamples']} resamples of the {audit_n} audit rows, seed {doc['seed']}, "
            "at this temperature and these predictions")


def check_differences(doc: dict[str, Any], z: F64, y: I64) -> str:
    n = len(y)
    digest = hashlib.sha256()
    # Every per-row value of both scorings as the columns of one matrix, so that each block of
    # counts is read once: nll raw, nll calibrated, brier raw, brier calibrated, then the bins.
    (nll_r, brier_r, gap_r), (nll_c, brier_c, gap_c) = row_terms(z, y, 1.0), row_terms(z, y, doc["beta"])
    columns = np.column_stack([nll_r, nll_c, brier_r, brier_c, gap_r, gap_c])
    bins = gap_r.shape[1]
    sums = block_sums(doc["seed"], doc["resamples"], n, columns, digest) / n
    parts = {"nll": sums[:, 1] - sums[:, 0], "brier": sums[:, 3] - sums[:, 2],
             "ece": np.abs(sums[:, 4 + bins:]).sum(axis=1) - np.abs(sums[:, 4:4 + bins]).sum(axis=1)}
    if digest.hexdigest() != doc["indices_sha256"]:
        raise Failed(f"indices_sha256 is {doc['indices_sha256'][:16]}…, the protocol's generator "
                     f"gives {digest.hexdigest()[:16]}….")
    whole_raw = numerics.metric_set(z, y, 1.0, 0.9)
    whole_cal = numerics.metric_set(z, y, doc["beta"], 0.9)
    q = doc["interval"]["quantiles"]
    problems = []
    for metric, found in doc["differences"].items():
        diff = parts[metric]
        lower, upper = (float(v) for v in np.quantile(diff, q, method="linear"))
        point = whole_cal[metric] - whole_raw[metric]
        for key, want in (("point", point), ("lower", lower), ("upper", upper)):
            if not abs(found[key] - want) <= TOL:
                problems.append(f"{metric}.{key}: bundle {found[key]!r}, recomputed {want!r}")
        if found["verdict"] != interval_verdict(found["lower"], found["upper"]):
            problems.append(f"{metric}.verdict is {found['verdict']!r} for the interval "
                            f"[{found['lower']!r}, {found['upper']!r}], the rule gives "
                            f"{interval_verdict(found['lower'], found['upper'])!r}")
    if problems:
        raise Failed("bootstrap differs from the logits: " + "; ".join(problems[:3]) + ".")
    summary = ", ".join(f"{m} {f['point']:+.4f} [{f['lower']:+.4f}, {f['upper']:+.4f}] "
                        f"{f['verdict']}" for m, f in doc["differences"].items())
    return f"resample matrix and every interval recomputed within {TOL:g}: {summary}"


# -- the checks (verify/checks.py lists them in order) ---------------------------------------

def wanted(ctx: Context) -> bool:
    """Whether the protocol asks for the bootstrap or the bag holds its record."""
    return ctx.wants_section("bootstrap")


def record(ctx: Context) -> str:
    """The header against the protocol, the temperature and the prediction files."""
    return check_record(ctx.doc(layout.BOOTSTRAP_JSON), ctx.doc(layout.PROTOCOL_JSON),
                        len(ctx.table("audit").y), ctx.doc(layout.TEMPERATURE_JSON)["beta"],
                        ctx.study_inputs())


def intervals(ctx: Context) -> str:
    """The resample matrix from the seed, every resample scored, quantile intervals, verdicts."""
    doc = ctx.doc(layout.BOOTSTRAP_JSON)
    dims = bounded_dimensions(ctx.doc(layout.PROTOCOL_JSON))
    # The record's count sizes the matrix rebuilt here: it may not exceed what the protocol
    # (already bounded) asks for, whatever bootstrap.record says about it.
    if doc["resamples"] != dims.resamples:
        raise Failed(f"bootstrap.json asks for {doc['resamples']:,} resamples, the protocol for "
                     f"{dims.resamples:,}; not recomputed.")
    return check_differences(doc, ctx.table("audit").z, ctx.table("audit").y)
