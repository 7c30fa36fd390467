"""`python -m job lock`: write a resource lock (`--resources LOCK.json`) from local files.

Every file of the model folder is hashed (size and sha256); the data files are hashed and read for
the split's rows and column types; the class names come from the data's own metadata
(job.datameta: the Parquet file's ClassLabel, or a dataset_info.json or card beside the files),
else from string label values, else from --labels. Nothing needs the network. The lock names a
repository and revision only when the user states them (--model, --model-revision, ...); otherwise
`init --resources` and the run take them from the protocol, and the bundle marks them as stated by
the protocol's author (source local), never as confirmed by a hub."""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from bundle.digests import sha256_file
from job.datacard import FORMATS
from job.datameta import stated_labels
from job.dataset import read_table
from job.errors import JobError
from job.resources import load_lock

REPO_PATH = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*$")
"""A file's path inside its repository, as the lock's schema allows it."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-dir", type=Path, required=True,
                   help="the model's folder (config.json, model.safetensors, tokenizer files)")
    p.add_argument("--data", type=Path, nargs="+", required=True,
                   help="the split's data files (Parquet, JSON lines or CSV)")
    p.add_argument("--data-root", type=Path,
                   help="the dataset's folder: data file paths are recorded relative to it (default: the files' "
                        "common folder)")
    p.add_argument("--text", help="text column, checked to exist")
    p.add_argument("--text-pair", help="second text column, checked to exist")
    p.add_argument("--label", default="label", help="label column (default: label)")
    p.add_argument("--labels", help="class names in class-index order, NAME,NAME,..., only for data that states none")
    p.add_argument("--model", dest="model_id", help="the model's repository name, when you state it")
    p.add_argument("--model-revision", help="the model's commit, when you state it")
    p.add_argument("--dataset", dest="dataset_id", help="the dataset's repository name, when you state it")
    p.add_argument("--dataset-revision", help="the dataset's commit, when you state it")
    p.add_argument("--out", type=Path, required=True, help="lock file to write (must not exist)")


def _entry(repo_path: str, local: Path, lock_dir: Path) -> dict[str, Any]:
    if not REPO_PATH.match(repo_path):
        raise JobError(f"The file {local} would be recorded as {repo_path!r}, which is not a repository path "
                       "(letters, digits, . _ - and /); rename it.")
    return {"path": repo_path, "size": local.stat().st_size, "sha256": sha256_file(local),
            "local_path": os.path.relpath(local.resolve(), lock_dir.resolve())}


def model_files(model_dir: Path, lock_dir: Path) -> list[dict[str, Any]]:
    """Every visible file under the model folder, by path."""
    if not (model_dir / "config.json").is_file():
        raise JobError(f"{model_dir} has no config.json; --model-dir must be the folder save_pretrained wrote.")
    paths = sorted(p for p in model_dir.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(model_dir).parts))
    return [_entry(p.relative_to(model_dir).as_posix(), p, lock_dir) for p in paths]


def _data_root(files: Sequence[Path], given: Path | None) -> Path:
    if given is not None:
        return given.resolve()
    return Path(os.path.commonpath([str(f.resolve().parent) for f in files]))


def data_format(files: Sequence[Path]) -> str:
    formats = {FORMATS.get(f.name.rsplit(".", 1)[-1]) for f in files}
    if len(formats) != 1 or None in formats:
        raise JobError(f"The data files {[f.name for f in files]} are not all Parquet, JSON lines or CSV "
                       "(.parquet, .jsonl, .json, .csv); the job reads only those.")
    return str(formats.pop())


def dataset_section(args: argparse.Namespace, lock_dir: Path) -> dict[str, Any]:
    """The lock's dataset: files, rows, column types and class names."""
    files = sorted({f.resolve() for f in args.data})
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise JobError(f"No data file at {missing[0]}; pass the split's files with --data.")
    root = _data_root(files, args.data_root)
    try:
        entries = [_entry(f.relative_to(root).as_posix(), f, lock_dir) for f in files]
    except ValueError as exc:
        raise JobError(f"The data files are not all under --data-root {root}; pass the dataset's folder.") from exc
    fmt = data_format(files)
    tables = [read_table(f, fmt) for f in files]
    try:
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    except pa.ArrowInvalid as exc:
        raise JobError(f"The data files have different columns ({exc}); pass the files of one split.") from exc
    columns = {f.name: str(f.type) for f in table.schema}
    for flag, col in (("--text", args.text), ("--text-pair", args.text_pair), ("--label", args.label)):
        if col is not None and col not in columns:
            raise JobError(f"The data has no column {col!r} for {flag}; its columns are {sorted(columns)}.")
    if table.num_rows == 0:
        raise JobError("The data files hold no rows; pass the files of a split with at least one example.")
    labels = class_names_of(files, fmt, args, root, table)
    if len(labels) < 2:
        raise JobError(f"The data has {len(labels)} class {list(labels)} in {args.label!r}; calibrating needs at "
                       "least 2 classes, so pass the files of a split (or a label column) with several.")
    return {"repo_type": "dataset", "files": sorted(entries, key=lambda e: e["path"]), "rows": table.num_rows,
            "columns": columns, "labels": list(labels)}


def class_names_of(files: Sequence[Path], fmt: str, args: argparse.Namespace, root: Path,
                   table: Any) -> tuple[str, ...]:
    """The data's stated class names; else --labels; else the sorted string values of the label column."""
    stated = stated_labels(files, fmt, args.label, root=root)
    given = tuple(n.strip() for n in args.labels.split(",")) if args.labels else None
    if stated is not None:
        if given is not None and given != stated.names:
            raise JobError(f"--labels {list(given)} disagrees with the class names {list(stated.names)} that "
                           f"{stated.source} states; drop --labels.")
        return stated.names
    if given is not None:
        return given
    values = table.column(args.label)
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return tuple(sorted({v for v in values.to_pylist() if v is not None}))
    raise JobError(f"The data states no class names for {args.label!r} (no ClassLabel in the Parquet metadata, no "
                   "dataset_info.json or README.md card beside the files) and its values are class indices; "
                   "pass --labels NAME,NAME,... in class-index order, from the dataset's documentation.")


def build_lock(args: argparse.Namespace) -> dict[str, Any]:
    """The lock document for the model folder and data files `args` names."""
    lock_dir = args.out.resolve().parent
    model: dict[str, Any] = {"repo_type": "model", "files": model_files(args.model_dir, lock_dir)}
    dataset = dataset_section(args, lock_dir)
    for section, repo_id, revision in ((model, args.model_id, args.model_revision),
                                       (dataset, args.dataset_id, args.dataset_revision)):
        if repo_id is not None:
            section["repo_id"] = repo_id
        if revision is not None:
            section["revision"] = revision
    return {"model": model, "dataset": dataset}


def run_lock(args: argparse.Namespace) -> int:
    """Write the lock at args.out (refusing to overwrite); nothing is written on any error."""
    if args.out.exists():
        raise JobError(f"{args.out} exists; pick another --out or remove it.")
    doc = build_lock(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    try:
        load_lock(args.out)  # the lock init and the run will read, checked as they check it
    except JobError:
        args.out.unlink()
        raise
    ds = doc["dataset"]
    n_model, n_data = len(doc["model"]["files"]), len(ds["files"])
    print(f"lock {args.out} written: {n_model} model file{'s' * (n_model != 1)}, {n_data} data "
          f"file{'s' * (n_data != 1)}, {ds['rows']} rows, classes {ds['labels']}")
    return 0
