"""The report of a payload written file by file (not through the job's stages), rendered as the
job renders it (bundle.views.report) from the payload's own files: for the tests and the benchmarks
that build payloads by hand. The job itself renders from the records it holds in memory."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from bundle import layout
from bundle.canonical import loads_strict
from bundle.layout import data_name
from bundle.views.report import FIGURE_FILES, JSON_FILES
from bundle.views.report import report_markdown as render_report

__all__ = ["REPORT", "load_docs", "report_markdown"]

REPORT = data_name(layout.REPORT_MD)
"""The report's name inside data/."""
OPTIONAL = frozenset(layout.PROTOCOL_SECTION_PAYLOAD.values())


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

