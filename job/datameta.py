"""The class names a dataset states about itself, read from its own files, never from a lock.

Three places, in this order, each as the `datasets` library writes it:

1. the `huggingface` key of a Parquet file's schema metadata, a JSON document whose
   `info.features.<label column>` is `{"_type": "ClassLabel", "names": [...]}` (every Parquet file
   the hub's converter or `Dataset.to_parquet` writes carries it);
2. a `dataset_info.json` beside the data files (or in a folder above them, up to `root`), whose
   `features` (at the top, or under a config name) has the same ClassLabel entry;
3. a dataset card `README.md` there, whose YAML header's `dataset_info` lists the column's
   `class_label.names` (job.datacard.class_names).

The metadata is read with pyarrow and PyYAML, already in the lock, rather than with `datasets`
itself, whose dependency tree (pandas, fsspec, multiprocess, xxhash, ...) the run does not need."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from job.datacard import card_header, class_names
from job.errors import JobError


@dataclass(frozen=True)
class StatedLabels:
    """Class names and the file that states them."""

    names: tuple[str, ...]
    source: str


def _class_label(features: Any, column: str) -> tuple[str, ...] | None:
    entry = features.get(column) if isinstance(features, dict) else None
    if isinstance(entry, dict) and entry.get("_type") == "ClassLabel" and isinstance(entry.get("names"), list):
        return tuple(str(n) for n in entry["names"])
    return None


def parquet_class_names(path: Path, column: str) -> tuple[str, ...] | None:
    """The ClassLabel names of `column` in a Parquet file's Hugging Face schema metadata, if any."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except OSError as exc:
        raise JobError(f"Cannot read the schema of {path} ({exc}); check that it is a Parquet file.") from exc
    raw = meta.get(b"huggingface")
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    info = doc.get("info") if isinstance(doc, dict) else None
    return _class_label(info.get("features") if isinstance(info, dict) else None, column)


def _info_file_names(path: Path, column: str, config: str) -> tuple[str, ...] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    found = _class_label(doc.get("features"), column)
    if found is None and isinstance(doc.get(config), dict):
        found = _class_label(doc[config].get("features"), column)
    return found


def _card_names(path: Path, column: str, config: str) -> tuple[str, ...] | None:
    try:
        return class_names(card_header(path.read_text(encoding="utf-8")), config, column)
    except (OSError, JobError):
        return None


def _folders(files: Sequence[Path], root: Path | None) -> list[Path]:
    """The files' folders and those above them, nearest first, stopping at `root` (when given)."""
    out: list[Path] = []
    for f in files:
        folder = f.resolve().parent
        while True:
            if folder not in out:
                out.append(folder)
            if root is None or folder == root.resolve() or folder.parent == folder:
                break
            folder = folder.parent
    return out


def stated_labels(files: Sequence[Path], fmt: str, column: str, *, root: Path | None = None,
                  config: str = "default") -> StatedLabels | None:
    """The class names the data states for `column`, or None when it states none. JobError when its
    Parquet files disagree with each other."""
    if fmt == "parquet":
        found = {f: parquet_class_names(f, column) for f in files}
        named = {f: n for f, n in found.items() if n is not None}
        if len(set(named.values())) > 1:
            a, b = list(named.items())[:2]
            raise JobError(f"The data files name the classes of {column!r} differently ({a[0].name}: {list(a[1])}, "
                           f"{b[0].name}: {list(b[1])}); use files of one split of one dataset.")
        if named:
            first = next(iter(named))
            return StatedLabels(named[first], f"{first.name} (Parquet schema metadata)")
    for folder in _folders(files, root):
        for name, read in (("dataset_info.json", _info_file_names), ("README.md", _card_names)):
            candidate = folder / name
            if candidate.is_file():
                names = read(candidate, column, config)
                if names is not None:
                    return StatedLabels(names, str(candidate))
    return None
