"""A reproduction judged batch by batch against each batch's recorded CPU kind.

A batch's logits depend only on the batch and on the arithmetic that ran it. A bundle whose batches
ran on several CPU kinds (a sharded run, environment.json `cluster`) holds logits of each kind; a
reproducer's batches may run on several kinds too. So each re-run batch is paired with the kind
that produced the bundle's logits for it (its worker's `cpu_kind`, else the bundle's single
`arithmetic`) and the kind that re-ran it (the reproducer's worker, else this process), and the
batches are grouped by that pair. A group whose two kinds are the same is expected to be
bit-identical; one that is not is flagged for the reader. The overall verdict does not change:
job.logit_compare.grade decides it from every compared row, as before.

Pure functions; the attestation records `groups()` under `batch_kinds` (bundle/FORMAT.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from job.arithmetic import same_arithmetic
from job.logit_compare import RowComparison, grade

UNRECORDED = "unrecorded"
"""The kind of a batch whose bundle names no arithmetic at all."""


def kind_of(record: Mapping[str, Any] | None) -> str:
    """The CPU kind of an arithmetic record, spelled as a worker's `cpu_kind`: "vendor | model | ATen ISA"."""
    if not record:
        return UNRECORDED
    return f"{record.get('cpu_vendor') or 'unknown'} | {record.get('cpu_model') or 'unknown'} | " \
           f"{record.get('aten_capability') or 'unknown'}"


@dataclass(frozen=True)
class Side:
    """What one side (the signer's run or the re-run) records about where its batches ran: a
    cluster record (workers with `cpu_kind` and `batches`; None for one process) and the
    arithmetic of its own process."""

    cluster: Mapping[str, Any] | None
    arithmetic: Mapping[str, Any] | None

    def kinds(self, pool: str) -> tuple[dict[int, str], str]:
        """(batch -> kind of the worker that ran it, the kind of every batch no worker lists).

        With a cluster record, each batch is its worker's `cpu_kind`; without one, every batch is
        the single `arithmetic`'s kind."""
        default = kind_of(self.arithmetic)
        if self.cluster is None:
            return {}, default
        return {int(b): str(w["cpu_kind"]) for w in self.cluster["workers"]
                for b in w["batches"].get(pool, [])}, default


def _same_kind(signed_on: str, rerun_on: str, both_arithmetic: bool, signer: Mapping[str, Any] | None,
               mine: Mapping[str, Any] | None) -> bool:
    """Same kind: the same CPU vendor, model and ATen ISA; and where both sides are one process
    with a full arithmetic record, also the same oneDNN and MKL code paths (job.arithmetic)."""
    if signed_on != rerun_on or signed_on == UNRECORDED:
        return False
    if both_arithmetic and signer and mine:
        return same_arithmetic(dict(signer), dict(mine))
    return True


def groups(pool: str, row_batches: NDArray[np.int64], compared: RowComparison, prediction_changed: NDArray[np.bool_],
           signer: Side, reproducer: Side, tolerance: float) -> list[dict[str, Any]]:
    """One pool's re-run batches grouped by (kind signed on, kind re-run on), in first-batch order.

    The row arrays are the pool's compared rows (row_batches: each row's recorded batch); each group
    gives its batches, rows, identical rows, predictions changed, largest difference and the level
    its rows alone reach (job.logit_compare.grade, per-row inputs left to the whole verdict)."""
    signer_of, signer_default = signer.kinds(pool)
    rerun_of, rerun_default = reproducer.kinds(pool)
    both_arithmetic = signer.cluster is None and reproducer.cluster is None
    identical, ulps, abs_diff = compared.identical, compared.ulps, compared.abs
    pairs: dict[tuple[str, str], list[int]] = {}
    for b in sorted({int(x) for x in row_batches}):
        pairs.setdefault((signer_of.get(b, signer_default), rerun_of.get(b, rerun_default)), []).append(b)
    out = []
    for (signed_on, rerun_on), batches in pairs.items():
        rows = np.isin(row_batches, batches)
        same = _same_kind(signed_on, rerun_on, both_arithmetic, signer.arithmetic, reproducer.arithmetic)
        n_identical, changed = int(identical[rows].sum()), int(prediction_changed[rows].sum())
        largest = float(abs_diff[rows].max(initial=0.0))
        out.append({"pool": pool, "signed_on": signed_on, "rerun_on": rerun_on, "same_kind": same,
                    "batches": batches, "rows": int(rows.sum()), "identical": n_identical,
                    "predictions_changed": changed,
                    "largest_difference": {"ulps": int(ulps[rows].max(initial=0)), "abs": largest},
                    "level": grade(n_identical == int(rows.sum()), largest, tolerance, changed, False)})
    return out




def reproducer_workers(cluster: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
    """The workers that re-ran batches (a sharded reproduction): id, machine, CPU kind, threads and
    the batches each ran per pool; None when every batch ran in this process."""
    if cluster is None:
        return None
    keep = ("id", "hostname", "node_id", "cpu", "cpu_kind", "threads", "died")
    return [{k: w[k] for k in keep if k in w} | {"batches": w["batches"]} for w in cluster["workers"]]
