"""The pre-registered label map: which of the model's output indices is which of the dataset's labels.

The protocol's optional `label_map` lists, for every model output index, the model's label name
(`config.id2label`) and the dataset label it stands for, matched by name (case-insensitive) or given
explicitly. The run stores logits in the dataset's label order: column j of the stored logits is
the model's output for the index mapped to dataset label j. Columns are permuted, values untouched.
Without a `label_map`, output index j is dataset label j, unchecked (the protocols written before
the map existed)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from job.errors import JobError
from job.predictions import PoolOutput

BY_NAME, EXPLICIT = "name", "explicit"


@dataclass(frozen=True)
class LabelMap:
    """order[j] = the model output index whose logit is dataset label j; model_labels[i] = the
    name the model's config gives output index i."""

    order: tuple[int, ...]
    model_labels: tuple[str, ...]
    dataset_labels: tuple[str, ...]
    by: str

    @classmethod
    def from_protocol(cls, section: dict[str, Any], dataset_labels: Sequence[str]) -> LabelMap:
        """The map of a protocol's `label_map`; JobError unless it is a bijection of the model's
        indices 0..K-1 onto the dataset's K labels (and, `by` name, each pair has one name)."""
        names = tuple(dataset_labels)
        pairs = sorted(section["pairs"], key=lambda p: int(p["model_index"]))
        indices = [int(p["model_index"]) for p in pairs]
        if indices != list(range(len(names))):
            raise JobError(f"The protocol's label_map lists model indices {indices}, but the dataset has "
                           f"{len(names)} labels; map each index 0..{len(names) - 1} exactly once.")
        position = {n: j for j, n in enumerate(names)}
        targets = [str(p["dataset_label"]) for p in pairs]
        unknown = [t for t in targets if t not in position]
        if unknown or len(set(targets)) != len(targets):
            raise JobError(f"The protocol's label_map maps onto {targets}, which is not each of the dataset's "
                           f"labels {list(names)} once; fix label_map so that it is a one-to-one map.")
        by = str(section.get("by", BY_NAME))
        if by == BY_NAME:
            off = [(str(p["model_label"]), str(p["dataset_label"])) for p in pairs
                   if str(p["model_label"]).casefold() != str(p["dataset_label"]).casefold()]
            if off:
                raise JobError(f"The protocol's label_map matches by name but pairs {off[0][0]!r} with "
                               f"{off[0][1]!r}; set by to 'explicit' or fix the pair.")
        order = [0] * len(names)
        for i, t in enumerate(targets):
            order[position[t]] = i
        return cls(order=tuple(order), model_labels=tuple(str(p["model_label"]) for p in pairs),
                   dataset_labels=names, by=by)

    @property
    def identity(self) -> bool:
        return self.order == tuple(range(len(self.order)))

    def check_config(self, config_path: Path) -> None:
        """JobError unless the model's config.json names its outputs as the map does (id2label)."""
        found = config_labels(config_path)
        if found != list(self.model_labels):
            raise JobError(f"The model's config names its outputs {found}, but the protocol's label_map expects "
                           f"{list(self.model_labels)}; this is not the model the map was written for: "
                           "pin the right model or write the label_map again.")

    def apply(self, out: PoolOutput) -> PoolOutput:
        """The pool's logits with columns in dataset label order; the same values, reordered."""
        return out if self.identity else replace(out, logits=self.reorder(out.logits))

    def reorder(self, logits: NDArray[np.float32]) -> NDArray[np.float32]:
        """Logits [n, K] in model output order -> the same values with columns in dataset label order."""
        return logits if self.identity else np.ascontiguousarray(logits[:, list(self.order)])

    def pairs(self) -> list[tuple[int, str, str]]:
        """(model index, model label, dataset label) for every model output index."""
        to_dataset = {i: self.dataset_labels[j] for j, i in enumerate(self.order)}
        return [(i, self.model_labels[i], to_dataset[i]) for i in range(len(self.order))]


