"""`python -m job keygen | archive | cosign`: data on stdout; a BundleError is one line on stderr and
exit status 2. `python -m bundle` says which command to use now."""

from __future__ import annotations

import hashlib
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from job.cli import main
from tests.payload import seal_payload
from tests.synthetic import write_payload

ROOT = Path(__file__).resolve().parents[2]


def test_keygen_prints_fingerprint_and_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keygen", "--out", str(tmp_path / "k")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("fingerprint ") and len(out[0].split()[1]) == 64
    assert out[1] == f"private {tmp_path / 'k' / 'signing-key.pem'}"
    assert out[2] == f"public {tmp_path / 'k' / 'signing-key.pub.pem'}"


def test_errors_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keygen", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["keygen", "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: ")
    assert "already exists" in captured.err


def test_archive_prints_path_and_sha256(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag = tmp_path / "run"
    protocol_sha256 = write_payload(bag / "data", profile="formal")
    seal_payload(bag, description="cli", protocol_sha256=protocol_sha256, profile="formal")
    assert main(["archive", str(bag), "--out", str(tmp_path / "r.tgz")]) == 0
    path, digest = capsys.readouterr().out.splitlines()
    assert path == str(tmp_path / "r.tgz")
    assert digest == f"sha256 {hashlib.sha256((tmp_path / 'r.tgz').read_bytes()).hexdigest()}"
    assert main(["archive", str(tmp_path / "missing")]) == 2


def test_module_entry_point(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "job", "archive", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1


def test_python_m_bundle_names_the_command_to_use(capsys: pytest.CaptureFixture[str]) -> None:
    before = set(sys.modules)
    with pytest.raises(SystemExit) as info:
        runpy.run_module("bundle", run_name="__main__", alter_sys=False)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "python -m job keygen|archive|cosign" in err
    loaded = {m for m in set(sys.modules) - before if m.split(".")[0] in ("bundle", "job", "verify")}
    assert loaded <= {"bundle"}, f"python -m bundle imported {sorted(loaded)}"


def test_publishing_commands_import_no_torch(tmp_path: Path) -> None:
    code = ("import sys; from job.cli import main; rc = main(['keygen', '--out', sys.argv[1]]); "
            "print(rc, sorted(m for m in ('torch', 'transformers', 'ray', 'matplotlib') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "k")], check=True, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout


def test_cosign_names_a_missing_trusted_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag = tmp_path / "run"
    protocol_sha256 = write_payload(bag / "data", profile="formal")
    seal_payload(bag, description="cli", protocol_sha256=protocol_sha256, profile="formal")
    assert main(["keygen", "--out", str(tmp_path / "k")]) == 0
    capsys.readouterr()
    args = ["cosign", str(bag), "--signing-key", str(tmp_path / "k" / "signing-key.pem"),
            "--trusted-key", str(tmp_path / "missing.pub.pem")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "trusted key" in err and "does not exist" in err, err
