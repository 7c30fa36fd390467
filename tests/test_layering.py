"""The layering holds by structure, not by luck: no package of the project (job/, bundle/,
verify/, each with every subpackage) has an import cycle, counting the imports inside functions
and under TYPE_CHECKING, and none imports what its layer forbids. A module imports another of the
project at its top; an import inside a function is there only to defer an optional heavy
dependency, and says so in a comment on the line above it or on the import itself.

Every test walks the tree, so a module or subpackage added later is covered without a list."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("job", "bundle", "verify")
"""The project's packages: every module under them, at any depth, is in the graph."""

FORBIDDEN = {
    "bundle": {"job", "verify", "torch", "transformers", "tokenizers", "ray"},
    "verify": {"job", "torch", "transformers", "tokenizers", "ray"},
    "job": set(),
}
"""Top-level names each package must never import, at any depth of its tree (bundle/FORMAT.md
and docs/GUIDE.md, "Import rules"): the format imports neither the writer's job nor the verifier,
and the verifier never imports the job or a machine-learning stack."""

DEFERRED_COMMENT = "defer"
"""The word the comment beside a function-level import uses to say why it is there."""


@dataclass(frozen=True)
class Import:
    """One import statement: the module it names (for `from a import b`, `a.b` when that is a
    module of the project, else `a`), its line, and whether it runs when its module is imported."""

    target: str
    line: int
    top: bool  # at module level (TYPE_CHECKING blocks included), not inside a function or class body


def modules(root: Path = REPO) -> dict[str, Path]:
    """Dotted module name -> file, for every module of every package, subpackages included."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(path: Path, known: set[str]) -> Iterator[Import]:
    """Every import of the module at `path`, at any depth: in functions, methods, and TYPE_CHECKING blocks."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    return imports_of(path.read_text(encoding="utf-8"), package, known)


def imports_of(source: str, package: str, known: set[str]) -> Iterator[Import]:
    """Every import of a module of `package` whose text is `source`; `known`: the project's modules."""
    tree = ast.parse(source)
    nested = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
              for n in ast.walk(f)}
    for node in ast.walk(tree):
        top = id(node) not in nested
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, node.lineno, top)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import, resolved against the module's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield Import(sub if sub in known else base, node.lineno, top)


def graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, wherever in it the import is."""
    known = modules()
    return {name: {i.target for i in imports(path, set(known)) if i.target in known and i.target != name}
            for name, path in known.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None when the graph has none."""
    state: dict[str, str] = {}
    trail: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = "open"
        trail.append(name)
        for dep in sorted(edges.get(name, ())):
            if state.get(dep) == "open":
                return [*trail[trail.index(dep):], dep]
            if dep not in state and (cycle := visit(dep)) is not None:
                return cycle
        trail.pop()
        state[name] = "done"
        return None

    for name in sorted(edges):
        if name not in state and (cycle := visit(name)) is not None:
            return cycle
    return None


def test_find_cycle_finds_a_cycle_and_only_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) is None


def test_imports_sees_function_level_type_checking_and_relative_imports() -> None:
    source = ("from typing import TYPE_CHECKING\nimport os\nif TYPE_CHECKING:\n    from job.sharded import X\n"
              "def f():\n    from job import pipeline\nfrom . import engines\n")
    found = [(i.target, i.top) for i in imports_of(source, "job", {"job.pipeline", "job.engines", "job.sharded"})]
    assert sorted(found) == [("job.engines", True), ("job.pipeline", False), ("job.sharded", True),
                             ("os", True), ("typing", True)]


def test_every_package_is_walked_with_its_subpackages() -> None:
    found = modules()
    assert "bundle.views.report" in found and "verify.api" in found and "job.pipeline" in found
    for package in PACKAGES:
        on_disk = {p for p in (REPO / package).rglob("*.py")}
        assert on_disk == {p for n, p in found.items() if n.split(".")[0] == package}


def test_no_package_has_an_import_cycle() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_import_nothing_their_layer_forbids(package: str) -> None:
    known = modules()
    offenders = [f"{path.relative_to(REPO)}:{i.line}: {i.target}"
                 for name, path in known.items() if name.split(".")[0] == package
                 for i in imports(path, set(known)) if i.target.split(".")[0] in FORBIDDEN[package]]
    assert offenders == [], offenders


def _says_deferred(lines: list[str], line: int) -> bool:
    """Whether the import on `line` (1-based), or the run of imports and comments it ends, carries
    a comment saying what it defers."""
    n = line
    while n >= 1:
        text = lines[n - 1].strip()
        if "#" in text and DEFERRED_COMMENT in text.split("#", 1)[1].lower():
            return True
        if not text.startswith(("import ", "from ", "#")):
            return False
        n -= 1
    return False


def test_function_level_imports_only_defer_a_heavy_dependency_and_say_so() -> None:
    """Every import inside a function carries a comment saying what it defers, on its line or the
    line above: a heavy or optional dependency (Ray, torch, transformers, matplotlib), never a way
    around an import cycle (the test above would see the cycle)."""
    known = modules()
    silent = []
    for path in known.values():
        lines = path.read_text(encoding="utf-8").splitlines()
        for i in imports(path, set(known)):
            if i.top:
                continue
            where = f"{path.relative_to(REPO)}:{i.line}: {i.target}"
            if not _says_deferred(lines, i.line):
                silent.append(where)
    silent = sorted(set(silent))
    assert silent == [], f"function-level imports without a comment saying what they defer: {silent}"