def config_labels(config_path: Path) -> list[str]:
    """The model's output names, id2label in index order, from its config.json."""
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        id2label = {int(k): str(v) for k, v in config["id2label"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise JobError(f"Cannot read id2label from the model's config {config_path} ({exc}); the model needs "
                       "a config.json that names its outputs.") from exc
    if sorted(id2label) != list(range(len(id2label))):
        raise JobError(f"The model's config numbers its outputs {sorted(id2label)}, not 0..{len(id2label) - 1}; "
                       "the config is broken.")
    return [id2label[i] for i in range(len(id2label))]


def match_labels(model_labels: Sequence[str], dataset_labels: Sequence[str],
                 explicit: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A protocol `label_map` section: model labels matched to dataset labels by name, ignoring case,
    or as `explicit` ({model label: dataset label}) says. JobError when the names do not match one to
    one: with a suggested explicit map when every label has one unambiguous namesake
    (`suggest_map`), never a map by position; and when an explicit map pairs a label with another
    label than its namesake."""
    if len(model_labels) < 2:
        raise JobError(f"The model has {len(model_labels)} output {list(model_labels)}; calibrating needs a "
                       "classifier with at least 2 classes, so pick a model with one output per class.")
    if len(model_labels) != len(dataset_labels):
        raise JobError(f"The model has {len(model_labels)} outputs {list(model_labels)} and the dataset "
                       f"{len(dataset_labels)} labels {list(dataset_labels)}; pick a model trained for these labels.")
    by_fold = {d.casefold(): d for d in dataset_labels}
    if explicit is not None:
        mapping = dict(explicit)
        by = EXPLICIT
        _refuse_against_names(mapping, model_labels, dataset_labels)
    else:
        mapping = {m: by_fold[m.casefold()] for m in model_labels if m.casefold() in by_fold}
        by = BY_NAME
    targets = [mapping.get(m) for m in model_labels]
    if None in targets or sorted(str(t) for t in targets) != sorted(dataset_labels):
        raise JobError(_no_match_message(model_labels, dataset_labels, explicit is not None))
    return {"by": by, "rule": RULE,
            "pairs": [{"model_index": i, "model_label": m, "dataset_label": t}
                      for i, (m, t) in enumerate(zip(model_labels, targets, strict=True))]}


def _no_match_message(model_labels: Sequence[str], dataset_labels: Sequence[str], explicit: bool) -> str:
    heard = (f"--label-map does not map the model's labels {list(model_labels)} one to one onto the dataset's "
             f"labels {list(dataset_labels)}" if explicit else
             f"The model's labels {list(model_labels)} do not match the dataset's labels "
             f"{list(dataset_labels)} one to one by name")
    suggestion = suggest_map(model_labels, dataset_labels)
    if suggestion is not None and not explicit:
        pairs = ",".join(f"{m}={suggestion[m]}" for m in model_labels)
        return (f"{heard}; their names suggest --label-map {pairs} (check each pair against the "
                "model's documentation before you pass it)")
    return (f"{heard}; their names do not say which is which, so give the map explicitly, "
            "--label-map MODEL_LABEL=DATASET_LABEL,... for every model label, from the model's documentation")


def _refuse_against_names(mapping: Mapping[str, str], model_labels: Sequence[str],
                          dataset_labels: Sequence[str]) -> None:
    """JobError when the explicit map sends a model label elsewhere than to the dataset label its
    name matches (`name_key`): such a map is almost certainly a positional pairing pasted by mistake."""
    keys = {name_key(d): d for d in dataset_labels}
    for m in model_labels:
        namesake = keys.get(name_key(m))
        if namesake is not None and m in mapping and mapping[m] != namesake:
            raise JobError(f"--label-map pairs the model's {m!r} with the dataset's {mapping[m]!r}, but the "
                           f"dataset's {namesake!r} has the same name; pair labels by name ({m}={namesake}), "
                           "never by position.")


SUFFIXES = ("ments", "ment", "ions", "ion", "ing", "ies", "ed", "es", "s", "y", "e")
"""Inflections stripped to compare label names: plurals, participles and -ment/-ion nouns, so that
`entailed`, `entails` and `ENTAILMENT` share the stem `entail`."""
CLOSEST = 0.8
"""The least difflib similarity for a closest-name suggestion (and it must be the only one that close)."""


def name_key(name: str) -> str:
    """A label name reduced for comparison: case folded, only letters and digits, one inflection off."""
    key = "".join(ch for ch in name.casefold() if ch.isalnum())
    for suffix in SUFFIXES:
        if key.endswith(suffix) and len(key) - len(suffix) >= 3:
            return key[: -len(suffix)]
    return key


def _digits(key: str) -> str:
    return "".join(ch for ch in key if ch.isdigit())


def suggest_map(model_labels: Sequence[str], dataset_labels: Sequence[str]) -> dict[str, str] | None:
    """{model label: dataset label} when every model label has exactly one namesake among the dataset's
    labels (same `name_key`, or else the single close name with the same digits, similarity >= CLOSEST) and no two share
    one; None otherwise. Positions never enter: unnamed labels (LABEL_0, ...) get no suggestion."""
    keys = {d: name_key(d) for d in dataset_labels}
    out: dict[str, str] = {}
    for m in model_labels:
        mk = name_key(m)
        same = [d for d, k in keys.items() if k == mk]
        if not same:
            close = [d for d, k in keys.items() if _digits(k) == _digits(mk)
                     and difflib.SequenceMatcher(None, mk, k).ratio() >= CLOSEST]
            same = close if len(close) == 1 else []
        if len(same) != 1:
            return None
        out[m] = same[0]
    return out if len(set(out.values())) == len(out) == len(dataset_labels) else None


RULE = ("logits stored in dataset label order: logit_j is the model output whose index maps to dataset label j; "
        "columns permuted, values untouched; checked against the model's config.id2label before inference")
