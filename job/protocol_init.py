"""`python -m job init`: write a protocol for any pinned classifier and dataset split.

At pinned commits (a branch or tag is refused, with the commit it points to), it resolves which
files make up the model (config, safetensors weights, tokenizer files) and the split (from the
dataset card, job.datacard), from the hub or from a local lock (`--resources`, written by `job
lock`), pins every file by size and sha256 (the sha256 the hub publishes for LFS files, the
download's for the others), reads the split's columns, rows and label names (checked against the
class names the data states about itself, job.datameta), refuses bad rows (job.rowcheck), maps
the model's outputs onto the dataset's labels by name (or as --label-map says), and writes a
protocol that `job smoke` and `job run --protocol` follow as it is. Both routes write the same
bytes for the same files: every list without a meaningful order is sorted. The inference, fit, metrics and
study sections are the formal protocol's (provenance.json), so runs of different models differ only
in what the protocol says about the model and the data."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from bundle.digests import sha256_file
from bundle.layout import DEFAULT_LOGIT_TOLERANCE
from bundle.limits import DOCUMENT_BYTES
from bundle.terminal import nonempty_path
from bundle.userfile import read_user_file
from job.datacard import FORMATS, card_header, split_files
from job.datameta import stated_labels
from job.dataset import DatasetSpec, read_table
from job.errors import JobError
from job.hub import LOCAL_ROUTE, default_cache, failure_reason, hub_fetch, require_reachable
from job.labelmap import config_labels, match_labels
from job.linear_kernels import KERNELS
from job.protocol import AUDIT, CALIBRATION, DEFAULT_PROTOCOL, load_protocol, pool_size_problem
from job.resources import load_lock
from job.rowcheck import check_rows, require_rows

COMMIT = re.compile(r"^[0-9a-f]{40}$")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "vocab.json",
                   "merges.txt", "added_tokens.json", "spm.model", "sentencepiece.bpe.model", "spiece.model")
WEIGHTS = "model.safetensors"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model repository, e.g. FacebookAI/roberta-large-mnli")
    p.add_argument("--model-revision", required=True, help="the model's commit (40 hex digits)")
    p.add_argument("--dataset", required=True, help="dataset repository")
    p.add_argument("--dataset-revision", required=True, help="the dataset's commit (40 hex digits)")
    p.add_argument("--config", default="default", help="dataset configuration (default: default)")
    p.add_argument("--split", required=True, help="the split to evaluate, e.g. validation")
    p.add_argument("--text", required=True, help="text column")
    p.add_argument("--text-pair", help="second text column, for pairs (premise/hypothesis)")
    p.add_argument("--label", required=True, help="label column")
    p.add_argument("--id", dest="id_column", help="integer id column (default: idx if present, else the row number)")
    p.add_argument("--name", required=True, help="protocol name (lower case, digits, . _ -)")
    p.add_argument("--pools", default="explore:256,calibration:256,audit:rest",
                   help="pools in cutting order, NAME:SIZE or NAME:rest "
                        "(default: explore:256,calibration:256,audit:rest)")
    p.add_argument("--prefix", help="split key prefix (default: NAME:)")
    p.add_argument("--label-map", help="explicit map MODEL_LABEL=DATASET_LABEL,... (default: match names)")
    p.add_argument("--estimators", type=nonempty_path,
                   help="JSON file with the list of calibration estimators to pre-register in metrics.estimators "
                        "(default: the formal protocol's; docs/GUIDE.md, \"The estimators\")")
    p.add_argument("--linear-kernels", choices=KERNELS, default=None,
                   help="whose kernels run the linear layers (inference.linear_kernels; default: left out, "
                        "which means mkl, the formal protocol's)")
    p.add_argument("--out", type=nonempty_path, required=True, help="protocol file to write")
    p.add_argument("--resources", type=nonempty_path, help="local resource lock: take the files from it, not the hub")
    p.add_argument("--cache", type=nonempty_path, default=None,
                   help="download cache (default: $HF_HOME/calibration-runs)")


@dataclass(frozen=True)
class Pinned:
    """One repository's files as the protocol pins them, and where each one lies locally (None: not
    downloaded, a large LFS file pinned by the hub's published sha256)."""

    repo_id: str
    repo_type: str
    revision: str
    files: tuple[dict[str, Any], ...]
    local: dict[str, Path | None]


