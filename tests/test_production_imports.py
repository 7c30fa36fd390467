"""Production code stands without the test suite: nothing in job/, bundle/, verify/ or scripts/
imports `tests`, so a checkout or an image without tests/ runs and benchmarks as it is."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PRODUCTION = ("job", "bundle", "verify", "scripts")


def imported_modules(source: str) -> list[str]:
    """Every absolute module name a Python source imports, at any depth (inside functions too)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_imported_modules_sees_imports_inside_functions() -> None:
    source = "import os\ndef f():\n    from tests.synthetic import write_payload\n"
    assert imported_modules(source) == ["os", "tests.synthetic"]


@pytest.mark.parametrize("folder", PRODUCTION)
def test_production_code_does_not_import_the_test_suite(folder: str) -> None:
    paths = sorted((REPO / folder).rglob("*.py"))
    assert paths, f"no Python files under {folder}/"
    offenders = [f"{p.relative_to(REPO)}: {name}" for p in paths
                 for name in imported_modules(p.read_text(encoding="utf-8"))
                 if name.split(".")[0] == "tests"]
    assert offenders == [], offenders
