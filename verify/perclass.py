"""metrics.json `per_class`, and the warnings read off it, derived again from the logits
(bundle/FORMAT.md "metrics.json", written here on its own, without the job's code).

The confusion counts come from the first argmax of each row's logits, counted one label at a
time. The recorded best permutation is checked, not searched for: it must be a permutation, make
exactly the rows right it says, and carry a dual certificate (row and column potentials whose
pairwise sums bound every cell of the relabelling gains and add up to its count), which proves
by linear-programming duality that no permutation makes more rows right. For a bundle written
before per_class existed, the verifier searches every permutation itself when K <= EXHAUSTIVE_K,
and tries a greedy one above."""

from __future__ import annotations

import itertools
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from bundle import layout
from verify import numerics, schemacheck
from verify.context import METRIC_TOL, POOL_NAMES, Context
from verify.result import Failed

CHECK: Final = "metrics.per-class"
EXHAUSTIVE_K: Final = 7
"""Largest K for which the verifier tries every permutation of a bundle that records none."""
RECALL_BELOW: Final = 0.10
RECALL_SUPPORT: Final = 10
GAIN_FRACTION: Final = 0.05
GAIN_ROWS: Final = 5
NAMED: Final = 20


def counts(z: NDArray[np.float64], y: NDArray[np.int64]) -> NDArray[np.int64]:
    """C[label, predicted] counted label by label (a K x K integer matrix)."""
    k = z.shape[1]
    pred = np.empty(len(y), dtype=np.int64)
    for b in numerics.row_blocks(len(y), k):
        pred[b] = numerics.first_argmax(z[b])
    out = np.zeros((k, k), dtype=np.int64)
    for label in np.unique(y):
        out[int(label)] = np.bincount(pred[y == label], minlength=k)
    return out


def expected_record(c: NDArray[np.int64]) -> dict[str, Any]:
    """Every field of a per_class record but best_permutation, from the confusion counts."""
    k = c.shape[0]
    support = [int(c[j].sum()) for j in range(k)]
    predicted = [int(c[:, j].sum()) for j in range(k)]
    correct = [int(c[j, j]) for j in range(k)]
    cells = [[int(a), int(b), int(c[a, b])] for a in range(k) for b in range(k) if c[a, b]]
    return {"support": support, "predicted": predicted, "correct": correct,
            "recall": [correct[j] / support[j] if support[j] else None for j in range(k)],
            "precision": [correct[j] / predicted[j] if predicted[j] else None for j in range(k)],
            "confusion": cells}


def check_permutation(c: NDArray[np.int64], best: dict[str, Any]) -> int:
    """The rows the recorded best permutation makes right, once it is shown to be a permutation
    that makes the most rows right (its certificate); Failed otherwise."""
    k = c.shape[0]
    mapping = best["map"]
    if sorted(mapping) != list(range(k)):
        raise Failed(f"per_class best_permutation.map is not a permutation of the {k} labels.")
    right = sum(int(c[mapping[i], i]) for i in range(k))
    if best["correct"] != right:
        raise Failed(f"per_class best_permutation makes {right} rows right, not the {best['correct']} it records.")
    rows, cols = best["certificate"]["rows"], best["certificate"]["columns"]
    if len(rows) != k or len(cols) != k:
        raise Failed(f"per_class best_permutation.certificate needs {k} row and {k} column potentials.")
    gains = c.T  # gains[i, j]: rows predicted i whose label is j
    r, s = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    feasible = all(bool((r[i] + s >= gains[i]).all()) for i in range(k))
    if not feasible or int(r.sum() + s.sum()) != right:
        raise Failed("per_class best_permutation.certificate does not prove that no permutation of the label "
                     "map makes more rows right.")
    return right


def exhaustive_best(c: NDArray[np.int64]) -> tuple[list[int], int]:
    """The permutation making the most rows right, by trying every one (small K only)."""
    k = c.shape[0]
    best_map, best = list(range(k)), int(np.trace(c))
    for perm in itertools.permutations(range(k)):
        right = sum(int(c[perm[i], i]) for i in range(k))
        if right > best:
            best_map, best = list(perm), right
    return best_map, best


