"""bundle/ is the format core: importable without torch (its definitions without numpy too), and it
imports nothing from the rest of the project (job/, verify/, scripts/, tests/), in every module of
every subpackage."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"torch", "transformers", "job", "verify", "scripts", "tests"}


def _modules() -> dict[str, Path]:
    """Dotted name -> path of every module under bundle/, subpackages included."""
    found = {}
    for path in sorted((ROOT / "bundle").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(path: Path) -> list[str]:
    """Every absolute module a source imports, at any depth (inside functions and TYPE_CHECKING too)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_the_walk_reaches_the_subpackages() -> None:
    modules = _modules()
    assert "bundle.views.report" in modules and "bundle.limits" in modules and "bundle" in modules


def test_import_in_a_clean_interpreter_pulls_no_torch_job_or_verify() -> None:
    """The definitions import without numpy either; the views draw with numpy and matplotlib, and
    the Arrow columns (bundle.arrow_arrays) convert with numpy and pyarrow, and bundle.memo keys
    arrays by their bytes."""
    modules = [m for m in _modules() if m != "bundle.__main__"]
    numeric = {"bundle.arrow_arrays", "bundle.memo"}
    definitions = [m for m in modules if not m.startswith("bundle.views") and m not in numeric]
    views = [m for m in modules if m.startswith("bundle.views") or m in numeric]
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in definitions)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'numpy', 'job', 'verify'})\n"
        "assert not bad, ('definitions', bad)\n"
        + "".join(f"import {m}\n" for m in views)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'transformers', 'job', 'verify'})\n"
        "assert not bad, ('views', bad)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_no_module_imports_the_rest_of_the_project() -> None:
    offenders = [f"{path.relative_to(ROOT)} imports {name}" for path in _modules().values()
                 for name in _imported(path) if name.split(".")[0] in FORBIDDEN]
    assert offenders == [], offenders


def test_the_scan_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from job.publishing.seal import seal\n    return seal\n")
    assert _imported(planted) == ["job.publishing.seal"]
