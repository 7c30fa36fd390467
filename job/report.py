"""data/report.md for the payload in a data directory: the job's side of bundle.views.report.

The document is rendered by bundle/views/report.py from the parsed records, the same code the
verifier renders it with; this module reads the files. `extract_tables(markdown)` parses the
checked tables back out of a report, and `check_report` compares them with the records (the
tests' view of a report; the verifier has its own parser).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from bundle import layout
from bundle.canonical import loads_strict
from bundle.layout import data_name
from bundle.views.report import FIGURE_FILES, JSON_FILES, Tables, cell, change, expected_tables
from bundle.views.report import report_markdown as render_report

__all__ = ["REPORT", "Tables", "cell", "change", "check_report", "expected_tables", "extract_tables",
           "load_docs", "report_markdown", "write_report"]

REPORT = data_name(layout.REPORT_MD)
"""The report's name inside data/."""
OPTIONAL = frozenset(layout.PROTOCOL_SECTION_PAYLOAD.values())
MARKER = re.compile(r"^<!-- table: ([a-z0-9-]+) -->$")


def _split_row(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def extract_tables(markdown: str) -> Tables:
    """Every machine-checkable table of a report: {table: {row: {column: cell}}}.

    A table is the line `<!-- table: NAME -->`, a header row, a separator row, then rows until
    the first line that does not start with `|`. Raises ValueError on a malformed table."""
    lines = markdown.split("\n")
    out: Tables = {}
    i = 0
    while i < len(lines):
        found = MARKER.match(lines[i])
        i += 1
        if not found:
            continue
        name = found.group(1)
        if name in out:
            raise ValueError(f"table {name} appears twice")
        if i + 1 >= len(lines) or not lines[i].startswith("|") or not lines[i + 1].startswith("|"):
            raise ValueError(f"table {name} has no header")
        header = _split_row(lines[i])[1:]
        i += 2
        rows: dict[str, dict[str, str]] = {}
        while i < len(lines) and lines[i].startswith("|"):
            cells = _split_row(lines[i])
            if len(cells) != len(header) + 1:
                raise ValueError(f"table {name} row {cells[0]!r} has {len(cells) - 1} cells, "
                                 f"expected {len(header)}")
            if cells[0] in rows:
                raise ValueError(f"table {name} repeats row {cells[0]!r}")
            rows[cells[0]] = dict(zip(header, cells[1:], strict=True))
            i += 1
        out[name] = rows
    return out


def check_report(markdown: str, docs: dict[str, Any]) -> list[str]:
    """Differences between the report's tables and the JSON files; empty when consistent."""
    try:
        found = extract_tables(markdown)
    except ValueError as exc:
        return [str(exc)]
    expected = expected_tables(docs)
    problems = [f"table {n} is missing" for n in expected if n not in found]
    problems += [f"table {n} is not expected" for n in found if n not in expected]
    for name in expected:
        if name not in found:
            continue
        for row, cols in expected[name].items():
            got = found[name].get(row)
            if got is None:
                problems.append(f"{name}: row {row} is missing")
            elif got != cols:
                diff = {c: (cols.get(c), got.get(c)) for c in sorted(set(cols) | set(got))
                        if cols.get(c) != got.get(c)}
                problems.append(f"{name}: row {row} differs (expected, found): {diff}")
        problems += [f"{name}: row {r} is not expected" for r in found[name] if r not in expected[name]]
    return problems


def _pool_entry_dropped(obj: dict[str, Any]) -> Any:
    """None for an entry of pools.json's per-row lists (the report reads only the pool sizes), so that a
    large split's file is summarised while it is parsed, not held as one dict per row."""
    return None if "split_key" in obj and "text_sha256" in obj else obj


def load_docs(data_dir: Path) -> dict[str, Any]:
    """The parsed JSON files of data/ (optional ones None when absent); pools.json's per-row entries
    are None (its sizes are what a report shows)."""
    docs: dict[str, Any] = {}
    for name in JSON_FILES:
        path = data_dir / data_name(name)
        if name in OPTIONAL and not path.exists():
            docs[name] = None
            continue
        shrink = _pool_entry_dropped if name == layout.POOLS_JSON else None
        docs[name] = loads_strict(path.read_bytes(), source=name, shrink=shrink)
    return docs


def report_markdown(data_dir: Path) -> str:
    """The report for the bundle whose payload is data_dir, from its files only."""
    psha = hashlib.sha256((data_dir / data_name(layout.PROTOCOL_JSON)).read_bytes()).hexdigest()
    figures = [data_name(path) for path, _ in FIGURE_FILES if (data_dir / data_name(path)).exists()]
    return render_report(load_docs(data_dir), psha, figures)


def write_report(data_dir: Path) -> bytes:
    """UTF-8 bytes of report_markdown(data_dir), for Artifacts.write_bytes(REPORT, ...)."""
    return report_markdown(data_dir).encode("utf-8")
