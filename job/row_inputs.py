"""Per-row inputs of a reproduction, re-derived from the pinned data and compared with the bundle's
predictions: what the model read (idx, text hash, token count, truncation) and what each row is
scored against (its label). A logit reproduced bit for bit proves nothing about a row whose label
the signer changed, so every one of these columns is checked, not only the logits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

INPUT_FIELDS = ("idx", "text_sha256", "label", "token_count", "truncated", "full_token_count")
"""The dataset-derived columns of a predictions table, in the order a difference is reported."""


@dataclass(frozen=True)
class InputDifference:
    """One row whose recorded column is not what the pinned data gives."""

    pool: str
    idx: int  # the bundle's idx of the row
    field: str
    bundle: Any
    found: Any

    def record(self) -> dict[str, Any]:
        return {"pool": self.pool, "idx": self.idx, "field": self.field, "bundle": self.bundle,
                "found": self.found}


def _plain(x: Any) -> Any:
    """A numpy scalar as the JSON value it stands for."""
    return x.item() if isinstance(x, np.generic) else x


def input_differences(pool: str, positions: list[int], recorded: Mapping[str, Any],
                      derived: Mapping[str, Any]) -> tuple[dict[str, int], list[InputDifference]]:
    """(field -> rows compared, the differences) over `positions` of one pool.

    `recorded` and `derived` map each field of INPUT_FIELDS they hold to a sequence in pool order
    (the bundle's columns, and the same columns re-derived from the pinned data); a field only one
    side holds is not compared. A row appears once per differing field, fields in INPUT_FIELDS order."""
    checked: dict[str, int] = {}
    found: list[InputDifference] = []
    idx = recorded["idx"]
    for field in INPUT_FIELDS:
        if field not in recorded or field not in derived:
            continue
        ours, theirs = derived[field], recorded[field]
        checked[field] = len(positions)
        for p in positions:
            if _plain(ours[p]) != _plain(theirs[p]):
                found.append(InputDifference(pool, int(idx[p]), field, _plain(theirs[p]), _plain(ours[p])))
    return checked, found


def differing_fields(found: list[InputDifference]) -> dict[str, int]:
    """field -> rows that differ in it, for fields with any difference, in INPUT_FIELDS order."""
    counts = {f: sum(1 for d in found if d.field == f) for f in INPUT_FIELDS}
    return {f: c for f, c in counts.items() if c}