def class_warnings(c: NDArray[np.int64], mapping: list[int], best: int) -> list[str]:
    """The warnings of FORMAT.md's rule for an audit pool with counts c and best permutation."""
    out = []
    n = int(c.sum())
    for j in range(c.shape[0]):
        support = int(c[j].sum())
        if support >= RECALL_SUPPORT and c[j, j] / support < RECALL_BELOW:
            out.append(f"label {j} is almost never predicted right: recall {c[j, j] / support:.1%} over its "
                       f"{support} audit rows (the rule: recall below 10% with at least 10 rows)")
    recorded = int(np.trace(c))
    if n and best - recorded >= GAIN_ROWS and (best - recorded) / n >= GAIN_FRACTION:
        moved = [f"{i} -> {j}" for i, j in enumerate(mapping) if i != j]
        tail = f" and {len(moved) - NAMED} more" if len(moved) > NAMED else ""
        out.append(f"reading each predicted label through the permutation {', '.join(moved[:NAMED])}{tail} "
                   f"(predicted -> read as) would make audit accuracy {best / n:.1%} instead of "
                   f"{recorded / n:.1%}: the label map is probably wrong")
    return out


def audit_counts(ctx: Context) -> NDArray[np.int64]:
    audit = ctx.table("audit")
    return counts(audit.z, audit.y)


def expected_warnings(ctx: Context) -> tuple[list[str], str]:
    """The per-class warnings the audit pool calls for, and how the best permutation was found."""
    c = audit_counts(ctx)
    m = ctx.doc(layout.METRICS_JSON)
    if "per_class" in m:
        best = m["per_class"]["audit"]["best_permutation"]
        return class_warnings(c, best["map"], check_permutation(c, best)), "certified"
    if c.shape[0] <= EXHAUSTIVE_K:
        mapping, right = exhaustive_best(c)
        return class_warnings(c, mapping, right), "every permutation tried"
    # Without a record, large K: a greedy permutation (largest cells first). It may not be the best,
    # but what its warning says of it is true, so a relabelling that large cannot go unshown.
    mapping = greedy_permutation(c)
    right = sum(int(c[mapping[i], i]) for i in range(c.shape[0]))
    return class_warnings(c, mapping, right), "a greedy permutation tried"


def greedy_permutation(c: NDArray[np.int64]) -> list[int]:
    """A permutation read off the confusion counts, largest cell first: predicted class i is read
    as the label of the largest cell left in its column; unmatched classes keep the free labels in order."""
    k = c.shape[0]
    mapping = [-1] * k
    used: set[int] = set()
    for flat in np.argsort(-c, axis=None, kind="stable"):
        label, predicted = divmod(int(flat), k)
        if c[label, predicted] == 0:
            break
        if mapping[predicted] < 0 and label not in used:
            mapping[predicted] = label
            used.add(label)
    free = iter(j for j in range(k) if j not in used)
    return [m if m >= 0 else next(free) for m in mapping]


def names_current_schema(ctx: Context) -> bool:
    """Whether the signed predicate names the verifier's current metrics schema, which always
    writes per_class (an older revision's bundles may lack it)."""
    statement = ctx.need(ctx.statement, "signature.statement")
    named = statement["predicate"].get("schemas", {}).get(layout.METRICS_JSON, {}).get("sha256")
    return bool(named == schemacheck.schema_sha256("metrics"))


def per_class(ctx: Context) -> str:
    """Each pool's per_class record restates its logits; the best permutation is certified."""
    m = ctx.doc(layout.METRICS_JSON)
    if "per_class" not in m:
        if names_current_schema(ctx):
            raise Failed("metrics.json names the metrics schema that always writes per_class, but has none.")
        warned, how = expected_warnings(ctx)
        found = "; ".join(f"WARNING: {w}" for w in warned) or "no per-class warning called for"
        return f"recomputed; this bundle records no per-class results: {found} ({how})"
    details = []
    for pool in POOL_NAMES:
        data = ctx.table(pool)
        c = counts(data.z, data.y)
        record = m["per_class"][pool]
        expected = expected_record(c)
        if len(record["support"]) != c.shape[0]:
            raise Failed(f"per_class {pool} has {len(record['support'])} labels, the logits {c.shape[0]}.")
        recorded = {key: record[key] for key in expected}
        diffs: list[str] = []
        numerics.compare(recorded, expected, f"per_class.{pool}", METRIC_TOL, diffs)
        if diffs:
            raise Failed("per-class results differ from the logits: " + "; ".join(diffs[:3]) + ".")
        best = record["best_permutation"]
        right = check_permutation(c, best)
        n = int(c.sum())
        if abs(best["accuracy"] - right / max(n, 1)) > METRIC_TOL:
            raise Failed(f"per_class {pool} best_permutation.accuracy {best['accuracy']!r} is not {right} / {n}.")
        low = min((r for r in expected["recall"] if r is not None), default=None)
        details.append(f"{pool}: {c.shape[0]} labels, lowest recall "
                       f"{'n/a' if low is None else format(low, '.1%')}, best relabelling {right} of {n} right "
                       f"(recorded {int(np.trace(c))})")
    return "; ".join(details) + "; optimality certified"
