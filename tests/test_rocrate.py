"""data/ro-crate-metadata.json (job/rocrate.py): a Process-Run-style RO-Crate 1.2 whose root is
data/, listing every payload file but itself, and passing rocrate-validator at REQUIRED."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bundle.canonical import dumps, loads_strict
from job import __version__
from job.rocrate import CRATE, crate_bytes, crate_metadata, payload_files

REPO = Path(__file__).resolve().parent.parent
OFFLINE = REPO.parent / "shared" / "rocrate-offline"
FINGERPRINT = "0f" * 32


def _validator() -> str | None:
    here = Path(sys.executable).parent / "rocrate-validator"
    return str(here) if here.exists() else shutil.which("rocrate-validator")


@pytest.fixture
def crate_dir(tiny_data: Path, tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    (data / CRATE).write_bytes(crate_bytes(data, signer_fingerprint=FINGERPRINT, date_published="2024-05-07"))
    return data


def entities(crate: dict) -> dict[str, dict]:
    out = {}
    for e in crate["@graph"]:
        assert e["@id"] not in out, f"{e['@id']} described twice"
        out[e["@id"]] = e
    return out


def ids(value) -> list[str]:
    return [v["@id"] for v in (value if isinstance(value, list) else [value])]


def test_every_payload_file_but_the_crate_with_its_hash(crate_dir: Path):
    raw = (crate_dir / CRATE).read_bytes()
    assert dumps(loads_strict(raw)) == raw
    crate = json.loads(raw)
    assert crate["@context"] == "https://w3id.org/ro/crate/1.2/context"
    ent = entities(crate)
    files = payload_files(crate_dir)
    assert CRATE not in files and "report.md" in files and "figures/reliability-audit.png" in files
    for rel in files:
        data = (crate_dir / rel).read_bytes()
        assert ent[rel]["@type"] == "File"
        if rel == "environment.json":  # varies between runs: hashed only by the bag manifests
            assert "sha256" not in ent[rel] and "contentSize" not in ent[rel]
            continue
        assert ent[rel]["sha256"] == hashlib.sha256(data).hexdigest()
        assert ent[rel]["contentSize"] == str(len(data))
    assert hashlib.sha256(raw).hexdigest() not in raw.decode()
    assert "sha256" not in ent[CRATE]
    assert {e for e, v in ent.items() if v["@type"] == "File"} == set(files)
    assert ent["metrics.json"]["conformsTo"] == {"@id": "https://calibration-runs.example/schemas/metrics/v1"}


def test_linked_from_the_root(crate_dir: Path):
    ent = entities(json.loads((crate_dir / CRATE).read_bytes()))
    root = ent["./"]
    reached = set()
    todo = ids(root["hasPart"])
    while todo:
        i = todo.pop()
        reached.add(i)
        todo += ids(ent[i].get("hasPart", []))
    assert set(payload_files(crate_dir)) <= reached
    assert ent[CRATE]["about"] == {"@id": "./"}
    assert root["datePublished"] == "2024-05-07"


def test_the_run_as_a_create_action(crate_dir: Path):
    ent = entities(json.loads((crate_dir / CRATE).read_bytes()))
    action = ent["#run"]
    assert action["@type"] == "CreateAction"
    software = ent[action["instrument"]["@id"]]
    assert software["@type"] == "SoftwareApplication" and software["version"] == __version__
    env = json.loads((crate_dir / "environment.json").read_text())
    if env["git_commit"]:
        assert ent[software["identifier"]["@id"]]["value"] == env["git_commit"]
    objects, results = ids(action["object"]), ids(action["result"])
    assert objects == ["protocol.json", "#input-model", "#input-dataset"]
    assert sorted(results + ["protocol.json"]) == payload_files(crate_dir)
    resources = json.loads((crate_dir / "resources.json").read_text())
    for kind in ("model", "dataset"):
        repo = ent[f"#input-{kind}"]
        assert repo["version"] == resources[kind]["revision"]
        parts = {ent[i]["name"]: ent[i] for i in ids(repo["hasPart"])}
        for f in resources[kind]["files"]:
            assert parts[f["path"]]["sha256"] == f["sha256"]


def test_signer_fingerprint_only_when_signed(crate_dir: Path):
    ent = entities(json.loads((crate_dir / CRATE).read_bytes()))
    assert ent["#signer-key"]["value"] == FINGERPRINT
    assert {"@id": "#signer-key"} in ent["./"]["mentions"]
    unsigned = crate_metadata(crate_dir, signer_fingerprint=None, date_published="2024-05-07")
    assert "#signer-key" not in entities(unsigned)


def test_same_files_same_crate_whatever_the_timings(crate_dir: Path):
    a = crate_bytes(crate_dir, signer_fingerprint=FINGERPRINT, date_published="2024-05-07")
    assert a == (crate_dir / CRATE).read_bytes()
    env = json.loads((crate_dir / "environment.json").read_text())
    env["timings_s"] = {k: v + 1.0 for k, v in env["timings_s"].items()}
    env["peak_rss_mb"] = env["peak_rss_mb"] + 10.5
    (crate_dir / "environment.json").write_text(json.dumps(env))
    assert crate_bytes(crate_dir, signer_fingerprint=FINGERPRINT, date_published="2024-05-07") == a


@pytest.mark.slow
@pytest.mark.skipif(_validator() is None, reason="rocrate-validator is not installed (pip install roc-validator)")
@pytest.mark.skipif(not OFFLINE.is_dir(), reason="../shared/rocrate-offline is absent")
def test_passes_rocrate_validator_at_required(crate_dir: Path, tmp_path: Path):
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(OFFLINE), "ROCRATE_CONTEXT_DIR": str(OFFLINE)}
    proc = subprocess.run([_validator(), "validate", "--no-cache", "--no-paging", "-l", "required",
                           "-f", "json", "-o", str(report), str(crate_dir)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    result = json.loads(report.read_text())
    issues = [i.get("message") for i in result.get("issues", [])]
    assert proc.returncode == 0 and result["passed"] is True, (issues, proc.stderr[-2000:])


@pytest.mark.slow
@pytest.mark.skipif(_validator() is None, reason="rocrate-validator is not installed (pip install roc-validator)")
@pytest.mark.skipif(not OFFLINE.is_dir(), reason="../shared/rocrate-offline is absent")
def test_the_validator_run_can_fail(crate_dir: Path, tmp_path: Path):
    """The harness is live: a crate without the root's datePublished is rejected."""
    crate = json.loads((crate_dir / CRATE).read_bytes())
    for e in crate["@graph"]:
        if e["@id"] == "./":
            del e["datePublished"]
    (crate_dir / CRATE).write_text(json.dumps(crate))
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(OFFLINE), "ROCRATE_CONTEXT_DIR": str(OFFLINE)}
    proc = subprocess.run([_validator(), "validate", "--no-cache", "--no-paging", "-l", "required",
                           "-f", "json", "-o", str(report), str(crate_dir)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    result = json.loads(report.read_text())
    assert proc.returncode != 0 and result["passed"] is False
    assert any("datePublished" in (i.get("message") or "") for i in result["issues"])
