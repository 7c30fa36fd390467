"""The verifier installs alone: a fresh virtual environment with only verify/requirements.txt
(no torch, transformers or tokenizers) verifies a real bundle. Needs PyPI; marked slow."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.synthetic import REPO
from tests.verify.tamper import Keys, base, synthetic_bag, verify_keys  # noqa: F401

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def verifier_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp("verify-venv") / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env)
    python = env / "bin" / "python"
    result = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                             "--require-hashes", "--only-binary=:all:", "-r",
                             str(REPO / "verify" / "requirements.txt")],
                            capture_output=True, text=True, check=False, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return python


def test_requirements_exclude_the_model_stack() -> None:
    text = (REPO / "verify" / "requirements.txt").read_text().lower()
    names = [line.split("==")[0] for line in text.splitlines() if "==" in line]
    assert names and not {"torch", "transformers", "tokenizers", "safetensors"} & set(names)


def test_fresh_venv_verifies_a_real_bundle(verifier_python: Path, base: tuple[Path, Keys],  # noqa: F811
                                           tmp_path: Path) -> None:
    bag, keys = base
    from cryptography.hazmat.primitives import serialization

    pub = tmp_path / "signer.pub.pem"
    pub.write_bytes(keys.real.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    listing = subprocess.run([str(verifier_python), "-m", "pip", "list", "--format=freeze"],
                             capture_output=True, text=True, check=False)
    installed = {line.split("==")[0].lower() for line in listing.stdout.splitlines()}
    assert not {"torch", "transformers", "tokenizers"} & installed
    result = subprocess.run([str(verifier_python), "-m", "verify", str(bag), "--trusted-key",
                             str(pub)], cwd=REPO, capture_output=True, text=True, check=False, timeout=300,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "VERIFIED" in result.stdout
    assert sys.executable != str(verifier_python)
