"""The tiny run holds its goldens on this CPU, under limited instruction sets and against the
Intel-written bundle; a real change fails them; how goldens are compared and updated."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from job.runtime import BATCHES, PRIMITIVE_CACHE_VARS, PRIMITIVES_PER_WORKER
from tests.factory import make_lock
from tests.goldens import (
    EXACT,
    FIGURES,
    GOLDEN_DIR,
    LOGIT_TOLERANCE,
    PREDICTIONS,
    compare,
    cpu_kind,
    differences,
    digests,
    observe,
    row_differences,
    run_in_child,
)

ELSEWHERE = {"vendor": "OtherVendor", "model": "Other CPU", "isa": "AVX2"}
"""A CPU kind no golden records: only the tolerances apply."""
LIMITED_ISA = {"avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
               "default": {"ONEDNN_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default"}}


def test_tiny_run_matches_its_goldens(tiny_bundle: Path, golden: Callable[[str, Path], None]) -> None:
    golden("tiny", tiny_bundle)


# AVX2 (the other common x86-64 kind) in make test; the baseline instruction set in make test-slow.
@pytest.mark.parametrize("isa", [i if i == "avx2" else pytest.param(i, marks=pytest.mark.slow)
                                 for i in sorted(LIMITED_ISA)])
def test_tiny_goldens_hold_under_a_limited_instruction_set(isa: str, tiny_world: tuple[Path, Path],
                                                           tmp_path: Path) -> None:
    protocol, lock = tiny_world
    out = tmp_path / "bundle"
    kind = run_in_child(["--protocol", str(protocol), "--resources", str(lock), "--ephemeral-key", "--no-progress"],
                        out, LIMITED_ISA[isa])
    # the limit took effect in the child, which differs from this process unless it runs under the same limit
    assert isa.upper() in kind["isa"] and (kind != cpu_kind() or isa.upper() in cpu_kind()["isa"])
    compare("tiny", out, None, kind=kind)
    # a run's first import of torch comes after its threads are told how long to spin
    environment = json.loads((out / "data" / "environment.json").read_text())
    torch, threads = environment["torch"], environment["threads"]
    policy, spins = os.environ.get("OMP_WAIT_POLICY"), os.environ.get("GOMP_SPINCOUNT")
    decided = policy is not None or spins is not None
    assert torch["thread_waits"] == {"omp_wait_policy": policy, "gomp_spincount": spins if decided else "10000",
                                     "set_by_job": not decided}
    # and oneDNN's primitive cache is bounded by the forwards the run had at once
    workers = threads["used"] if threads["layout"] == BATCHES else 1
    held = next((os.environ[k] for k in PRIMITIVE_CACHE_VARS if k in os.environ), None)
    assert torch["primitive_cache"] == {"onednn_primitive_cache_capacity": held or str(PRIMITIVES_PER_WORKER * workers),
                                        "set_by_job": held is None}


def test_the_intel_written_tiny_bundle_is_within_the_tolerances() -> None:
    """tests/goldens/bundle-v1 is the tiny run signed on an Intel Xeon; the goldens are not its bits."""
    intel = GOLDEN_DIR / "bundle-v1"
    golden = json.loads((GOLDEN_DIR / "tiny.json").read_text())
    found = observe(intel)
    assert found["rows"] != golden["rows"]  # not bit-identical: the tolerance is what holds
    assert row_differences(golden, found) == []
    for key in ("temperature", "beta"):
        want, got = golden["figures"]["data/temperature.json"][key], found["figures"]["data/temperature.json"][key]
        assert abs(want - got) <= 2e-6, key


def test_the_goldens_pin_rows_figures_and_exact_digests_by_cpu_kind() -> None:
    for run in ("standin", "tiny"):
        doc = json.loads((GOLDEN_DIR / f"{run}.json").read_text())
        assert sorted(doc) == ["exact", "figures", "rows"]
        assert sorted(doc["rows"]) == sorted(PREDICTIONS)
        for rows in doc["rows"].values():
            assert rows and all(isinstance(r[0], int) and r[1] in (0, 1) and len(r) == 4 for r in rows)
        assert sorted(doc["figures"]) == sorted(FIGURES)
        assert isinstance(doc["figures"]["data/temperature.json"]["temperature"], float)
        assert doc["exact"]
        for entry in doc["exact"]:
            assert sorted(entry["cpu"]) == ["isa", "model", "vendor"]
            assert set(entry["sha256"]) <= set(EXACT) and all(len(v) == 64 for v in entry["sha256"].values())


@pytest.fixture(scope="module")
def scaled_world(tiny_world: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """scaled(name): the tiny run's payload with the weight matrix `name` multiplied by 1 + 1e-3."""
    from safetensors.numpy import load_file, save_file

    from job.pipeline import execute
    from job.protocol import load_protocol
    from job.resources import resolve_local

    protocol_path, lock = tiny_world
    doc = json.loads(lock.read_text())
    model = Path(doc["model"]["files"][0]["local_path"]).parent
    dataset = Path(doc["dataset"]["files"][0]["local_path"])

    def scaled(name: str) -> Path:
        root = tmp_path_factory.mktemp("scaled")
        shutil.copytree(model, root / "model")
        tensors = load_file(root / "model" / "model.safetensors")
        tensors[name] = (tensors[name] * np.float32(1 + 1e-3)).astype(np.float32)
        save_file(tensors, str(root / "model" / "model.safetensors"), metadata={"format": "pt"})
        scaled_lock = make_lock(root / "lock.json", root / "model", dataset, doc["dataset"]["rows"],
                                doc["dataset"]["labels"])
        protocol = load_protocol(protocol_path)
        execute(protocol, resolve_local(scaled_lock, protocol.resources), root / "run" / "data", progress=False)
        return root / "run"
    return scaled


