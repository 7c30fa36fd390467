"""The Ray engine's choices, without starting Ray: where the driver connects, what the embedded
default binds, what a task asks for, and a dead address refused in one sentence."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from job.cli import main
from job.errors import JobError
from job.ray_engine import TaskOptions, cluster_address, init_arguments, require_listening
from tests.sweeps import write_sweep


def test_the_embedded_default_binds_loopback_without_a_dashboard() -> None:
    args = init_arguments(None, 2)
    assert args["_node_ip_address"] == "127.0.0.1" and args["include_dashboard"] is False
    assert args["num_cpus"] == 2 and "address" not in args


@pytest.mark.parametrize(("address", "announces_loopback"), [
    ("127.0.0.1:6379", True), ("localhost:6379", True), ("[::1]:6379", True),
    ("10.1.2.3:6379", False), ("auto", False),
])
def test_a_cluster_on_loopback_is_joined_on_loopback(address: str, announces_loopback: bool) -> None:
    args = init_arguments(address)
    assert args["address"] == address
    assert ("_node_ip_address" in args) == announces_loopback


def test_the_address_comes_from_the_flag_then_ray_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert cluster_address("127.0.0.1:1") == "127.0.0.1:1"
    assert cluster_address(None) == "10.0.0.1:6379"
    monkeypatch.delenv("RAY_ADDRESS")
    assert cluster_address(None) is None


def test_tasks_are_retried_for_dead_workers_never_for_their_own_errors() -> None:
    assert TaskOptions(num_cpus=2, max_retries=3).ray_options() == {
        "num_cpus": 2, "max_retries": 3, "retry_exceptions": False}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_dead_address_is_refused_in_one_sentence(tiny_world: tuple[Path, Path], signing_key_dir: Path,
                                                    tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(JobError, match="Nothing answers at the Ray address"):
        require_listening(address, timeout_s=2)
    sweep = write_sweep(tmp_path / "sweep.json", tiny_world, prefixes=["a:"])
    code = main(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--signing-key",
                 str(signing_key_dir / "signing-key.pem"), "--address", address, "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: Nothing answers") and len(err.strip().splitlines()) == 1
    # the plan was signed first, and no member was run or half-written
    assert json.loads((tmp_path / "out" / "sweep.json").read_text())["name"] == "tiny"
    assert (tmp_path / "out" / "plan.intoto.json").is_file()
    assert list((tmp_path / "out" / "members").iterdir()) == []
