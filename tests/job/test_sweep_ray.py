"""`python -m job sweep` on real Ray, on loopback only: each test runs tests/job/sweep_cluster.py
inside a network and PID namespace it makes (`unshare --net --pid --fork --mount-proc`, root
only), so Ray can neither bind nor dial anything but 127.0.0.1, and every Ray process dies with the
namespace. Then the sweep directory is verified here, without Ray. Skipped where the namespace
cannot be made. Each test is bounded (the scenario's own deadline, and a timeout here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.sweeps import write_bad_lock, write_sweep
from verify.__main__ import main as verify_main

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "job" / "sweep_cluster.py"
TIMEOUT_S = 420


def _namespaces_available() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    done = subprocess.run(["unshare", "--net", "--pid", "--fork", "--mount-proc", "true"],
                          capture_output=True, check=False, timeout=30)
    return done.returncode == 0


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not _namespaces_available(),
                       reason="needs root and unshare to run Ray in a loopback-only namespace"),
]


def _scenario(name: str, sweep: Path, out: Path, key: Path, tmp_path: Path, lock: Path | None = None) -> dict[str, Any]:
    result = tmp_path / f"{name}.json"
    inner = (f"ip link set lo up && exec {sys.executable} {SCRIPT} {name} {sweep} {out} {key} {result} {lock or ''}")
    done = subprocess.run(["unshare", "--net", "--pid", "--fork", "--mount-proc", "bash", "-c", inner],
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False, cwd=REPO)
    log = result.with_suffix(".log")
    detail = done.stdout[-3000:] + done.stderr[-3000:] + (log.read_text()[-4000:] if log.exists() else "")
    assert done.returncode == 0 and result.exists(), detail
    facts: dict[str, Any] = json.loads(result.read_text())
    facts["log"] = log.read_text() if log.exists() else ""
    return facts


def _verified(out: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = verify_main([str(out), "--trusted-key", str(key_dir / "signing-key.pub.pem")])
    return code, capsys.readouterr().out


def test_embedded_default_binds_loopback_only_and_records_a_bad_lock_as_failed(
        tiny_world: tuple[Path, Path], signing_key_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    bad = write_bad_lock(tmp_path / "bad-lock.json", tiny_world[1])
    sweep = write_sweep(tmp_path / "sweep.json", tiny_world, prefixes=["a:"],
                        models=[{"label": "good"}, {"label": "bad", "lock": str(bad)}])
    facts = _scenario("embedded", sweep, tmp_path / "out", signing_key_dir / "signing-key.pem", tmp_path)
    assert facts["rc"] == 1, facts["log"]  # one member failed
    assert facts["statuses"] == {"good-a": "done", "bad-a": "failed"}
    assert facts["listening"], "the scenario saw no listening socket: Ray did not run"
    assert set(facts["listening"]) <= {"127.0.0.1", "[::ffff:127.0.0.1]"}, facts["listening"]
    assert "failed  bad-a:" in facts["log"] and "done    good-a" in facts["log"]
    assert facts["log"].count("Traceback") == 0
    # quiet: no probe of an outside address, no token notice; and nothing left behind
    for noise in ("8.8.8.8", "external connectivity", "Token authentication", "auth_token"):
        assert noise not in facts["log"], facts["log"]
    assert facts["left_behind"] == [], facts["left_behind"]
    code, out = _verified(tmp_path / "out", signing_key_dir, capsys)
    assert code == 1 and "FAILED  member bad-a" in out and "PASS    member good-a" in out


def test_a_killed_worker_is_retried_and_the_sweep_completes_then_reproduces(
        tiny_world: tuple[Path, Path], signing_key_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(tmp_path / "sweep.json", tiny_world, prefixes=["a:", "b:"])
    facts = _scenario("kill-worker", sweep, tmp_path / "out", signing_key_dir / "signing-key.pem", tmp_path,
                      lock=tiny_world[1])
    assert facts["killed"] is not None, "no member's worker was seen running"
    assert facts["rc"] == 0, facts["log"]
    assert facts["statuses"] == {"a": "done", "b": "done"}
    code, out = _verified(tmp_path / "out", signing_key_dir, capsys)
    assert code == 0, out
    assert facts["reproduce_rc"] == 0, facts["log"]
    attestations = sorted((tmp_path / "attestations").iterdir())
    assert [a.name for a in attestations] == ["b.intoto.json"]  # PCG64(0) draws b of [a, b]
    assert "bit-identical  b" in facts["log"] and "1 of 1 members reproduced (1 bit-identical)" in facts["log"]
    code = verify_main([str(tmp_path / "out"), "--trusted-key", str(signing_key_dir / "signing-key.pub.pem"),
                        "--reproduction", str(attestations[0]),
                        "--trusted-reproducer", str(signing_key_dir / "signing-key.pub.pem")])
    out = capsys.readouterr().out
    assert code == 0 and "1 reproduction(s) accepted" in out, out


def test_removing_the_second_node_mid_sweep_completes_on_the_first(
        tiny_world: tuple[Path, Path], signing_key_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(tmp_path / "sweep.json", tiny_world, prefixes=["a:", "b:", "c:"])
    facts = _scenario("remove-node", sweep, tmp_path / "out", signing_key_dir / "signing-key.pem", tmp_path)
    assert facts["removed"], "no member was seen running on the second node"
    assert facts["rc"] == 0, facts["log"]
    assert facts["statuses"] == {"a": "done", "b": "done", "c": "done"}
    code, out = _verified(tmp_path / "out", signing_key_dir, capsys)
    assert code == 0, out


def test_a_killed_driver_leaves_no_half_member_and_the_rerun_resumes(
        tiny_world: tuple[Path, Path], signing_key_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(tmp_path / "sweep.json", tiny_world, prefixes=["a:", "b:", "c:"])
    out = tmp_path / "out"
    facts = _scenario("kill-driver", sweep, out, signing_key_dir / "signing-key.pem", tmp_path)
    assert facts["first_rc"] == -9
    assert not facts["index_after_kill"]
    finished = [n for n in facts["after_kill"] if not n.startswith(".")]
    assert 1 <= len(finished) < 3 and set(finished) <= {"a", "b", "c"}
    assert all(".partial-" in n for n in facts["after_kill"] if n.startswith("."))  # staging only, by name
    assert facts["rc"] == 0, facts["log"]
    assert f"{len(finished)} already done" in facts["log"]
    assert facts["final"] == ["a", "b", "c"]  # the rerun removed any staging the kill left
    assert facts["statuses"] == {"a": "done", "b": "done", "c": "done"}
    code, text = _verified(out, signing_key_dir, capsys)
    assert code == 0, text
