"""The docs say what the tree holds: every repository path they name exists, and every size limit
bundle/FORMAT.md quotes is the verifier's constant."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bundle import limits

REPO = Path(__file__).resolve().parent.parent
DOCS = sorted([REPO / "README.md", REPO / "bundle" / "FORMAT.md", REPO / "verify" / "README.md",
               *(REPO / "docs").glob("*.md"), *(REPO / "examples").glob("*.md")])
SOURCES = sorted(p for top in ("job", "bundle", "verify", "scripts", "tests") for p in (REPO / top).rglob("*.py"))
TOP = r"(?:job|bundle|verify|schemas|tests|scripts|docs|examples|\.ci)"
PATH = re.compile(rf"(?<![\w./-]){TOP}/[\w./-]*[\w/]")
"""A repository path as prose writes it: job/run.py, tests/verify/, schemas/x.schema.json."""
PLACEHOLDER = re.compile(r"[<>*{}]|NAME|\bN\b|-v<|\.\.\.")


def _named_paths(path: Path, text: str) -> list[tuple[str, str]]:
    """(where, repository path) for every path-shaped word; in code, only in comments, strings and
    docstrings' test references (tests/... paths), which are what goes stale."""
    found = []
    written = set(re.findall(r"(?:--out|# writes) (\S+)", text))  # files the doc's own commands write
    for lineno, line in enumerate(text.splitlines(), 1):
        for match in PATH.finditer(line):
            word = match.group(0).rstrip(".")
            if path.suffix == ".py" and not word.startswith("tests/"):
                continue
            tail = line[match.end():match.end() + 2]
            if PLACEHOLDER.search(word) or (tail and tail[0] in "<*{") or tail == "-<" or word in written:
                continue
            found.append((f"{path.relative_to(REPO)}:{lineno}", word))
    return found


@pytest.mark.parametrize("doc", DOCS + SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_named_path_exists(doc: Path) -> None:
    missing = [f"{where}: {word}" for where, word in _named_paths(doc, doc.read_text(encoding="utf-8"))
               if not (REPO / word).exists()]
    assert not missing, "paths named in the docs that the tree does not hold:\n" + "\n".join(missing)


MIB = 1024 * 1024
LIMIT_ROWS = {
    "entries in a bag folder, members in an archive": f"{limits.MAX_ENTRIES:,}",
    "a name / a relative path": f"{limits.MAX_NAME_BYTES:,} / {limits.MAX_PATH_BYTES:,} bytes",
    "any other file": f"{limits.SMALL_FILE_BYTES // MIB} MiB",
    "any one file, whatever the protocol / all files":
        f"{limits.MAX_FILE_BYTES // MIB} MiB / {limits.MAX_TOTAL_BYTES // MIB} MiB",
    "`data/pools.json`": f"{limits.SLACK_BYTES // 1024} KiB + {limits.POOLS_BYTES_PER_ROW} bytes x rows",
    "`data/trajectory.json`":
        f"{limits.SLACK_BYTES // 1024} KiB + {limits.TRAJECTORY_BYTES_PER_STEP} bytes x steps; steps <= the protocol's",
}


def _limits_table() -> dict[str, str]:
    text = (REPO / "bundle" / "FORMAT.md").read_text(encoding="utf-8")
    section = text[text.index("\n## Limits"):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    return {cells[0].strip(): cells[1].strip() for line in section.splitlines()
            if line.startswith("| ") and len(cells := line.strip().strip("|").split("|")) == 2}


def test_the_limits_table_quotes_the_verifiers_constants() -> None:
    table = _limits_table()
    assert {row: table.get(row) for row in LIMIT_ROWS} == LIMIT_ROWS
    protocol_rows = table["protocol: `resources.dataset.rows`, each pool size"]
    assert protocol_rows == f"1 .. {limits.MAX_ROWS:,}"
    assert table["protocol: classes (`len(labels)`)"] == f"2 .. {limits.MAX_CLASSES:,}"
    assert table["protocol: `fit.steps`"].startswith(f"1 .. {limits.MAX_STEPS:,} ")
    assert table["protocol: `bootstrap.resamples`"] == (
        f"1 .. {limits.MAX_RESAMPLES:,}, and resamples x pool rows <= {limits.MAX_RESAMPLE_CELLS:,}")
    assert table["protocol: stability sizes"] == f"at most {limits.MAX_STABILITY_SIZES}"
    assert table["`data/protocol.json` (and `--protocol`, `--trusted-key` files)"].startswith(
        f"{limits.MAX_PROTOCOL_BYTES // MIB} MiB")


def test_the_verifier_readme_quotes_the_same_caps() -> None:
    text = " ".join((REPO / "verify" / "README.md").read_text(encoding="utf-8").split())
    assert (f"at most {limits.MAX_ENTRIES:,} members, {limits.MAX_FILE_BYTES // MIB} MiB a file and "
            f"{limits.MAX_TOTAL_BYTES // MIB} MiB in all") in text


MAPPED = ("job", "bundle", "verify")
"""The packages the guide's layout map lists module by module, subpackages included."""


def _layout_map() -> dict[str, list[str]]:
    """Package folder ("job/publishing") -> the modules the guide's layout map lists under it."""
    text = (REPO / "docs" / "GUIDE.md").read_text(encoding="utf-8")
    block = text.split("Three parts, and imports flow one way", 1)[1].split("```", 2)[1]
    listed: dict[str, list[str]] = {}
    package = None
    for line in block.splitlines():
        head = re.match(r"^([a-z_/]+)/\s", line)
        if head:
            package = head.group(1) if head.group(1).split("/")[0] in MAPPED else None
            if package is not None:
                listed[package] = []
        elif package is not None and line.startswith("  ") and not line.startswith("   "):
            left = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            listed[package] += [name.strip() for name in left.split(",") if name.strip()]
    return listed


def _packages() -> dict[str, set[str]]:
    """Package folder -> the module names it holds (every .py but __init__)."""
    found: dict[str, set[str]] = {}
    for top in MAPPED:
        for init in (REPO / top).rglob("__init__.py"):
            folder = init.parent
            found[folder.relative_to(REPO).as_posix()] = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    return found


def test_the_layout_map_names_every_module_and_only_modules_that_exist() -> None:
    listed, actual = _layout_map(), _packages()
    assert sorted(listed) == sorted(actual), "packages in the map and in the tree differ"
    for package, modules in actual.items():
        names = listed[package]
        twice = sorted({n for n in names if names.count(n) > 1})
        assert twice == [], f"{package}/: listed twice: {twice}"
        assert sorted(set(names) - modules) == [], f"{package}/ lists modules that do not exist"
        assert sorted(modules - set(names)) == [], f"{package}/ holds modules the map omits"


def test_the_layout_map_is_read_package_by_package() -> None:
    listed = _layout_map()
    assert "seal" in listed["job/publishing"] and "sweep_comparison" in listed["bundle/views"]
    assert "limits" in listed["bundle"] and "limits" not in listed["verify"]
