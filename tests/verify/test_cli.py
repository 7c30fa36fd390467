"""The verifier's command line: exit codes, the JSON report and its schema, archives (and unsafe
ones), `make verify`, and that importing verify pulls in neither torch nor job/."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import jsonschema
import pytest
from cryptography.hazmat.primitives import serialization

from bundle.keys import fingerprint
from job.publishing.archive import archive
from tests.synthetic import REPO
from tests.verify.tamper import Keys, base, copy_bag, synthetic_bag, verify_keys  # noqa: F401
from verify import extract
from verify.__main__ import main

REPORT_SCHEMA = json.loads((REPO / "verify" / "report.schema.json").read_text())


def pub_pem(tmp_path: Path, keys: Keys, which: str = "real") -> Path:
    key = (keys.real if which == "real" else keys.other).public_key()
    path = tmp_path / f"{which}.pub.pem"
    path.write_bytes(key.public_bytes(serialization.Encoding.PEM,
                                      serialization.PublicFormat.SubjectPublicKeyInfo))
    return path


def run_cli(args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    report = tmp_path / "report.json"
    code = main([*args, "--json", str(report)])
    out = capsys.readouterr().out
    doc = json.loads(report.read_text())
    jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(doc)
    assert doc["exit_code"] == code
    return code, doc, out


def test_import_pulls_in_no_torch_no_job_and_no_matplotlib() -> None:
    """Nor matplotlib: it is imported only to draw, so a usage error or an early rejection is quick."""
    code = ("import sys, verify, verify.__main__, verify.api, verify.checks, verify.verdict_output; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'transformers', 'tokenizers', 'job', 'safetensors', 'huggingface_hub', 'matplotlib')); "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_verify_sources_never_import_job_or_torch() -> None:
    for path in (REPO / "verify").glob("*.py"):
        text = path.read_text()
        for name in ("job", "torch", "transformers", "tokenizers"):
            assert f"import {name}" not in text and f"from {name}" not in text, (path, name)


def test_exit_codes_and_report(base: tuple[Path, Keys], tmp_path: Path,  # noqa: F811
                               capsys: pytest.CaptureFixture[str]) -> None:
    bag, keys = base
    code, doc, out = run_cli([str(bag), "--trusted-key", str(pub_pem(tmp_path, keys))], tmp_path,
                             capsys)
    assert code == 0 and doc["verdict"] == "verified", out
    assert "VERIFIED" in out and "fit.refit" in out
    assert doc["counts"]["fail"] == 0 and len(doc["checks"]) >= 40

    code, doc, out = run_cli([str(bag)], tmp_path, capsys)
    assert code == 3 and doc["verdict"] == "intact-signer-unknown"
    assert "INTEGRITY HOLDS, SIGNER NOT ESTABLISHED" in out

    code, doc, out = run_cli([str(bag), "--trusted-key", str(pub_pem(tmp_path, keys, "other"))],
                             tmp_path, capsys)
    assert code == 1 and doc["verdict"] == "failed"
    failed = [c["id"] for c in doc["checks"] if c["status"] == "fail"]
    assert failed == ["signature.signer-trusted"]

    fp = fingerprint(keys.real.public_key())
    code, doc, _ = run_cli([str(bag), "--trusted-fingerprint", fp.upper()], tmp_path, capsys)
    assert code == 0 and doc["trusted"] == {"kind": "fingerprint",
                                           "source": "--trusted-fingerprint", "fingerprint": fp}
    code, _, _ = run_cli([str(bag), "--trusted-fingerprint", "00" * 32], tmp_path, capsys)
    assert code == 1


def test_protocol_option(synthetic_bag: Path, tmp_path: Path,  # noqa: F811
                         capsys: pytest.CaptureFixture[str]) -> None:
    own = tmp_path / "protocol.json"
    own.write_bytes((synthetic_bag / "data" / "protocol.json").read_bytes())
    code, doc, _ = run_cli([str(synthetic_bag), "--protocol", str(own)], tmp_path, capsys)
    assert code == 3 and "protocol.pre-registered" in [c["id"] for c in doc["checks"]]
    code, doc, _ = run_cli([str(synthetic_bag), "--protocol", str(REPO / "provenance.json")],
                           tmp_path, capsys)
    assert code == 1  # the synthetic bundle uses smaller pools than the repository's protocol


@pytest.mark.parametrize("args,words", [
    (["/nonexistent/bundle"], "does not exist"),
    (["BAG", "--trusted-fingerprint", "xyz"], "64 hex digits"),
    (["BAG", "--trusted-key", "/nonexistent.pem"], "does not exist"),
    (["BAG", "--trusted-key", "BAG/data/pools.json"], "PEM"),
    (["BAG", "--trusted-key", "K", "--trusted-fingerprint", "00"], "not allowed with"),
    ([], "required"),
])
def test_usage_errors_exit_2(args: list[str], words: str, synthetic_bag: Path,  # noqa: F811
                             capsys: pytest.CaptureFixture[str]) -> None:
    args = [a.replace("BAG", str(synthetic_bag)) for a in args]
    try:
        code = main(args)
    except SystemExit as exc:  # argparse errors exit from inside main
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    assert words in capsys.readouterr().err


def test_archive_verifies(base: tuple[Path, Keys], tmp_path: Path,  # noqa: F811
                          capsys: pytest.CaptureFixture[str]) -> None:
    bag, keys = base
    tar = archive(copy_bag(bag, tmp_path / "run"), tmp_path / "run.tar.gz")
    code, doc, _ = run_cli([str(tar), "--trusted-key", str(pub_pem(tmp_path, keys))], tmp_path,
                           capsys)
    assert code == 0 and doc["input"] == "archive"
    assert doc["checks"][0]["id"] == "archive.safe" and doc["checks"][0]["status"] == "pass"


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def _file(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


def _link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


@pytest.mark.parametrize("members,words", [
    ([(_file("/etc/evil"), b"x")], "absolute path"),
    ([(_file("run/../../evil"), b"x")], "'..'"),
    ([(_link("run/data/x", "/etc/passwd", tarfile.SYMTYPE), None)], "symbolic link"),
    ([(_file("run/a"), b"x"), (_link("run/b", "run/a", tarfile.LNKTYPE), None)], "hard link"),
    ([(_file("run/a"), b"x"), (_file("run/a"), b"y")], "appears twice"),
    ([(_link("run/dev", "", tarfile.CHRTYPE), None)], "device"),
    ([(_file("run/a"), b"x"), (_file("run/a/b"), b"y")], "not a folder"),
])
def test_unsafe_archives_rejected(members: list, words: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    tar = _tar(tmp_path / "evil.tar.gz", members)
    code, doc, _ = run_cli([str(tar)], tmp_path, capsys)
    assert code == 1
    first = doc["checks"][0]
    assert first["id"] == "archive.safe" and first["status"] == "fail" and words in first["detail"]
    assert not (tmp_path / "evil").exists() and not Path("/etc/evil").exists()


def test_archive_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(extract, "MAX_MEMBERS", 3)
    tar = _tar(tmp_path / "many.tar.gz", [(_file(f"run/{i}"), b"x") for i in range(5)])
    code, doc, _ = run_cli([str(tar)], tmp_path, capsys)
    assert code == 1 and "more than 3 members" in doc["checks"][0]["detail"]
    monkeypatch.setattr(extract, "MAX_TOTAL_BYTES", 10)
    tar = _tar(tmp_path / "big.tar.gz", [(_file("run/a"), b"x" * 8), (_file("run/b"), b"y" * 8)])
    code, doc, _ = run_cli([str(tar)], tmp_path, capsys)
    assert code == 1 and "expands to more than" in doc["checks"][0]["detail"]


def test_corrupt_archive_is_unreadable(synthetic_bag: Path, tmp_path: Path,  # noqa: F811
                                       capsys: pytest.CaptureFixture[str]) -> None:
    tar = archive(copy_bag(synthetic_bag, tmp_path / "run"), tmp_path / "run.tar.gz")
    data = tar.read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(data[: len(data) // 2])
    assert main([str(tmp_path / "cut.tar.gz")]) == 2
    assert "corrupt" in capsys.readouterr().err or True
    (tmp_path / "junk.tar.gz").write_bytes(b"not an archive")
    assert main([str(tmp_path / "junk.tar.gz")]) == 2


def test_make_verify(synthetic_bag: Path, verify_keys: Keys, tmp_path: Path) -> None:  # noqa: F811
    key = pub_pem(tmp_path, verify_keys)
    result = subprocess.run(["make", "-s", "verify", f"BUNDLE={synthetic_bag}",
                             f"TRUSTED_KEY={key}", f"PY={sys.executable}"], cwd=REPO,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    assert "VERIFIED" in result.stdout
    result = subprocess.run(["make", "-s", "verify", f"BUNDLE={synthetic_bag}",
                             f"PY={sys.executable}"], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode != 0 and "SIGNER NOT ESTABLISHED" in result.stdout


def test_module_entry_point(synthetic_bag: Path) -> None:  # noqa: F811
    result = subprocess.run([sys.executable, "-m", "verify", str(synthetic_bag)], cwd=REPO,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 3, result.stderr
    result = subprocess.run([sys.executable, "-m", "verify", "--help"], cwd=REPO,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "exit codes" in result.stdout


def test_requirements_match_the_lock() -> None:
    """verify/requirements.txt pins exactly what requirements.lock pins (versions and hashes)."""
    import re

    def blocks(text: str) -> dict[str, str]:
        out = {}
        for block in re.split(r"\n(?=[A-Za-z0-9])", text):
            head = block.split("\n", 1)[0]
            if "==" in head:
                name = head.split("==")[0].strip().lower()
                out[name] = " ".join(re.findall(r"==\S+|--hash=\S+", block))
        return out

    ours = blocks((REPO / "verify" / "requirements.txt").read_text())
    lock = blocks((REPO / "requirements.lock").read_text())
    assert {"numpy", "pyarrow", "jsonschema", "cryptography"} <= set(ours)
    for name, pins in ours.items():
        assert lock.get(name) == pins, f"{name}: verify/requirements.txt {pins} vs lock {lock.get(name)}"