class Hub:
    """What init asks the hub: a revision's commit and its files with sizes and LFS sha256."""

    def __init__(self, endpoint: str | None = None) -> None:
        self.endpoint = endpoint

    def _info(self, repo_id: str, repo_type: str, revision: str, files: bool) -> Any:
        from huggingface_hub import HfApi  # deferred: the hub client loads only when the hub is asked

        require_reachable(f"Reading the {repo_type} {repo_id}@{revision}", self.endpoint)
        try:
            return HfApi(endpoint=self.endpoint).repo_info(repo_id, repo_type=repo_type, revision=revision,
                                                           files_metadata=files)
        except Exception as exc:  # whatever the network or the hub does, one sentence
            raise JobError(f"Cannot read the {repo_type} {repo_id}@{revision} from the hub "
                           f"({failure_reason(exc)}); check the name, the revision and the network, "
                           f"{LOCAL_ROUTE}.") from exc

    def commit(self, repo_id: str, repo_type: str, revision: str) -> str:
        return str(self._info(repo_id, repo_type, revision, files=False).sha)

    def listing(self, repo_id: str, repo_type: str, revision: str) -> dict[str, tuple[int, str | None]]:
        """{path: (size, LFS sha256 or None)} for every file at `revision`."""
        info = self._info(repo_id, repo_type, revision, files=True)
        out = {}
        for s in info.siblings or []:
            lfs = s.lfs
            out[s.rfilename] = (int(s.size or 0), None if lfs is None else str(lfs.sha256))
        return out


def require_commit(hub: Hub | None, repo_id: str, repo_type: str, revision: str, flag: str) -> str:
    """`revision` when it is a full commit; otherwise JobError naming the commit it points to."""
    if COMMIT.match(revision):
        return revision
    if hub is None:
        # Local files: the revision is the author's statement of where they came from, never checked.
        raise JobError(f"{flag} {revision!r} is not a commit (40 hex digits); for local files pass the commit "
                       "of the hub repository they were downloaded from (its history page lists it), or, for files "
                       "that never were in one, any 40 hex digits you will publish with them, e.g. the first 40 "
                       "of their `sha256sum` (docs/GUIDE.md, \"Your own classifier\").")
    sha = hub.commit(repo_id, repo_type, revision)
    raise JobError(f"{flag} {revision!r} is a branch or tag, which can move; pin its current commit: "
                   f"{flag} {sha}.")


def parse_pools(text: str, rows: int) -> list[dict[str, Any]]:
    """`explore:256,calibration:256,audit:rest` -> [{"name", "size"}], `rest` taking what is left."""
    pools: list[dict[str, Any]] = []
    try:
        items = [tuple(x.split(":")) for x in text.split(",")]
        fixed = sum(int(size) for _, size in items if size != "rest")
    except ValueError as exc:
        raise JobError(f"--pools {text!r} is not NAME:SIZE,...; write e.g. explore:256,calibration:256,audit:rest.") \
            from exc
    for name, size in items:
        pools.append({"name": name, "size": rows - fixed if size == "rest" else int(size)})
    names = [p["name"] for p in pools]
    if sum(p["size"] for p in pools) != rows or min(p["size"] for p in pools) < 0 \
            or not {CALIBRATION, AUDIT} <= set(names) or not set(names) <= {"explore", CALIBRATION, AUDIT}:
        raise JobError(f"--pools {text!r} does not cut the split's {rows} rows into explore, calibration and audit "
                       "pools; give sizes that add up (one pool may be `rest`).")
    for pool in pools:
        problem = pool_size_problem(pool["name"], pool["size"])
        if problem is not None:
            raise JobError(f"--pools {text!r}: the {problem}; give it more rows.")
    return pools


