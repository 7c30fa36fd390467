"""The README's "Your own classifier" commands, as printed there, in a folder of the user's own
(`./my-model`, `./data/validation.parquet`), then a sweep over the lock they wrote: every command
accepts every lock `job lock` writes, including one that states no repository or revision."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.anymodel import make_hf_model
from tests.job.test_own_classifier import MODEL_LABELS, write_split

README = Path(__file__).resolve().parents[2] / "README.md"
ROWS = 600  # the README's init takes the default pools, explore:256,calibration:256,audit:rest


def readme_commands(section: str) -> list[list[str]]:
    """The commands of the first ```bash block under `section`, continuation lines joined."""
    text = README.read_text(encoding="utf-8").split(section, 1)[1]
    block = re.search(r"```bash\n(.*?)```", text, re.DOTALL)
    assert block is not None, f"README.md has no bash block under {section!r}"
    joined = block.group(1).replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.strip()]


def _entry(module: str) -> Callable[[list[str]], int]:
    if module == "job":
        from job.cli import main as job_main
        return job_main
    from verify.__main__ import main as verify_main
    return verify_main


@pytest.mark.integration
def test_the_readme_own_classifier_commands_run_as_printed_then_a_sweep_over_their_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    make_hf_model(tmp_path / "my-model", "bert", MODEL_LABELS, seed=3)
    write_split(tmp_path / "data" / "validation.parquet", tmp_path / "my-model", rows=ROWS)
    # The guide's advice for files that never were in a repository: the weights' sha256, 40 digits.
    commit = hashlib.sha256((tmp_path / "my-model" / "model.safetensors").read_bytes()).hexdigest()[:40]
    monkeypatch.chdir(tmp_path)
    commands = readme_commands("## Your own classifier")
    assert commands[0][:3] == ["python", "-m", "job"] and len(commands) == 6
    for words in commands:
        assert words[:2] == ["python", "-m"], words
        argv = [commit if w == "COMMIT" else w for w in words[3:]]
        assert _entry(words[2])(argv) == 0, (words, capsys.readouterr().err)
    lock = json.loads((tmp_path / "lock.json").read_text())
    assert "revision" not in lock["model"] and "repo_id" not in lock["model"]  # as `job lock` writes it

    from job.sweep_spec import load_sweep
    from tests.sweeps import build_sweep_dir

    (tmp_path / "mine.sweep.json").write_text(json.dumps({
        "name": "mine", "protocol": "protocol.json", "lock": "lock.json", "prefixes": ["again:"],
        "pool_sizes": [{"explore": 0, "calibration": 256, "audit": ROWS - 256}], "member": {"threads": 1}}))
    sweep = load_sweep(tmp_path / "mine.sweep.json")
    (member,) = sweep.members
    assert member.name == "again-explore0-calibration256-audit344"
    assert member.pins["model"]["repo_id"] == "my-org/my-model" and member.pins["model"]["revision"] == commit
    keys = tmp_path / "keys"
    rows = build_sweep_dir(tmp_path / "mine.sweep.json", tmp_path / "out" / "sweep", keys / "signing-key.pem")
    assert [r["status"] for r in rows] == ["done"]
    from verify.__main__ import main as verify_main
    assert verify_main([str(tmp_path / "out" / "sweep"), "--trusted-key", str(keys / "signing-key.pub.pem")]) == 0