@pytest.mark.parametrize("matrix", ["pre_classifier.weight", "classifier.weight",
                                    "distilbert.embeddings.word_embeddings.weight"])
def test_one_weight_matrix_scaled_by_1e_3_fails_the_goldens(matrix: str, scaled_world: Callable[[str], Path]) -> None:
    run = scaled_world(matrix)
    golden = json.loads((GOLDEN_DIR / "tiny.json").read_text())
    found = differences(golden, run, ELSEWHERE)  # on any CPU: the tolerances alone catch it
    assert any("logits" in d.where for d in found), found[:3]
    worst = max(abs(a - b) for d in found if "logits" in d.where
                for a, b in zip(d.expected, d.found, strict=True))
    assert worst > 10 * LOGIT_TOLERANCE
    with pytest.raises(pytest.fail.Exception, match=r"^data/predictions/calibration\.parquet.* of the tiny run"):
        compare("tiny", run, None, kind=ELSEWHERE)


@pytest.fixture
def drifted(tiny_bundle: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(a copy of the tiny bundle whose metrics changed, a golden dir holding the real goldens)."""
    bundle = tmp_path / "bundle"
    for rel in EXACT:
        (bundle / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tiny_bundle / rel, bundle / rel)
    (bundle / "data/metrics.json").write_bytes(b"{}")
    goldens = tmp_path / "goldens"
    goldens.mkdir()
    shutil.copyfile(GOLDEN_DIR / "tiny.json", goldens / "tiny.json")
    (goldens / "CHANGELOG.md").write_text("# log\n")
    return bundle, goldens


def test_a_drift_fails_naming_the_file_and_how_to_update(drifted: tuple[Path, Path]) -> None:
    bundle, goldens = drifted
    for kind in (None, ELSEWHERE):  # this CPU's kind and one without recorded digests
        with pytest.raises(pytest.fail.Exception,
                           match=r"^data/metrics\.json of the tiny run differ.*--update-goldens"):
            compare("tiny", bundle, None, goldens, kind)
    assert (goldens / "tiny.json").read_bytes() == (GOLDEN_DIR / "tiny.json").read_bytes()
    assert (goldens / "CHANGELOG.md").read_text() == "# log\n"


def test_an_update_rewrites_the_golden_and_logs_the_reason(drifted: tuple[Path, Path]) -> None:
    bundle, goldens = drifted
    compare("tiny", bundle, "metrics gained a field", goldens)
    doc = json.loads((goldens / "tiny.json").read_text())
    assert doc["figures"]["data/metrics.json"] == observe(bundle)["figures"]["data/metrics.json"]
    assert doc["exact"] == [{"cpu": cpu_kind(), "sha256": digests(bundle)}]  # other kinds' bits are stale
    last = (goldens / "CHANGELOG.md").read_text().splitlines()[-1]
    assert "`tiny`" in last and "data/metrics.json" in last and last.endswith(": metrics gained a field")
    compare("tiny", bundle, None, goldens)  # now it holds


def test_exact_digests_are_compared_only_on_the_cpu_kind_that_recorded_them(tiny_bundle: Path,
                                                                            tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    for rel in EXACT:
        (bundle / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tiny_bundle / rel, bundle / rel)
    goldens = tmp_path / "goldens"
    goldens.mkdir()
    shutil.copyfile(GOLDEN_DIR / "tiny.json", goldens / "tiny.json")
    (goldens / "CHANGELOG.md").write_text("# log\n")
    kind = {"vendor": "TestVendor", "model": "Test CPU", "isa": "AVX2"}
    compare("tiny", bundle, "recorded on a test kind", goldens, kind)
    doc = json.loads((goldens / "tiny.json").read_text())
    assert doc["exact"][-1] == {"cpu": kind, "sha256": digests(bundle)}
    assert doc["exact"][:-1] == json.loads((GOLDEN_DIR / "tiny.json").read_text())["exact"]
    assert (goldens / "CHANGELOG.md").read_text().splitlines()[-1].endswith(
        "(exact digests on TestVendor Test CPU, AVX2): recorded on a test kind")
    # The same figures in other bytes: within the tolerances, not the recorded bits.
    metrics = bundle / "data/metrics.json"
    metrics.write_text(json.dumps(json.loads(metrics.read_text()), indent=1))
    compare("tiny", bundle, None, goldens, ELSEWHERE)
    with pytest.raises(pytest.fail.Exception,
                       match=r"^data/metrics\.json of the tiny run differ.*sha256 on TestVendor"):
        compare("tiny", bundle, None, goldens, kind)


def test_update_goldens_without_a_reason_is_a_usage_error(pytestconfig: pytest.Config) -> None:
    """The check pytest runs at configuration (tests/conftest.py), given --update-goldens=' '."""
    from tests.conftest import pytest_configure

    class Blank:
        def getoption(self, name: str) -> object:
            return " " if name == "--update-goldens" else pytestconfig.getoption(name)

    with pytest.raises(pytest.UsageError, match="--update-goldens needs a reason"):
        pytest_configure(Blank())  # type: ignore[arg-type]