def parse_label_map(text: str | None) -> dict[str, str] | None:
    if text is None:
        return None
    try:
        return dict(tuple(pair.split("=", 1)) for pair in text.split(","))  # type: ignore[misc]
    except ValueError as exc:
        raise JobError(f"--label-map {text!r} is not MODEL_LABEL=DATASET_LABEL,...; write e.g. "
                       "NEGATIVE=negative,POSITIVE=positive.") from exc


def _fetch_and_pin(repo: str, repo_type: str, rev: str, listing: dict[str, tuple[int, str | None]],
                   paths: Sequence[str], cache: Path, fetch: Any, download_lfs: bool) -> Pinned:
    files: list[dict[str, Any]] = []
    local: dict[str, Path | None] = {}
    for path in paths:
        size, lfs = listing[path]
        if lfs is not None and not download_lfs:
            files.append({"path": path, "size": size, "sha256": lfs})
            local[path] = None
            continue
        got = Path(fetch(repo, repo_type, rev, path, cache / "hub"))
        digest = sha256_file(got)
        if got.stat().st_size != size or (lfs is not None and digest != lfs):
            raise JobError(f"{repo}@{rev[:12]}:{path} downloaded as {got.stat().st_size} bytes, "
                           f"sha256 {digest}; the hub "
                           f"lists {size} bytes, sha256 {lfs}: download it again.")
        files.append({"path": path, "size": size, "sha256": digest})
        local[path] = got
    return Pinned(repo, repo_type, rev, tuple(files), local)


def _model_paths(listing: dict[str, tuple[int, str | None]], repo: str) -> list[str]:
    if "config.json" not in listing or WEIGHTS not in listing:
        raise JobError(f"The model {repo} has no config.json and {WEIGHTS} at this revision; the job loads only "
                       "safetensors weights: pick a revision that has them.")
    return sorted(["config.json", *[f for f in TOKENIZER_FILES if f in listing], WEIGHTS])


def from_hub(args: argparse.Namespace, hub: Hub, fetch: Any) -> tuple[Pinned, Pinned, str, tuple[str, ...] | None]:
    """Model and split files pinned at their commits, the split's format and the card's label names."""
    cache = args.cache or default_cache()
    m_list = hub.listing(args.model, "model", args.model_revision)
    model = _fetch_and_pin(args.model, "model", args.model_revision, m_list, _model_paths(m_list, args.model),
                           cache, fetch, download_lfs=False)
    d_list = hub.listing(args.dataset, "dataset", args.dataset_revision)
    if "README.md" not in d_list:
        raise JobError(f"The dataset {args.dataset} has no card (README.md) at this revision to name the split's "
                       "files; write a local resource lock and pass --resources.")
    card = Path(fetch(args.dataset, "dataset", args.dataset_revision, "README.md", cache / "hub"))
    split = split_files(card_header(card.read_text(encoding="utf-8")), args.config, args.split, sorted(d_list),
                        args.label)
    data = _fetch_and_pin(args.dataset, "dataset", args.dataset_revision, d_list, split.paths, cache, fetch,
                          download_lfs=True)
    labels = split.label_names
    if labels is None:
        files = [p for p in data.local.values() if p is not None]
        stated = stated_labels(files, split.format, args.label, root=_repo_root(files[0], split.paths[0]))
        labels = None if stated is None else stated.names
    else:
        check_stated_labels(data, split.format, args.label, labels, "the dataset card")
    return model, data, split.format, labels


