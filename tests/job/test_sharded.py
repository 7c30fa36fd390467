"""The sharded engine's parts that need no cluster: its options on the command line, and a worker's
refusal of an audit batch that does not name the frozen temperature (the Ray tests run the rest)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from job.cli import main
from job.errors import JobError
from job.protocol import AUDIT, CALIBRATION
from job.shard_worker import BatchJob, ShardWorker, worker_environment
from job.sharded import ShardOptions


def test_worker_cpus_without_a_cluster_is_refused_in_one_sentence(
        tiny_world: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    protocol, lock = tiny_world
    rc = main(["run", "--protocol", str(protocol), "--resources", str(lock), "--out", str(tmp_path / "b"),
               "--ephemeral-key", "--worker-cpus", "2"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "--worker-cpus applies to a run on a cluster" in err
    assert not (tmp_path / "b").exists()


def test_a_worker_needs_at_least_one_cpu() -> None:
    with pytest.raises(JobError, match="at least 1"):
        ShardOptions(address="127.0.0.1:1", worker_cpus=0)


class _Forward:
    name = "ones"

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> object:
        import torch

        return torch.ones((ids.shape[0], 2))


class _Model:
    forward = _Forward()
    segments = False


def _worker(receipts: Path) -> ShardWorker:
    worker = ShardWorker.__new__(ShardWorker)  # the actor's state without resolving resources
    worker.model = _Model()  # type: ignore[assignment]
    worker.receipts = str(receipts)
    return worker


def _job(pool: str, temperature: str | None) -> BatchJob:
    ids = np.ones((3, 4), dtype=np.int64)
    return BatchJob(pool, 7, ids, ids, None, temperature)


def test_a_worker_refuses_an_audit_batch_without_the_temperature_hash(tmp_path: Path) -> None:
    worker = _worker(tmp_path / "receipts")
    with pytest.raises(JobError, match="without the frozen temperature"):
        worker.infer(_job(AUDIT, None))
    assert not (tmp_path / "receipts").exists()  # refused before it was received
    assert worker.infer(_job(CALIBRATION, None))[0].shape == (3, 2)
    out, seconds = worker.infer(_job(AUDIT, "ab" * 32))
    assert out.dtype == np.float32 and out.shape == (3, 2) and seconds >= 0
    lines = [json.loads(x) for x in (tmp_path / "receipts").read_text().splitlines()]
    assert [(r["pool"], r["batch"], r["temperature_sha256"]) for r in lines] == [
        (CALIBRATION, 7, None), (AUDIT, 7, "ab" * 32)]


def test_the_worker_environment_names_the_cpu_kind_and_threads() -> None:
    env = worker_environment(3)
    cpu = env["cpu"]
    assert env["threads"] == 3 and env["cpu_kind"] == f"{cpu['vendor']} | {cpu['model']} | {cpu['isa']}"
    assert cpu["isa"] and env["packages"]["torch"]


def _worker_record(node: str, kind: str, batches: dict[str, list[int]], died: bool = False) -> dict[str, object]:
    return {"node_id": node, "cpu_kind": kind, "died": died, "batches": batches}


def test_the_report_says_on_how_many_machines_and_cpu_kinds_and_flags_mixed_kinds() -> None:
    from bundle.views.report import _cluster_lines

    assert _cluster_lines(None) == []
    same = {"workers": [_worker_record("n1", "A", {"audit": [0]}), _worker_record("n2", "A", {"audit": [1]}),
                        _worker_record("n2", "A", {})]}
    assert _cluster_lines(same) == ["- Inference on a Ray cluster: 2 workers on 2 machines, 1 CPU kind (A)"]
    mixed = {"workers": [_worker_record("n1", "A", {"audit": [0]}, died=True),
                         _worker_record("n2", "B", {"audit": [1]})]}
    [line] = _cluster_lines(mixed)
    assert "2 CPU kinds (A; B); MIXED CPU kinds" in line and "1 worker(s) died" in line
