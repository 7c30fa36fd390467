"""The job is an installed package (`make install`): its console commands work from a folder of
the user's own, far from this repository, with the job's schemas and protocol found beside it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _command(name: str) -> Path:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert name in scripts
    entry = {e.name: e.value for e in metadata.entry_points(group="console_scripts")}
    assert entry.get(name) == scripts[name], f"{name} is not installed; run make install"
    return Path(sys.executable).parent / name


def test_the_console_commands_work_from_the_users_own_folder(tmp_path: Path) -> None:
    job = _command("calibration-job")
    keys = subprocess.run([str(job), "keygen", "--out", "keys"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)
    assert keys.returncode == 0 and (tmp_path / "keys" / "signing-key.pub.pem").is_file(), keys.stderr
    (tmp_path / "lock.json").write_text("{}")
    run = subprocess.run([str(job), "smoke", "--resources", "lock.json"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, check=False)
    # the job read its own default protocol and the lock schema from its installed package
    assert run.returncode == 2 and run.stderr.startswith("error: ") and "Traceback" not in run.stderr, run.stderr
    assert "lock.json" in run.stderr and len(run.stderr.strip().splitlines()) == 1