def from_lock(args: argparse.Namespace) -> tuple[Pinned, Pinned, str, tuple[str, ...] | None]:
    """Model and dataset files from a local resource lock (offline). The model's files are chosen
    as on the hub route and every list is sorted, so both routes write the same protocol. The
    lock's class names must agree with those the data states about itself (job.datameta)."""
    lock = load_lock(args.resources)
    base = args.resources.resolve().parent
    pinned = []
    for role, repo, rev in (("model", args.model, args.model_revision),
                            ("dataset", args.dataset, args.dataset_revision)):
        section = lock[role]
        stated = (section.get("repo_id", repo), section.get("revision", rev))
        if stated != (repo, rev):
            raise JobError(f"The lock names the {role} {stated[0]}@{stated[1]}, but init was given "
                           f"{repo}@{rev}; pass the lock's repository and revision, or write the lock again.")
        entries = {f["path"]: f for f in section["files"]}
        paths = sorted(_model_paths({p: (0, None) for p in entries}, repo) if role == "model" else entries)
        files: list[dict[str, Any]] = []
        local: dict[str, Path | None] = {}
        for path_in_repo in paths:
            f = entries[path_in_repo]
            path = (base / f["local_path"]).resolve()
            if not path.is_file():
                raise JobError(f"The lock's {role} file {f['path']} is missing at {path}; fix its local_path or "
                               "write the lock again with `python -m job lock`.")
            digest = sha256_file(path)
            if f["sha256"] not in (None, digest) or path.stat().st_size != f["size"]:
                raise JobError(f"The lock's {role} file {f['path']} at {path} is not the file the lock pins; "
                               "write the lock again with `python -m job lock`.")
            files.append({"path": f["path"], "size": f["size"], "sha256": digest})
            local[f["path"]] = path
        pinned.append(Pinned(repo, role, rev, tuple(files), local))
    data = pinned[1]
    fmt = FORMATS.get(data.files[0]["path"].rsplit(".", 1)[-1], "parquet")
    labels = tuple(lock["dataset"]["labels"])
    check_stated_labels(data, fmt, args.label, labels)
    return pinned[0], data, fmt, labels


def _repo_root(local: Path, repo_path: str) -> Path:
    """The folder that holds a file's repository: `local` without the path's folders."""
    root = local.parent
    for _ in repo_path.split("/")[1:]:
        root = root.parent
    return root


def check_stated_labels(data: Pinned, fmt: str, column: str, labels: tuple[str, ...],
                        claimant: str = "the lock") -> None:
    """JobError unless `labels` (the lock's, or the card's) are the class names the data files state
    about themselves, in the same order; nothing to check when the data states none."""
    files = [p for p in data.local.values() if p is not None]
    first = data.files[0]
    stated = stated_labels(files, fmt, column, root=_repo_root(files[0], str(first["path"])))
    if stated is not None and stated.names != labels:
        fix = ("write the lock again with `python -m job lock`, which reads them from the data"
               if claimant == "the lock" else
               "the dataset's card and files disagree at this revision: pick a revision where they agree")
        raise JobError(f"{claimant[0].upper()}{claimant[1:]} lists the classes {list(labels)}, but {stated.source} "
                       f"names them {list(stated.names)} (class 0 first); {fix}.")


def dataset_section(args: argparse.Namespace, data: Pinned, fmt: str,
                    card_labels: tuple[str, ...] | None) -> dict[str, Any]:
    """The protocol's dataset: files, rows, every column's type, label names, and how to read them."""
    tables = [read_table(p, fmt) for p in data.local.values() if p is not None]
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    columns = {f.name: str(f.type) for f in sorted(table.schema, key=lambda f: f.name)}
    for flag, col in (("--text", args.text), ("--text-pair", args.text_pair), ("--label", args.label),
                      ("--id", args.id_column)):
        if col is not None and col not in columns:
            raise JobError(f"The split has no column {col!r} for {flag}; its columns are {sorted(columns)}.")
    id_column = args.id_column
    if id_column is None and "idx" in columns and pa.types.is_integer(table.schema.field("idx").type):
        id_column = "idx"
    require_rows(table)
    labels = card_labels
    if labels is None:
        values = table.column(args.label)
        if not pa.types.is_string(values.type):
            raise JobError(f"The dataset states no class names for {args.label!r} (no card class_label, no Parquet "
                           f"ClassLabel) and its values are {values.type}; write a lock with "
                           "`python -m job lock --labels NAME,...` and pass --resources.")
        labels = tuple(sorted({v for v in values.to_pylist() if v is not None}))
    if len(labels) < 2:
        raise JobError(f"The dataset's {args.label!r} column has {len(labels)} class {list(labels)}; calibrating "
                       "needs at least 2 classes, so pick a split or label column with several.")
    check_rows(table, text_columns=[c for c in (args.text, args.text_pair) if c is not None],
               label_column=args.label, labels=labels, id_column=id_column)
    section: dict[str, Any] = {
        "repo_id": data.repo_id, "repo_type": "dataset", "revision": data.revision, "files": list(data.files),
        "rows": table.num_rows, "columns": columns, "labels": list(labels), "format": fmt, "id_column": id_column,
        "text_column": args.text, "label_column": args.label, "config": args.config, "split": args.split}
    if args.text_pair is not None:
        section["text_pair_column"] = args.text_pair
    DatasetSpec.from_protocol(section)
    return section


