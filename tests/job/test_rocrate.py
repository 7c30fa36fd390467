"""data/ro-crate-metadata.json (job/rocrate.py): a Process-Run-style RO-Crate 1.2 whose root is
data/, listing every payload file but itself and environment.json, stating the licence, publisher
and authors, and passing rocrate-validator at RECOMMENDED (so at REQUIRED too)."""

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
from job.errors import JobError
from job.rocrate import CRATE, Party, Publication
from tests.payload import crate_bytes_of, crate_of, described_files

REPO = Path(__file__).resolve().parents[2]
OFFLINE = REPO.parent / "shared" / "rocrate-offline"
FINGERPRINT = "0f" * 32
ORCID = "https://orcid.org/0000-0002-1825-0097"
ROR = "https://ror.org/03yrm5c26"
PUBLICATION = Publication(license="https://spdx.org/licenses/CC-BY-4.0",
                          publisher=Party("Example Lab", ROR), authors=(Party("Ada Lovelace", ORCID),),
                          contact="calibration@example.org")


def _validator() -> str | None:
    here = Path(sys.executable).parent / "rocrate-validator"
    return str(here) if here.exists() else shutil.which("rocrate-validator")


@pytest.fixture
def crate_dir(tiny_data: Path, tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    (data / CRATE).write_bytes(crate_bytes_of(data, signer_fingerprint=FINGERPRINT, date_published="2024-05-07",
                                           publication=PUBLICATION))
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
    files = described_files(crate_dir)
    assert CRATE not in files and "report.md" in files and "figures/reliability-audit.png" in files
    # environment.json varies between runs, in size too: only the bag manifests hash it
    assert "environment.json" not in files and "environment.json" not in ent
    for rel in files:
        data = (crate_dir / rel).read_bytes()
        assert ent[rel]["@type"] == "File"
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
    assert set(described_files(crate_dir)) <= reached
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
    assert sorted(results + ["protocol.json"]) == described_files(crate_dir)
    assert "environment.json" not in results
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
    unsigned = crate_of(crate_dir, signer_fingerprint=None, date_published="2024-05-07")
    assert "#signer-key" not in entities(unsigned)


def test_root_states_licence_publisher_contact_and_authors(crate_dir: Path):
    ent = entities(json.loads((crate_dir / CRATE).read_bytes()))
    root = ent["./"]
    assert root["license"] == {"@id": "https://spdx.org/licenses/CC-BY-4.0"}
    assert ent["https://spdx.org/licenses/CC-BY-4.0"]["name"] == "CC-BY-4.0"
    assert root["publisher"] == {"@id": ROR} and root["author"] == {"@id": ORCID}
    assert ent[ROR]["@type"] == "Organization" and ent[ROR]["url"] == ROR
    assert ent[ORCID]["@type"] == "Person" and ent[ORCID]["affiliation"] == {"@id": ROR}
    assert ent[ent[ROR]["contactPoint"]["@id"]]["email"] == "calibration@example.org"


def test_default_publication_and_local_ids(crate_dir: Path):
    ent = entities(crate_of(crate_dir, signer_fingerprint=FINGERPRINT, date_published="2024-05-07",
                                  publication=Publication(authors=(Party("Bo"), Party("Cy")))))
    root = ent["./"]
    assert root["license"] == {"@id": "https://spdx.org/licenses/CC-BY-4.0"}
    assert ent[root["publisher"]["@id"]]["name"] == "calibration-runs"
    assert [ent[i]["name"] for i in ids(root["author"])] == ["Bo", "Cy"]
    assert ids(root["author"]) == ["#author-1", "#author-2"]


@pytest.mark.parametrize(("make", "says"), [
    (lambda: Publication(license="CC-BY-4.0"), "--license"),
    (lambda: Publication(contact="nobody"), "--contact"),
    (lambda: Party.parse("--author", "Ada <orcid>"), "--author"),
    (lambda: Party.parse("--publisher", " "), "--publisher"),
    (lambda: Publication(publisher=Party("A", ORCID), authors=(Party("B", ORCID),)), "two names"),
])
def test_bad_publication_is_one_sentence(make, says: str):
    with pytest.raises(JobError, match=says):
        make()


def test_same_files_same_crate_whatever_the_timings(crate_dir: Path):
    a = crate_bytes_of(crate_dir, signer_fingerprint=FINGERPRINT, date_published="2024-05-07",
                    publication=PUBLICATION)
    assert a == (crate_dir / CRATE).read_bytes()
    env = json.loads((crate_dir / "environment.json").read_text())
    env["timings_s"] = {k: v + 1.0 for k, v in env["timings_s"].items()}
    env["peak_rss_mb"] = env["peak_rss_mb"] + 10.5
    (crate_dir / "environment.json").write_text(json.dumps(env))
    (crate_dir / "environment.json").write_text(json.dumps(env) + " " * 100)  # another size
    assert crate_bytes_of(crate_dir, signer_fingerprint=FINGERPRINT, date_published="2024-05-07",
                       publication=PUBLICATION) == a


def _validate(crate_dir: Path, tmp_path: Path, level: str) -> tuple[int, dict]:
    """rocrate-validator at `level`, offline: (exit status, JSON report)."""
    report = tmp_path / f"report-{level}.json"
    env = {**os.environ, "PYTHONPATH": str(OFFLINE), "ROCRATE_CONTEXT_DIR": str(OFFLINE)}
    proc = subprocess.run([_validator(), "validate", "--no-cache", "--no-paging", "-l", level,
                           "-f", "json", "-o", str(report), str(crate_dir)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    assert report.exists(), proc.stderr[-2000:]
    return proc.returncode, json.loads(report.read_text())


NO_VALIDATOR = _validator() is None or not OFFLINE.is_dir()
needs_validator = pytest.mark.skipif(NO_VALIDATOR, reason="rocrate-validator (pip install roc-validator) or "
                                                          "../shared/rocrate-offline is absent")


@pytest.mark.slow
@needs_validator
@pytest.mark.parametrize("level", ["required", "recommended"])
def test_passes_rocrate_validator(crate_dir: Path, tmp_path: Path, level: str):
    rc, result = _validate(crate_dir, tmp_path, level)
    issues = [(i.get("severity"), i.get("message"), i.get("violatingEntity")) for i in result.get("issues", [])]
    assert rc == 0 and result["passed"] is True and not issues, issues


@pytest.mark.slow
@needs_validator
def test_the_validator_run_can_fail(crate_dir: Path, tmp_path: Path):
    """The harness is live: a crate without the root's datePublished is rejected at REQUIRED, and
    one whose publisher has no registry identifier nor contact at RECOMMENDED."""
    plain = crate_of(crate_dir, signer_fingerprint=FINGERPRINT, date_published="2024-05-07")
    (crate_dir / CRATE).write_text(json.dumps(plain))
    rc, result = _validate(crate_dir, tmp_path, "recommended")
    assert rc != 0 and result["passed"] is False
    assert any("contactPoint" in (i.get("message") or "") for i in result["issues"])
    for e in plain["@graph"]:
        if e["@id"] == "./":
            del e["datePublished"]
    (crate_dir / CRATE).write_text(json.dumps(plain))
    rc, result = _validate(crate_dir, tmp_path, "required")
    assert rc != 0 and result["passed"] is False
    assert any("datePublished" in (i.get("message") or "") for i in result["issues"])
