"""bundle/ is importable without torch and never reaches into job/ or verify/."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (ROOT / "bundle").glob("*.py"))


def test_import_in_a_clean_interpreter_pulls_no_torch_job_or_verify() -> None:
    code = (
        "import sys\n"
        + "".join(f"import bundle.{m}\n" for m in MODULES if m != "__main__")
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'torch', 'transformers', 'numpy', 'job', 'verify'})\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_no_forbidden_imports_in_source() -> None:
    for path in (ROOT / "bundle").glob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in {"torch", "transformers", "job", "verify"}, (
                    f"{path.name} imports {name}"
                )
