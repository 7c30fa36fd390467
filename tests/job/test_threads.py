"""The torch thread count is a run setting: physical cores by default, the protocol's torch_threads
its upper bound, recorded in environment.json; the logits do not depend on it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from job.cli import main
from job.errors import JobError
from job.runtime import BATCHES, OPERATORS, PRIMITIVE_CACHE_VARS, ThreadChoice, cpu_quota, physical_cores
from tests.factory import REPO, edited_json
from verify.result import Failed
from verify.run_settings import check_threads


def test_the_default_is_the_physical_cores_within_the_quota_and_the_protocols_bound() -> None:
    assert ThreadChoice.choose(4, cores=2).used == 2
    assert ThreadChoice.choose(4, cores=16).used == 4
    assert ThreadChoice.choose(4, cores=16, quota=3).used == 3
    assert ThreadChoice.choose(1, cores=16).used == 1
    assert ThreadChoice.choose(4, cores=2).chosen_by == "physical cores"


def test_threads_given_must_lie_within_the_protocols_bound() -> None:
    assert ThreadChoice.choose(4, 3, cores=2) == ThreadChoice(3, "--threads", 4, 2, None)
    for wrong in (0, 5):
        with pytest.raises(JobError, match=r"^--threads .* is outside 1\.\.4: .*; pass a count in that range\.$"):
            ThreadChoice.choose(4, wrong, cores=2)


def test_physical_cores_count_hyperthread_siblings_once(tmp_path: Path) -> None:
    for cpu, siblings in enumerate(["0,2", "1,3", "0,2", "1,3"]):
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(siblings + "\n")
    assert physical_cores(range(4), tmp_path) == 2
    assert physical_cores([0, 1], tmp_path) == 2
    assert physical_cores([0, 2], tmp_path) == 1
    assert physical_cores([0, 7], tmp_path) == 2  # no topology for cpu7: every logical CPU counts


def test_cpu_quota_reads_cgroup_v2_cpu_max(tmp_path: Path) -> None:
    cpu_max = tmp_path / "cpu.max"
    assert cpu_quota(cpu_max) is None
    cpu_max.write_text("max 100000\n")
    assert cpu_quota(cpu_max) is None
    cpu_max.write_text("150000 100000\n")
    assert cpu_quota(cpu_max) == 2


def test_threads_spin_briefly_unless_the_environment_or_an_earlier_torch_import_decides() -> None:
    """GOMP_SPINCOUNT goes into the environment only before torch is imported (libgomp reads it
    then) and only where neither it nor a wait policy is set; the record says what holds."""
    code = ("import json, sys\n"
            "from job.runtime import bounded_thread_waits as waits\n"
            "env, policy, spins = {}, {'OMP_WAIT_POLICY': 'PASSIVE'}, {'GOMP_SPINCOUNT': '0'}\n"
            "out = [waits(env), env, waits(policy), policy, waits(spins), spins]\n"
            "import torch\n"
            "out += [waits(late := {}), late]\n"
            "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                          env={k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")})
    assert json.loads(done.stdout) == [
        {"omp_wait_policy": None, "gomp_spincount": "10000", "set_by_job": True}, {"GOMP_SPINCOUNT": "10000"},
        {"omp_wait_policy": "PASSIVE", "gomp_spincount": None, "set_by_job": False}, {"OMP_WAIT_POLICY": "PASSIVE"},
        {"omp_wait_policy": None, "gomp_spincount": "0", "set_by_job": False}, {"GOMP_SPINCOUNT": "0"},
        {"omp_wait_policy": None, "gomp_spincount": None, "set_by_job": False}, {}]


def _without_cache_vars() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in PRIMITIVE_CACHE_VARS}


def test_onednn_keeps_16_primitives_per_forward_unless_the_environment_or_an_earlier_torch_import_decides() -> None:
    """ONEDNN_PRIMITIVE_CACHE_CAPACITY goes into the environment only before torch is imported and
    only where neither it nor its older name is set; the record says what holds."""
    code = ("import json\n"
            "from job.runtime import bounded_primitive_cache as bound\n"
            "env, new, old = {}, {'ONEDNN_PRIMITIVE_CACHE_CAPACITY': '8'}, {'DNNL_PRIMITIVE_CACHE_CAPACITY': '4'}\n"
            "out = [bound(2, env), env, bound(2, new), new, bound(2, old), old]\n"
            "import torch\n"
            "out += [bound(2, late := {}), late]\n"
            "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                          env=_without_cache_vars())
    assert json.loads(done.stdout) == [
        {"onednn_primitive_cache_capacity": "32", "set_by_job": True}, {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32"},
        {"onednn_primitive_cache_capacity": "8", "set_by_job": False}, {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "8"},
        {"onednn_primitive_cache_capacity": "4", "set_by_job": False}, {"DNNL_PRIMITIVE_CACHE_CAPACITY": "4"},
        {"onednn_primitive_cache_capacity": None, "set_by_job": False}, {}]


@pytest.mark.parametrize(("layout", "capacity"), [(BATCHES, "32"), (OPERATORS, "16")])
def test_a_run_bounds_the_cache_by_its_concurrent_forwards(layout: str, capacity: str) -> None:
    """At 2 threads: two forwards at once in the batches layout, one on both threads otherwise."""
    code = ("import json\n"
            "from job.protocol import DEFAULT_PROTOCOL, load_protocol\n"
            "from job.runtime import Settings, configure_torch\n"
            f"s = Settings.from_protocol(load_protocol(DEFAULT_PROTOCOL).inference, 2, layout={layout!r})\n"
            "print(json.dumps(configure_torch(s)['primitive_cache']))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                          env=_without_cache_vars())
    assert json.loads(done.stdout) == {"onednn_primitive_cache_capacity": capacity, "set_by_job": True}


@pytest.mark.parametrize("bounded", [True, False])
def test_onednn_takes_the_bound_and_makes_an_evicted_primitive_again(bounded: bool) -> None:
    """oneDNN reads the capacity the job sets (at its first primitive): with 16, the first of 20
    shapes is evicted and made again, a cache miss in oneDNN's own log; at its default of 1024 it is
    found. The product is the same bits either way."""
    code = ("import sys\n"
            "from job.runtime import bounded_primitive_cache\n"
            f"if {bounded}: bounded_primitive_cache(1)\n"
            "import torch\n"
            "if not torch.backends.mkldnn.is_available(): sys.exit(3)\n"
            "from job.linear_kernels import _onednn_linear\n"
            "w = torch.linspace(-1, 1, 64).reshape(8, 8)\n"
            "def ip(m): return _onednn_linear(torch.ones(m, 8), w)\n"
            "first = ip(2)\n"
            "for m in range(3, 22): ip(m)\n"
            "print('=== again', flush=True)\n"
            "assert torch.equal(ip(2), first)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False,
                          env={**_without_cache_vars(), "ONEDNN_VERBOSE": "all"}, timeout=120)
    if done.returncode == 3:
        pytest.skip("this torch has no oneDNN")
    assert done.returncode == 0, done.stderr
    # oneDNN's log lines: onednn_verbose[,v1],primitive,create:cache_hit|create:cache_miss,cpu,inner_product,...
    made = re.findall(r"^onednn_verbose(?:,v\d+)?,primitive,(create:cache_\w+),cpu,inner_product,",
                      done.stdout.split("=== again", 1)[1], flags=re.MULTILINE)
    assert made == ["create:cache_miss" if bounded else "create:cache_hit"]


def test_the_run_records_its_thread_choice(tiny_bundle: Path) -> None:
    environment = json.loads((tiny_bundle / "data" / "environment.json").read_text())
    protocol = json.loads((tiny_bundle / "data" / "protocol.json").read_text())
    assert environment["threads"]["used"] == environment["torch"]["num_threads"] == 1
    assert environment["threads"]["protocol_bound"] == protocol["inference"]["torch_threads"] == 1
    assert environment["threads"]["layout"] == "batches"
    assert check_threads(environment, protocol) == "1 of at most 1 torch threads (physical cores)"
    bounded = {**protocol, "inference": {**protocol["inference"], "torch_threads": 4}}
    two = {**environment, "torch": {**environment["torch"], "num_threads": 2},
           "threads": {**environment["threads"], "used": 2, "chosen_by": "--threads", "protocol_bound": 4}}
    assert check_threads(two, bounded) == "2 of at most 4 torch threads (--threads), 2 batches at once, one thread each"
    two["threads"]["layout"] = "operators"
    assert check_threads(two, bounded) == "2 of at most 4 torch threads (--threads), one batch at a time"
    del two["threads"]["layout"]  # written before the layout was recorded
    assert check_threads(two, bounded) == "2 of at most 4 torch threads (--threads)"


def test_the_verifier_refuses_a_thread_record_beyond_the_bound(tiny_bundle: Path) -> None:
    environment = json.loads((tiny_bundle / "data" / "environment.json").read_text())
    protocol = json.loads((tiny_bundle / "data" / "protocol.json").read_text())
    for edit, message in (({"used": 2}, "outside the protocol's 1..1"), ({"protocol_bound": 4}, "allowed 4"),
                          ({"physical_cores": 8}, None)):
        record = {**environment, "threads": {**environment["threads"], **edit}}
        if message is None:
            assert check_threads(record, protocol)
        else:
            with pytest.raises(Failed, match=message):
                check_threads(record, protocol)
    bounded = {**protocol, "inference": {**protocol["inference"], "torch_threads": 4}}
    record = {**environment, "threads": {**environment["threads"], "protocol_bound": 4, "physical_cores": 2}}
    with pytest.raises(Failed, match="that rule gives 2"):
        check_threads(record, bounded)


def test_threads_beyond_the_bound_exit_2_before_anything_is_written(tiny_world: tuple[Path, Path], tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    protocol, lock = tiny_world
    out = tmp_path / "bundle"
    rc = main(["run", "--protocol", str(protocol), "--resources", str(lock), "--out", str(out),
               "--ephemeral-key", "--no-progress", "--threads", "2"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --threads 2 is outside 1..1") and "Traceback" not in "".join(err)
    assert list(tmp_path.iterdir()) == []


def test_the_logits_are_bit_identical_at_1_to_4_threads(tiny_world: tuple[Path, Path], tmp_path: Path) -> None:
    from job.pipeline import execute
    from job.protocol import load_protocol
    from job.resources import resolve_local

    protocol_path, lock = tiny_world
    four = edited_json(protocol_path, tmp_path / "protocol.json",
                       lambda doc: doc["inference"].update(torch_threads=4))
    protocol = load_protocol(four)
    resources = resolve_local(lock, protocol.resources)
    predictions: list[tuple[bytes, bytes]] = []
    for n in (1, 2, 3, 4):
        data = tmp_path / f"threads{n}" / "data"
        execute(protocol, resources, data, progress=False, threads=n)
        assert json.loads((data / "environment.json").read_text())["torch"]["num_threads"] == n
        predictions.append(((data / "predictions" / "calibration.parquet").read_bytes(),
                            (data / "predictions" / "audit.parquet").read_bytes()))
    assert all(p == predictions[0] for p in predictions)


def test_a_reproduction_reruns_at_the_thread_count_the_bundle_records() -> None:
    from job.reproduce import signer_threads

    assert signer_threads({"threads": {"used": 1}}, 4) == 1
    assert signer_threads({"threads": {"used": 3}}, 4) == 3
    assert signer_threads({}, 4) is None  # format 1: no record, the machine's default
    assert signer_threads({"threads": {"used": 8}}, 4) is None  # beyond the protocol's bound
    assert signer_threads({"threads": {"used": True}}, 4) is None
    workers = [{"threads": 1, "batches": {"audit": [0]}}, {"threads": 1, "batches": {"calibration": [1]}},
               {"threads": 4, "batches": {}}]  # a worker that ran nothing does not count
    assert signer_threads({"threads": {"used": 2}, "cluster": {"workers": workers}}, 4) == 1
    workers[1]["threads"] = 2
    assert signer_threads({"cluster": {"workers": workers}}, 4) is None  # several counts


def test_a_reproduction_runs_its_forwards_as_the_bundle_records() -> None:
    from job.protocol import load_protocol
    from job.reproduce import rerun_settings, signer_layout
    from job.sharded import ShardOptions

    protocol = load_protocol()  # torch_threads 4
    batches = {"threads": {"used": 2, "layout": "batches"}}
    operators = {"threads": {"used": 3, "layout": "operators"}}
    assert signer_layout(batches) == BATCHES
    assert signer_layout(operators) == signer_layout({"threads": {"used": 3}}) == signer_layout({}) == OPERATORS
    assert signer_layout({**batches, "cluster": {"workers": []}}) == OPERATORS  # workers run one batch at a time
    assert signer_layout({"threads": {"used": 2, "layout": "sideways"}}) == OPERATORS
    # one thread per forward: any count here gives the signer's bits, so the machine's default is taken
    here = rerun_settings(batches, protocol, None)
    assert (here.layout, here.thread_choice.chosen_by if here.thread_choice else None) == (BATCHES, "physical cores")
    again = rerun_settings(operators, protocol, None)
    assert (again.layout, again.threads, again.forward_workers) == (OPERATORS, 3, 1)
    sharded = rerun_settings(operators, protocol, ShardOptions(address="127.0.0.1:1"))
    assert (sharded.layout, sharded.threads) == (OPERATORS, 3)
    one_each = rerun_settings(batches, protocol, ShardOptions(address="127.0.0.1:1"))
    assert (one_each.layout, one_each.threads) == (OPERATORS, 1)  # workers of one thread, one batch each


def test_a_run_on_a_cluster_records_its_workers_one_batch_at_a_time() -> None:
    from job.pipeline import run_settings
    from job.protocol import load_protocol
    from job.sharded import ShardOptions

    protocol = load_protocol()
    assert run_settings(protocol, 2).layout == BATCHES
    assert run_settings(protocol, 2).forward_workers == 2
    on_cluster = run_settings(protocol, None, ShardOptions(address="127.0.0.1:1", worker_cpus=2))
    assert (on_cluster.layout, on_cluster.threads, on_cluster.forward_workers) == (OPERATORS, 2, 1)
    assert on_cluster.thread_choice is not None and on_cluster.thread_choice.record()["layout"] == OPERATORS


def test_the_schema_allows_only_the_two_layouts(tiny_bundle: Path) -> None:
    from verify import schemacheck

    environment = json.loads((tiny_bundle / "data" / "environment.json").read_text())
    for layout in ("batches", "operators"):
        schemacheck.validate({**environment, "threads": {**environment["threads"], "layout": layout}}, "environment",
                             "environment.json")
    without = {k: v for k, v in environment["threads"].items() if k != "layout"}
    schemacheck.validate({**environment, "threads": without}, "environment", "environment.json")  # older bundles
    with pytest.raises(schemacheck.SchemaCheckFailed, match="sideways"):
        schemacheck.validate({**environment, "threads": {**environment["threads"], "layout": "sideways"}},
                             "environment", "environment.json")