def read_estimators(path: Path) -> list[Any]:
    """The list of estimators in the JSON file at `path` (JobError, one sentence, for anything
    else); its entries are checked with the whole protocol, before it is kept."""
    raw = read_user_file(path, "estimators file (--estimators)", DOCUMENT_BYTES, JobError)
    try:
        entries = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise JobError(f"The estimators file {path} is not valid JSON ({exc}); fix the file.") from exc
    if not isinstance(entries, list):
        raise JobError(f"The estimators file {path} holds a JSON {type(entries).__name__}, not a list of "
                       "estimators; write a list such as the formal protocol's metrics.estimators.")
    return entries


def build_protocol(args: argparse.Namespace, model: Pinned, data: Pinned, fmt: str,
                   card_labels: tuple[str, ...] | None) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DEFAULT_PROTOCOL.read_text(encoding="utf-8"))
    ds = dataset_section(args, data, fmt, card_labels)
    config = model.local["config.json"]
    assert config is not None
    label_map = match_labels(config_labels(config), ds["labels"], parse_label_map(args.label_map))
    pools = parse_pools(args.pools, ds["rows"])
    cal = next(p["size"] for p in pools if p["name"] == CALIBRATION)
    doc.update(name=args.name, question=(
        f"How well calibrated are the probabilities of {model.repo_id} on the {args.split} split of "
        f"{data.repo_id} ({args.config}), and does one temperature fitted on a separate calibration pool "
        "improve them?"))
    doc["resources"] = {"model": {"repo_id": model.repo_id, "repo_type": "model", "revision": model.revision,
                                  "files": list(model.files)}, "dataset": ds}
    doc["split"].update(prefix=args.prefix if args.prefix is not None else f"{args.name}:", pools=pools,
                        smoke={"pool": CALIBRATION, "rows": max(1, min(8, cal))})
    if "stability" in doc:
        sizes = [m for m in doc["stability"]["sizes"] if m < cal] + [cal]
        doc["stability"]["sizes"] = sorted(set(sizes))
    doc["label_map"] = label_map
    if args.estimators is not None:
        doc["metrics"]["estimators"] = read_estimators(args.estimators)
    if args.linear_kernels is not None:
        doc["inference"]["linear_kernels"] = args.linear_kernels
    # Pre-registered with everything else, so no reproduction can pick its own tolerance afterwards.
    doc.setdefault("reproduction", {"logit_tolerance": DEFAULT_LOGIT_TOLERANCE})
    return doc


def run_init(args: argparse.Namespace, hub: Hub | None = None, fetch: Any = hub_fetch) -> int:
    """Write the protocol at args.out; JobError (one sentence) on anything that cannot be pinned."""
    hub = hub if hub is not None else (None if args.resources is not None else Hub())
    args.model_revision = require_commit(hub, args.model, "model", args.model_revision, "--model-revision")
    args.dataset_revision = require_commit(hub, args.dataset, "dataset", args.dataset_revision, "--dataset-revision")
    if args.out.exists():
        raise JobError(f"{args.out} exists; a protocol is written once: pick another --out.")
    if args.resources is not None:
        model, data, fmt, labels = from_lock(args)
    else:
        assert hub is not None
        model, data, fmt, labels = from_hub(args, hub, fetch)
    doc = build_protocol(args, model, data, fmt, labels)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    try:
        protocol = load_protocol(args.out)  # the protocol a run will read, checked as a run checks it
    except JobError:
        args.out.unlink()
        raise
    print(f"protocol {args.out} written, sha256 {protocol.sha256}")
    for i, m, d in protocol.label_map.pairs() if protocol.label_map else []:
        print(f"  model output {i} ({m}) -> dataset label {d!r}")
    return 0
