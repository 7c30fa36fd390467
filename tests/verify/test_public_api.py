"""The verifier's public API (verify/__init__.py's `__all__`): what it promises, and that the job
reads bundles through it alone."""

from __future__ import annotations

import ast
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

import verify
from bundle import layout
from verify import EXIT_FAILED, EXIT_UNTRUSTED, VERDICTS, Outcome, Trust, verify_path

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "goldens" / "bundle-v2"

INTERNAL_USE = {
    "job.predictions": "reads a predictions file through the format's one reader (verify.predictions)",
}
"""job/ modules that use a verifier internal on purpose, and why; every other job/ module that
imports the verifier imports only its public names."""


@pytest.fixture(scope="module")
def golden() -> Outcome:
    return verify_path(GOLDEN, Trust())


def test_every_public_name_exists_and_every_public_module_declares_all() -> None:
    assert all(hasattr(verify, name) for name in verify.__all__)
    for module in ("api", "context", "parsed", "release", "checks"):
        source = (REPO / "verify" / f"{module}.py").read_text(encoding="utf-8")
        assert any(isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets)
                   for node in ast.parse(source).body), f"verify/{module}.py declares no __all__"


def test_the_outcome_holds_the_verdict_and_what_the_checks_read(golden: Outcome) -> None:
    assert golden.exit_code == EXIT_UNTRUSTED and golden.verdict == VERDICTS[EXIT_UNTRUSTED]
    assert [c.id for c in golden.checks if c.status != "pass"] == [verify.SIGNER_CHECK]
    json_files = {p for p in layout.PAYLOAD_SCHEMAS if (GOLDEN / p).is_file()}
    assert set(golden.documents) == json_files | {"predicate"}
    assert golden.documents["predicate"] == json.loads(golden.envelope.payload)["predicate"]  # type: ignore[union-attr]
    assert golden.documents[layout.METRICS_JSON]["beta"] > 0
    assert set(golden.pools) == {"calibration", "audit"}
    assert golden.pools["audit"].z32.shape[0] == golden.documents[layout.METRICS_JSON]["pools"]["audit"]["raw"]["n"]
    assert golden.envelope is not None
    assert golden.digests["statement"] == hashlib.sha256(golden.envelope.payload).hexdigest()
    on_disk = {p.relative_to(GOLDEN).as_posix(): p.read_bytes() for p in GOLDEN.rglob("*") if p.is_file()}
    assert dict(golden.files) == on_disk
    assert golden.sha256(layout.PROTOCOL_JSON) == hashlib.sha256(on_disk[layout.PROTOCOL_JSON]).hexdigest()
    assert golden.read_failure is None


def test_a_tampered_bundle_fails_and_says_so(tmp_path: Path) -> None:
    import shutil

    bag = tmp_path / "bag"
    shutil.copytree(GOLDEN, bag)
    metrics = bag / layout.METRICS_JSON
    metrics.write_bytes(metrics.read_bytes().replace(b'"beta":', b'"beta": '))
    outcome = verify_path(bag)
    assert outcome.exit_code == EXIT_FAILED and outcome.verdict == "failed"
    assert any(c.id == "bag.manifest-sha256" and c.status == "fail" for c in outcome.checks)


def test_an_archive_that_is_no_safe_bag_names_why(tmp_path: Path) -> None:
    archive = tmp_path / "bundle.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        member = tarfile.TarInfo("../outside.txt")
        member.size = 2
        tar.addfile(member, io.BytesIO(b"hi"))
    outcome = verify_path(archive)
    assert outcome.verdict == "failed" and outcome.read_failure is not None
    assert outcome.files == {} and outcome.documents == {}


def test_the_job_reads_bundles_through_the_public_api_only() -> None:
    offenders = []
    for path in sorted((REPO / "job").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "verify":
                public = node.module == "verify" and all(a.name in verify.__all__ for a in node.names)
                if not public and module not in INTERNAL_USE:
                    offenders.append(f"{module}: from {node.module} import {', '.join(a.name for a in node.names)}")
            elif isinstance(node, ast.Import) and any(a.name.startswith("verify.") for a in node.names):
                offenders.append(f"{module}: import {', '.join(a.name for a in node.names)}")
    assert offenders == [], offenders
