"""Per-class results of one pool, and the label map read off them.

The predicted class is the first argmax of the raw logits; a temperature > 0 never changes it
(metrics.json `argmax_unchanged`), so one set of per-class results holds for raw and calibrated
probabilities alike. Per pool: `support` (rows of each true label), `predicted` (rows predicted
as each label), `correct`, `recall` = correct / support and `precision` = correct / predicted
(null where the denominator is 0, never 0), the non-zero cells of the confusion matrix as
`[label, predicted, count]` sorted, and the best relabelling of the predictions:
`best_permutation.map[i]` is the label that predicted class i would be read as under the
permutation of the label map that makes the most rows right (`correct`, `accuracy`), with the
dual `certificate` that proves no other permutation makes more right: integer potentials
`rows[i]` and `columns[j]` with rows[i] + columns[j] >= W[i][j] for every predicted class i and
label j (W[i][j] the rows predicted i whose label is j) and sum(rows) + sum(columns) equal to
`correct` (linear-programming duality of the assignment problem).

Two warnings come from the audit pool's per-class results (WARN_* below, pre-stated in
bundle/FORMAT.md): a class almost never predicted right, and a permutation of the label map far
more accurate than the recorded one. A warning reports; it never changes a figure."""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

I64 = NDArray[np.int64]

WARN_RECALL_BELOW: Final = 0.10
"""A class with at least WARN_RECALL_SUPPORT audit rows and a recall below this is warned about."""
WARN_RECALL_SUPPORT: Final = 10
WARN_PERMUTATION_GAIN: Final = 0.05
"""A permutation of the label map is warned about when it makes at least this fraction of the
audit rows, and at least WARN_PERMUTATION_ROWS rows, more right than the recorded map."""
WARN_PERMUTATION_ROWS: Final = 5
NAMED_MOVES: Final = 20
"""How many moved labels a permutation warning spells out (the record holds the whole map)."""


def confusion(labels: I64, predicted: I64, k: int) -> I64:
    """C[label, predicted]: how many rows of each true label went to each predicted class."""
    out: I64 = np.bincount(labels * k + predicted, minlength=k * k).reshape(k, k).astype(np.int64)
    return out


def max_assignment(weights: I64) -> tuple[list[int], list[int], list[int]]:
    """A permutation `assign` (row i -> column assign[i]) maximising sum(weights[i, assign[i]]),
    and integer dual potentials (rows, columns) with rows[i] + columns[j] >= weights[i, j]
    everywhere and equality on the assignment: the Hungarian algorithm (shortest augmenting
    paths, O(K^3)) on the costs -weights, one row added per round, vectorised over columns."""
    k = weights.shape[0]
    cost = -weights.astype(np.int64)
    big = np.int64(np.iinfo(np.int64).max // 4)
    u = np.zeros(k + 1, dtype=np.int64)
    v = np.zeros(k + 1, dtype=np.int64)
    owner = np.zeros(k + 1, dtype=np.int64)  # owner[j]: the row assigned to column j (1-based; 0 none)
    way = np.zeros(k + 1, dtype=np.int64)
    for i in range(1, k + 1):
        owner[0] = i
        j0 = 0
        minv = np.full(k + 1, big, dtype=np.int64)
        used = np.zeros(k + 1, dtype=bool)
        for _ in range(k + 1):  # each pass marks one more column used; at most k + 1 passes
            used[j0] = True
            i0 = owner[j0]
            free = ~used[1:]
            cur = cost[i0 - 1] - u[i0] - v[1:]
            better = free & (cur < minv[1:])
            minv[1:][better] = cur[better]
            way[1:][better] = j0
            candidates = np.where(free, minv[1:], big)
            j1 = int(np.argmin(candidates)) + 1
            delta = candidates[j1 - 1]
            u[owner[used]] += delta
            v[used] -= delta
            minv[~used] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:
            j1 = int(way[j0])
            owner[j0] = owner[j1]
            j0 = j1
    assign = [0] * k
    for j in range(1, k + 1):
        assign[int(owner[j]) - 1] = j - 1
    # Minimisation duals satisfy u_i + v_j <= cost_ij = -w_ij; negated, they bound w from above.
    return assign, [int(-x) for x in u[1:]], [int(-x) for x in v[1:]]


def per_class(z: NDArray[np.float64], labels: I64) -> dict[str, Any]:
    """The per-class record of one pool from its logits (n x K, dataset label order) and labels."""
    k = z.shape[1]
    predicted_class = z.argmax(axis=1).astype(np.int64)
    c = confusion(labels.astype(np.int64), predicted_class, k)
    support = c.sum(axis=1)
    predicted = c.sum(axis=0)
    correct = np.diagonal(c)
    # W[i, j]: rows predicted i whose label is j, the gain of reading predicted class i as label j.
    assign, rows, columns = max_assignment(c.T)
    best = int(sum(int(c[assign[i], i]) for i in range(k)))
    n = max(int(support.sum()), 1)
    return {
        "support": [int(x) for x in support],
        "predicted": [int(x) for x in predicted],
        "correct": [int(x) for x in correct],
        "recall": [float(correct[j] / support[j]) if support[j] else None for j in range(k)],
        "precision": [float(correct[j] / predicted[j]) if predicted[j] else None for j in range(k)],
        "confusion": [[int(a), int(b), int(c[a, b])] for a, b in zip(*np.nonzero(c), strict=True)],
        "best_permutation": {"map": assign, "correct": best, "accuracy": best / n,
                             "certificate": {"rows": rows, "columns": columns}},
    }


def low_recall_warnings(record: dict[str, Any]) -> list[str]:
    """A warning per label with enough audit rows that is almost never predicted right."""
    out = []
    for j, (support, recall) in enumerate(zip(record["support"], record["recall"], strict=True)):
        if support >= WARN_RECALL_SUPPORT and recall is not None and recall < WARN_RECALL_BELOW:
            out.append(f"label {j} is almost never predicted right: recall {recall:.1%} over its {support} audit "
                       f"rows (the rule: recall below {WARN_RECALL_BELOW:.0%} with at least {WARN_RECALL_SUPPORT} "
                       "rows)")
    return out


def moves(mapping: list[int]) -> str:
    """The labels a permutation moves, as `predicted -> read as`, the first NAMED_MOVES of them."""
    moved = [f"{i} -> {j}" for i, j in enumerate(mapping) if i != j]
    more = f" and {len(moved) - NAMED_MOVES} more" if len(moved) > NAMED_MOVES else ""
    return ", ".join(moved[:NAMED_MOVES]) + more


def permutation_warning(record: dict[str, Any]) -> str | None:
    """The warning for a permutation of the label map far more accurate than the recorded one."""
    n = sum(record["support"])
    recorded = sum(record["correct"])
    best = record["best_permutation"]
    gain = best["correct"] - recorded
    if n == 0 or gain < WARN_PERMUTATION_ROWS or gain / n < WARN_PERMUTATION_GAIN:
        return None
    return (f"reading each predicted label through the permutation {moves(best['map'])} (predicted -> read as) "
            f"would make audit accuracy {best['correct'] / n:.1%} instead of {recorded / n:.1%}: the label map is "
            "probably wrong")


def class_warnings(audit: dict[str, Any]) -> list[str]:
    """Every warning the audit pool's per-class record calls for, in order: low recall by label,
    then the permutation."""
    found = permutation_warning(audit)
    return low_recall_warnings(audit) + ([found] if found is not None else [])
