"""verify.workers: a sharded run's batches each have exactly one worker."""

from __future__ import annotations

from typing import Any

import pytest

from verify.result import Failed
from verify.workers import check_batch_owners


def _cluster(*owned: dict[str, list[int]], kinds: tuple[str, ...] = ("A",)) -> dict[str, Any]:
    return {"engine": "ray", "audit_temperature_sha256": None,
            "workers": [{"id": f"worker-{i}", "node_id": f"node-{i}", "cpu_kind": kinds[i % len(kinds)],
                         "died": False, "batches": b} for i, b in enumerate(owned)]}


def test_every_batch_on_one_worker_passes_and_counts_machines_and_kinds() -> None:
    cluster = _cluster({"calibration": [0], "audit": [1]}, {"calibration": [1], "audit": [0, 2]}, kinds=("A", "B"))
    detail = check_batch_owners(cluster, {"calibration": {0, 1}, "audit": {0, 1, 2}})
    assert detail == ("5 batches, each on exactly one of 2 workers on 2 machines, 2 CPU kind(s), MIXED, as the "
                      "signer records them (a claim: nothing checks which machine ran a batch)")
    one_kind = _cluster({"calibration": [0, 1]}, {"audit": [0]}, kinds=("A", "A"))
    one = check_batch_owners(one_kind, {"calibration": {0, 1}, "audit": {0}})
    assert "machines, 1 CPU kind(s), as the signer" in one and "MIXED" not in one


def test_a_batch_under_two_workers_fails() -> None:
    cluster = _cluster({"audit": [0, 1]}, {"audit": [1]})
    with pytest.raises(Failed, match="audit batch 1 under 2 workers"):
        check_batch_owners(cluster, {"audit": {0, 1}})


def test_a_batch_under_no_worker_fails() -> None:
    with pytest.raises(Failed, match="calibration batch 2 is under no worker"):
        check_batch_owners(_cluster({"calibration": [0, 1]}), {"calibration": {0, 1, 2}})


def test_a_batch_the_predictions_lack_fails() -> None:
    with pytest.raises(Failed, match="audit batch 5 under worker-0"):
        check_batch_owners(_cluster({"audit": [0, 5]}), {"audit": {0}})


def test_a_pool_the_bundle_lacks_fails() -> None:
    with pytest.raises(Failed, match="pool 'other'"):
        check_batch_owners(_cluster({"audit": [0], "other": [0]}), {"audit": {0}})
