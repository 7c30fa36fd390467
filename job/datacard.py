"""A dataset split's data files and label names, read from the dataset card at a pinned revision.

The `datasets` library answers "which files make up config/split, and what are the label names" by
reading the dataset card's YAML header: `configs` (each `config_name` with `data_files`, a split
and a path or glob per entry) and `dataset_info` (`features`, where a `class_label` lists its
`names`). The job reads that same source itself, through huggingface_hub and PyYAML (both already
in the lock), instead of adding `datasets` and its dependency tree (pandas, fsspec, multiprocess,
...) to the locked runtime for one lookup; a card without `configs` is refused rather than guessed."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from job.errors import JobError

FORMATS = {"parquet": "parquet", "jsonl": "jsonl", "json": "jsonl", "csv": "csv"}  # by file extension


@dataclass(frozen=True)
class SplitFiles:
    paths: tuple[str, ...]  # repository paths, sorted
    format: str  # "parquet" | "jsonl" | "csv"
    label_names: tuple[str, ...] | None  # from the card's class_label, None when it has none


def card_header(text: str) -> dict[str, Any]:
    """The YAML header of a dataset card (README.md between the leading `---` lines)."""
    import yaml  # type: ignore[import-untyped]  # deferred: PyYAML loads only to read a dataset card

    if not text.startswith("---"):
        raise JobError("The dataset card (README.md) has no YAML header; name the data files in a local "
                       "resource lock (--resources) instead.")
    header = text.split("---", 2)[1]
    try:
        doc = yaml.safe_load(header)
    except yaml.YAMLError as exc:
        raise JobError(f"The dataset card's YAML header does not parse ({exc}); fix the card.") from exc
    return doc if isinstance(doc, dict) else {}


def split_files(header: dict[str, Any], config: str, split: str, repo_files: Sequence[str],
                label_column: str) -> SplitFiles:
    """The data files of config/split (globs matched against `repo_files`) and the label names of
    `label_column`, from the card's `configs` and `dataset_info`."""
    configs = {str(c.get("config_name")): c for c in header.get("configs") or []}
    if config not in configs:
        raise JobError(f"The dataset card lists the configs {sorted(configs)}, not {config!r}; pass one of them "
                       "with --config.")
    entries = configs[config].get("data_files") or []
    if isinstance(entries, (str, dict)):
        entries = [entries]
    patterns: list[str] = []
    for e in entries:
        if isinstance(e, dict) and str(e.get("split")) == split:
            path = e.get("path")
            patterns += [str(p) for p in (path if isinstance(path, list) else [path])]
    if not patterns:
        splits = sorted({str(e.get("split")) for e in entries if isinstance(e, dict)})
        raise JobError(f"The dataset card's config {config!r} has the splits {splits}, not {split!r}; pass one "
                       "of them with --split.")
    paths = sorted({f for f in repo_files for p in patterns if fnmatch.fnmatchcase(f, p)})
    if not paths:
        raise JobError(f"No file of the repository matches {patterns} (config {config!r}, split {split!r}); "
                       "the card and the files disagree at this revision.")
    formats = {FORMATS.get(p.rsplit(".", 1)[-1]) for p in paths}
    if len(formats) != 1 or None in formats:
        raise JobError(f"The split's files {paths[:3]} are not all Parquet, JSON lines or CSV; the job reads "
                       "only those.")
    return SplitFiles(tuple(paths), str(formats.pop()), class_names(header, config, label_column))


def class_names(header: dict[str, Any], config: str, column: str) -> tuple[str, ...] | None:
    """The `class_label.names` of `column` in the card's dataset_info for `config`, if listed."""
    infos = header.get("dataset_info") or []
    if isinstance(infos, dict):
        infos = [infos]
    for info in infos:
        if not isinstance(info, dict) or str(info.get("config_name", config)) != config:
            continue
        for feature in info.get("features") or []:
            if isinstance(feature, dict) and feature.get("name") == column:
                names = ((feature.get("dtype") or {}).get("class_label") or {}).get("names") \
                    if isinstance(feature.get("dtype"), dict) else None
                if isinstance(names, dict):  # {0: name, 1: name} as the card writes it
                    return tuple(str(names[k]) for k in sorted(names, key=int))
                if isinstance(names, list):
                    return tuple(str(n) for n in names)
    return None
