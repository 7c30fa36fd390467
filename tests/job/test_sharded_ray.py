"""`python -m job run|reproduce --address` on real Ray, on loopback only: each test runs
tests/job/shard_cluster.py inside a network and PID namespace it makes (`unshare --net --pid --fork
--mount-proc`, root only), with a head and a second node on 127.0.0.1, so Ray can neither bind nor
dial anything but loopback, and every Ray process dies with the namespace. The bundles are then
compared and verified here, without Ray. Skipped where the namespace cannot be made or the stand-in
fixtures are absent. Each test is bounded (the scenario's own deadline, and a timeout here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bundle.dsse import Envelope
from job.cli import main as job_main
from tests.factory import REPO, SHARED_FIXTURES, computes_as_avx2_or_less
from tests.job.test_sweep_ray import _namespaces_available
from verify.__main__ import main as verify_main

LOCK = REPO / "job" / "locks" / "standin.json"
TIMEOUT_S = 400
PREDICTIONS = ("data/predictions/calibration.parquet", "data/predictions/audit.parquet")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not _namespaces_available(),
                       reason="needs root and unshare to run Ray in a loopback-only namespace"),
]
standin = pytest.mark.skipif(not SHARED_FIXTURES.is_dir(), reason="../shared/fixtures is absent")


def _scenario(name: str, result: Path, *args: str) -> dict[str, Any]:
    inner = f"ip link set lo up && exec {sys.executable} -m tests.job.shard_cluster {name} {result} {' '.join(args)}"
    done = subprocess.run(["unshare", "--net", "--pid", "--fork", "--mount-proc", "bash", "-c", inner],
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False, cwd=REPO)
    log = result.with_suffix(".log")
    detail = done.stdout[-3000:] + done.stderr[-3000:] + (log.read_text()[-4000:] if log.exists() else "")
    assert done.returncode == 0 and result.exists(), detail
    facts: dict[str, Any] = json.loads(result.read_text())
    facts["log"] = log.read_text() if log.exists() else ""
    return facts


def _key(key_dir: Path) -> str:
    return str(key_dir / "signing-key.pem")


def _verify(bundle: Path, key_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = verify_main([str(bundle), "--trusted-key", str(key_dir / "signing-key.pub.pem")])
    return code, capsys.readouterr().out


def _cluster(bundle: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((bundle / "data" / "environment.json").read_text())["cluster"]
    return record


def _batches(bundle: Path, pool: str) -> list[int]:
    import pyarrow.parquet as pq

    return sorted(set(pq.read_table(bundle / "data" / "predictions" / f"{pool}.parquet").column("batch").to_pylist()))


def _predicate(attestation: Path) -> dict[str, Any]:
    statement = json.loads(Envelope.from_json(attestation.read_bytes()).payload)
    predicate: dict[str, Any] = statement["predicate"]
    return predicate


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory, signing_key_dir: Path) -> Path:
    """The stand-in run in this process, as `make standin-run` runs it, at the workers' one thread:
    on an Intel Xeon MKL rounds some products differently at 1 and 2 threads (docs/PERFORMANCE.md)."""
    out = tmp_path_factory.mktemp("single") / "bundle"
    rc = job_main(["run", "--resources", str(LOCK), "--out", str(out), "--no-progress", "--threads", "1",
                   "--signing-key", _key(signing_key_dir)])
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory, signing_key_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The stand-in run sharded over two nodes, one 1-CPU worker on each, and the scenario's facts."""
    root = tmp_path_factory.mktemp("sharded")
    out = root / "bundle"
    facts = _scenario("run", root / "run.json", str(out), _key(signing_key_dir), str(LOCK))
    assert facts["rc"] == 0, facts["log"]
    return out, facts


