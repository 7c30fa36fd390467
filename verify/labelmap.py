"""The pre-registered label map, re-checked from FORMAT.md: the protocol's `label_map` maps the
model's output indices 0..K-1 one to one onto the dataset's K labels (by name, ignoring case, when
it says so), and the predictions hold one logit column per dataset label, in dataset label order."""

from __future__ import annotations

from typing import Any

from bundle import layout
from verify.context import POOL_NAMES, Context
from verify.result import Failed


def check_label_map(protocol: dict[str, Any], logit_columns: dict[str, int]) -> str:
    labels = protocol["resources"]["dataset"]["labels"]
    section = protocol["label_map"]
    pairs = sorted(section["pairs"], key=lambda p: p["model_index"])
    indices = [p["model_index"] for p in pairs]
    if indices != list(range(len(labels))):
        raise Failed(f"label_map lists model indices {indices}, the dataset has {len(labels)} labels "
                     f"(0..{len(labels) - 1} each once).")
    targets = [p["dataset_label"] for p in pairs]
    if sorted(targets) != sorted(labels):
        raise Failed(f"label_map maps onto {targets}, not each of the dataset's labels {labels} once.")
    if section["by"] == "name":
        off = [p for p in pairs if p["model_label"].casefold() != p["dataset_label"].casefold()]
        if off:
            raise Failed(f"label_map says it matches by name, but pairs model label "
                         f"{off[0]['model_label']!r} with dataset label {off[0]['dataset_label']!r}.")
    for pool, k in logit_columns.items():
        if k != len(labels):
            raise Failed(f"data/predictions/{pool}.parquet has {k} logit columns, the label map {len(labels)}.")
    shown = ", ".join(f"{p['model_index']}:{p['model_label']}->{p['dataset_label']}" for p in pairs)
    return f"bijection by {section['by']} onto {len(labels)} dataset labels ({shown[:200]})" + _against_names(pairs)


def _against_names(pairs: list[dict[str, Any]]) -> str:
    """A warning, for the detail, when a pair sends a model label to another dataset label than
    the one of the same name (ignoring case): an explicit map that may be positional by mistake."""
    by_fold = {p["dataset_label"].casefold(): p["dataset_label"] for p in pairs}
    for p in pairs:
        namesake = by_fold.get(p["model_label"].casefold())
        if namesake is not None and namesake != p["dataset_label"]:
            return (f"; WARNING: it pairs model label {p['model_label']!r} with {p['dataset_label']!r}, "
                    f"though the dataset has {namesake!r}")
    return ""


# -- the checks (verify/checks.py lists them in order) ---------------------------------------

def wanted(ctx: Context) -> bool:
    """The protocol in the bag pre-registers a label map."""
    return "label_map" in ctx.docs.get(layout.PROTOCOL_JSON, {})


def label_map(ctx: Context) -> str:
    """The label map is a bijection onto the dataset's labels; predictions have one column per label."""
    columns = {pool: int(ctx.table(pool).z32.shape[1]) for pool in POOL_NAMES}
    return check_label_map(ctx.doc(layout.PROTOCOL_JSON), columns)
