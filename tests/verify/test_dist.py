"""The verifier as its own distribution (`pip install ./verify`): a wheel built offline from the checkout,
installed into a fresh virtual environment with only verify/requirements.txt, whose console
script `calibration-verify` verifies a real bundle, outside the checkout, without torch. Marked
slow: it creates a venv and installs the pinned wheels (from the configured index)."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

import verify
from bundle import layout

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "goldens" / f"bundle-v{layout.FORMAT_VERSION}"
TRUSTED_KEY = REPO / "tests" / "goldens" / f"bundle-v{layout.FORMAT_VERSION}.pub.pem"


def _run(*cmd: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, check=False,
                          timeout=900, env={"PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "--no-index", str(REPO / "verify"), "-w", str(out)],
                           capture_output=True, text=True, check=False, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    (path,) = out.glob("*.whl")
    return path


def test_the_wheel_holds_the_verifier_its_definitions_and_schemas_only(wheel: Path) -> None:
    assert wheel.name == f"calibration_verify-{verify.__version__}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"verify/__main__.py", "verify/report.schema.json", "bundle/layout.py", "bundle/schemas.py",
            "schemas/predicate.schema.json"} <= names
    assert not any(n.startswith("job/") for n in names)
    shipped = {p.relative_to(REPO).as_posix() for package in ("verify", "bundle")
               for p in (REPO / package).rglob("*.py") if "__pycache__" not in p.parts}
    assert {n for n in names if n.endswith(".py")} == shipped - {"verify/_wheel_backend.py"}
    assert sorted(n for n in names if n.startswith("schemas/")) == sorted(
        f"schemas/{p.name}" for pattern in ("*.schema.json", "*.digests.json")
        for p in (REPO / "schemas").glob(pattern))
    assert "verify/_wheel_backend.py" not in names


@pytest.mark.slow
def test_fresh_venv_runs_calibration_verify_without_torch(wheel: Path, tmp_path: Path) -> None:
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env)
    python, pip = env / "bin" / "python", [env / "bin" / "python", "-m", "pip", "install", "-q",
                                           "--disable-pip-version-check"]
    deps = _run(*pip, "--require-hashes", "--only-binary=:all:", "-r", REPO / "verify" / "requirements.txt",
                cwd=tmp_path)
    assert deps.returncode == 0, deps.stdout[-3000:] + deps.stderr[-3000:]
    installed = _run(*pip, "--no-deps", "--no-index", wheel, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-3000:]

    result = _run(env / "bin" / "calibration-verify", GOLDEN, "--trusted-key", TRUSTED_KEY, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "VERIFIED" in result.stdout
    probe = _run(python, "-c", "import sys, verify.__main__, verify.checks, bundle.schemas; "
                 "print(verify.__file__); print('torch' in sys.modules)", cwd=tmp_path)
    where, torch_loaded = probe.stdout.split()
    assert where.startswith(str(env)) and torch_loaded == "False", probe.stderr
    assert _run(python, "-c", "import job", cwd=tmp_path).returncode != 0  # the job is not shipped