@standin
def test_two_workers_give_the_single_process_predictions_byte_for_byte_and_verify(
        single: Path, sharded: tuple[Path, dict[str, Any]], signing_key_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    bundle, _ = sharded
    for rel in PREDICTIONS:
        assert (bundle / rel).read_bytes() == (single / rel).read_bytes(), rel
    cluster = _cluster(bundle)
    ran = [w for w in cluster["workers"] if any(w["batches"].values())]
    assert len(ran) == 2 and len({w["node_id"] for w in ran}) == 2  # both nodes ran batches
    assert all(w["threads"] == 1 for w in ran)
    for pool in ("calibration", "audit"):
        owned = sorted(b for w in cluster["workers"] for b in w["batches"].get(pool, []))
        assert owned == _batches(bundle, pool)  # every batch exactly once
    code, out = _verify(bundle, signing_key_dir, capsys)
    assert code == 0, out
    assert "PASS    cluster.batch-owners" in out and "PASS    cluster.audit-temperature" in out
    assert "PASS    environment.forward" in out  # the workers' forward choice, with their forward check
    environment = json.loads((bundle / "data" / "environment.json").read_text())
    assert environment["forward_choice"]["name"] == "packed-distilbert"
    report = (bundle / "data" / "report.md").read_text()
    assert "Inference on a Ray cluster: 2 workers on 2 machines, 1 CPU kind" in report


@standin
def test_no_audit_batch_reaches_a_worker_before_the_temperature_file_exists(
        sharded: tuple[Path, dict[str, Any]]) -> None:
    bundle, facts = sharded
    temperature = bundle / "data" / "temperature.json"
    from bundle.digests import sha256_file

    written_ns = temperature.stat().st_mtime_ns
    audit = [r for r in facts["receipts"] if r["pool"] == "audit"]
    calibration = [r for r in facts["receipts"] if r["pool"] == "calibration"]
    assert audit and calibration
    assert len(audit) == len(_batches(bundle, "audit"))
    assert min(r["received_ns"] for r in audit) > written_ns
    assert max(r["received_ns"] for r in calibration) < written_ns
    assert {r["temperature_sha256"] for r in audit} == {sha256_file(temperature)}
    assert {r["temperature_sha256"] for r in calibration} == {None}


@standin
def test_a_worker_killed_mid_audit_still_completes_with_every_batch_once(
        single: Path, tmp_path: Path, signing_key_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bundle"
    facts = _scenario("kill-worker", tmp_path / "kill.json", str(out), _key(signing_key_dir), str(LOCK))
    assert facts["killed"] is not None, "no audit batch was seen arriving at a worker"
    assert facts["rc"] == 0, facts["log"]
    cluster = _cluster(out)
    dead = [w for w in cluster["workers"] if w["died"]]
    assert len(dead) == 1
    for pool in ("calibration", "audit"):
        owned = sorted(b for w in cluster["workers"] for b in w["batches"].get(pool, []))
        assert owned == _batches(out, pool)
    for rel in PREDICTIONS:
        assert (out / rel).read_bytes() == (single / rel).read_bytes(), rel
    code, report = _verify(out, signing_key_dir, capsys)
    assert code == 0, report
    assert "1 worker(s) died" in (out / "data" / "report.md").read_text()


@standin
def test_sharded_reproduce_gives_the_single_process_verdict(
        single: Path, tmp_path: Path, signing_key_dir: Path) -> None:
    here = tmp_path / "single.intoto.json"
    rc_here = job_main(["reproduce", str(single), "--out", str(here), "--signing-key", _key(signing_key_dir),
                        "--resources", str(LOCK), "--no-progress"])
    there = tmp_path / "sharded.intoto.json"
    facts = _scenario("reproduce", tmp_path / "reproduce.json", str(single), str(there), _key(signing_key_dir),
                      str(LOCK))
    assert rc_here == 0 and facts["rc"] == 0, facts["log"]
    found = [_predicate(path) for path in (here, there)]
    assert [p["verdict"] for p in found] == ["bit-identical", "bit-identical"]
    assert found[0]["rows"] == found[1]["rows"] and found[0]["rows"]["compared"] > 0
    assert len({r["pid"] for r in facts["receipts"]}) == 2  # both workers re-ran batches
    # the attestation names the workers that re-ran each recorded batch, and judges each batch
    # against the kind that signed it: here one kind on both sides, every group bit-identical
    assert found[0]["batch_kinds"]["workers"] is None
    workers = found[1]["batch_kinds"]["workers"]
    for pool in ("calibration", "audit"):
        ran = sorted(b for w in workers for b in w["batches"].get(pool, []))
        assert ran == _batches(single, pool)
    assert all(g["same_kind"] and g["level"] == "bit-identical" for g in found[1]["batch_kinds"]["groups"])


@standin
def test_a_cluster_that_loses_every_worker_stops_with_one_sentence_and_no_bundle(
        tmp_path: Path, signing_key_dir: Path) -> None:
    out = tmp_path / "bundle"
    facts = _scenario("lose-all", tmp_path / "lose.json", str(out), _key(signing_key_dir), str(LOCK))
    assert facts["killed"] is not None
    assert facts["rc"] == 2, facts["log"]
    assert not out.exists() and not [p.name for p in tmp_path.iterdir() if "bundle" in p.name]
    errors = [line for line in facts["log"].splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Every worker of the cluster died" in errors[0], facts["log"]
    assert "Traceback" not in facts["log"]


BAD_FILES = """
import json, sys
from pathlib import Path
from job.errors import JobError
from job.protocol import load_protocol
from job.resources import resolve_local
from job.runtime import Settings
from job.sharded import ShardOptions, sharded_engine
from job.sweep_spec import absolute_lock
protocol, lock = load_protocol(Path(sys.argv[1])), Path(sys.argv[2])
resources = resolve_local(lock, protocol.resources)
seen = absolute_lock(lock)  # the files as a worker finds them: one is not the run's
seen["model"]["files"][0]["sha256"] = "0" * 64
try:
    with sharded_engine(ShardOptions(None, 1, seen, None, local_cpus=2), protocol.raw, resources.record(),
                        resources, Settings.from_protocol(protocol.inference)):
        print(json.dumps({"error": None}))
except JobError as exc:
    print(json.dumps({"error": str(exc)}))
"""


def test_a_worker_whose_files_do_not_match_stops_before_any_batch(tiny_world: tuple[Path, Path],
                                                                  tmp_path: Path) -> None:
    script = tmp_path / "bad_files.py"
    script.write_text(BAD_FILES)
    protocol, lock = tiny_world
    inner = f"ip link set lo up && exec {sys.executable} {script} {protocol} {lock}"
    done = subprocess.run(["unshare", "--net", "--pid", "--fork", "--mount-proc", "bash", "-c", inner],
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled",
                               "RAY_USAGE_STATS_ENABLED": "0"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    error = json.loads(done.stdout.strip().splitlines()[-1])["error"]
    assert error.startswith("A worker could not start: model file ") and "expected 0000" in error
    assert "\n" not in error


def _world(request: pytest.FixtureRequest) -> tuple[Path | None, Path]:
    """(protocol, lock): the stand-in with the repository's protocol where ../shared/fixtures is
    present, else the generated tiny world."""
    if SHARED_FIXTURES.is_dir():
        return None, LOCK
    protocol, lock = request.getfixturevalue("tiny_world")
    return protocol, lock


def test_a_node_limited_to_avx2_makes_a_mixed_run_whose_reproduction_here_is_judged_batch_by_batch(
        request: pytest.FixtureRequest, tmp_path: Path, signing_key_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A head as this machine is and a second node started with ONEDNN_MAX_CPU_ISA=AVX2
    ATEN_CPU_CAPABILITY=avx2, one 1-CPU worker on each (each node has 1 CPU). The run records two
    CPU kinds and says MIXED; reproduced here, unlimited, the batches this machine's kind ran are
    bit-identical and the AVX2 worker's are equivalent, not identical: its arithmetic was AVX2's."""
    from job.arithmetic import arithmetic_record
    from job.batch_kinds import kind_of
    from tests.job.shard_cluster import AVX2_ENV
    from tests.job.test_reproduce_levels import line, verify

    if computes_as_avx2_or_less():
        pytest.skip("this CPU (or this process) computes as AVX2 or less, so an AVX2 node is not another kind")
    protocol, lock = _world(request)
    out = tmp_path / "bundle"
    facts = _scenario("mixed", tmp_path / "mixed.json", str(out), _key(signing_key_dir), str(lock),
                      *([] if protocol is None else [str(protocol)]))
    assert facts["rc"] == 0, facts["log"]

    here = kind_of(arithmetic_record())
    avx2 = here.rsplit(" | ", 1)[0] + " | AVX2"
    cluster = _cluster(out)
    ran = [w for w in cluster["workers"] if any(w["batches"].values())]
    assert len(ran) == 2 and len({w["node_id"] for w in ran}) == 2
    assert sorted(w["cpu_kind"] for w in ran) == sorted([here, avx2])
    # Each worker process had its node's environment: the AVX2 one the limits, the other none of them.
    pid_of = {(r["pool"], r["batch"]): str(r["pid"]) for r in facts["receipts"]}
    for w in ran:
        pids = {pid_of[(pool, b)] for pool, bs in w["batches"].items() for b in bs}
        assert len(pids) == 1
        seen = facts["worker_env"][pids.pop()]
        limited = w["cpu"]["isa"] == "AVX2"
        assert seen == (AVX2_ENV if limited else dict.fromkeys(AVX2_ENV)), (w["cpu_kind"], seen)
    for pool in ("calibration", "audit"):
        owned = sorted(b for w in ran for b in w["batches"].get(pool, []))
        assert owned == _batches(out, pool)
    assert "MIXED CPU kinds" in (out / "data" / "report.md").read_text()
    code, shown = verify(out, signing_key_dir / "signing-key.pub.pem", capsys)
    assert code == 0, shown
    assert "2 CPU kind(s), MIXED" in line(shown, "cluster.batch-owners")

    att = tmp_path / "here.intoto.json"
    rc = job_main(["reproduce", str(out), "--out", str(att), "--signing-key", _key(signing_key_dir),
                   "--resources", str(lock), "--no-progress"])
    p = _predicate(att)
    assert rc == 0 and p["verdict"] == "equivalent", p["verdict"]
    groups = p["batch_kinds"]["groups"]
    ours = [g for g in groups if g["signed_on"] == here]
    theirs = [g for g in groups if g["signed_on"] == avx2]
    assert ours and theirs and len(ours) + len(theirs) == len(groups)
    assert all(g["rerun_on"] == here for g in groups)
    for g in ours:
        assert g["same_kind"] and g["level"] == "bit-identical" and g["identical"] == g["rows"], g
    for g in theirs:
        assert not g["same_kind"] and g["level"] in {"bit-identical", "equivalent"}, g
    # The AVX2 worker's arithmetic was not this machine's: some of its logits differ from the re-run here.
    assert sum(g["identical"] for g in theirs) < sum(g["rows"] for g in theirs)
    assert max(g["largest_difference"]["abs"] for g in theirs) > 0
    code, shown = verify(out, signing_key_dir / "signing-key.pub.pem", capsys, "--reproduction", str(att),
                         "--trusted-reproducer", str(signing_key_dir / "signing-key.pub.pem"))
    assert code == 0, shown
    kinds_line = line(shown, "reproduction.1.batch-kinds")
    assert "signed on 2 CPU kinds (MIXED)" in kinds_line
    # Which worker ran which batch is the signer's word: the re-run here measured the arithmetic the
    # bundle records for its signer and is not bit-identical, so the warning stays, naming the claim.
    assert "SUSPICIOUS: not bit-identical, though the reproducer measured the arithmetic" in kinds_line
    assert "the signer's word that nothing checks" in kinds_line
    assert "signed on 2 CPU kinds (MIXED; each batch judged" in line(shown, "reproduction.1.reproduced")
