"""The full job on real SST-2 validation and the stand-in classifier in ../shared/fixtures."""

import json

import pytest

from job.cli import main
from tests.factory import REPO, SHARED_FIXTURES

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not SHARED_FIXTURES.is_dir(), reason="../shared/fixtures is absent")]

LOCK = REPO / "job" / "resources" / "standin.json"
DETERMINISTIC = ("data/predictions/calibration.parquet", "data/predictions/audit.parquet",
                 "data/temperature.json", "data/trajectory.json", "data/metrics.json",
                 "data/pools.json", "data/stages.json", "data/resources.json", "data/protocol.json",
                 "data/bootstrap.json", "data/stability.json", "data/report.md",
                 "data/ro-crate-metadata.json", "data/figures/confidence-audit.png",
                 "data/figures/reliability-audit.png")
"""Every payload file except data/environment.json (timings, peak memory) is byte-identical."""


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, signing_key_dir):
    outs = []
    for i in range(2):
        out = tmp_path_factory.mktemp(f"standin{i}") / "bundle"
        rc = main(["run", "--resources", str(LOCK), "--out", str(out), "--no-progress",
                   "--signing-key", str(signing_key_dir / "signing-key.pem")])
        assert rc == 0
        outs.append(out)
    return outs


def test_standin_run_matches_its_golden_digests(two_runs, golden):
    golden("standin", two_runs[0])


def test_pools_are_256_256_360_and_disjoint(two_runs):
    pools = json.loads((two_runs[0] / "data" / "pools.json").read_text())
    assert pools["sizes"] == {"explore": 256, "calibration": 256, "audit": 360}
    ids = [{e["idx"] for e in pools["pools"][name]} for name in ("explore", "calibration", "audit")]
    assert len(ids[0] | ids[1] | ids[2]) == 872


def test_two_runs_give_byte_identical_results(two_runs):
    a, b = two_runs
    for rel in DETERMINISTIC:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    payload = sorted(p.relative_to(a).as_posix() for p in (a / "data").rglob("*") if p.is_file())
    assert sorted([*DETERMINISTIC, "data/environment.json"]) == payload


def test_standin_run_is_labelled_other_and_fits_an_overconfident_model(two_runs):
    data = two_runs[0] / "data"
    resources = json.loads((data / "resources.json").read_text())
    assert resources["profile"] == "other" and resources["deviations"]
    t = json.loads((data / "temperature.json").read_text())
    metrics = json.loads((data / "metrics.json").read_text())
    assert not t["boundary"] and t["temperature"] > 1.0  # the README calls the stand-in overconfident
    assert abs(t["final_gradient"]) < 1e-9
    audit = metrics["pools"]["audit"]
    assert audit["raw"]["correct"] == audit["calibrated"]["correct"]
    assert metrics["argmax_unchanged"]
    assert t["nll_after"] < t["nll_before"]


def test_no_sentence_text_in_the_bundle(two_runs):
    import pyarrow.parquet as pq

    table = pq.read_table(SHARED_FIXTURES / "sst2" / "validation-00000-of-00001.parquet")
    sentences = table.column("sentence").to_pylist()
    probes = [s.strip().encode() for s in sentences if len(s.strip()) > 25][:50]
    for path in two_runs[0].rglob("*"):
        if path.is_file():
            blob = path.read_bytes()
            assert not any(p in blob for p in probes), path


def test_bag_is_valid_for_the_bagit_library(two_runs):
    import bagit

    bagit.Bag(str(two_runs[0])).validate()
