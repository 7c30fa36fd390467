"""Bit-for-bit comparison of float32 logits, and how far apart two that differ are (ulps, absolute)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


def ulps_apart(a: NDArray[np.float32], b: NDArray[np.float32]) -> NDArray[np.int64]:
    """How many float32 values lie between a and b, elementwise (0 for equal values, +0 and -0 included).

    A float32's bit pattern, read as a sign-magnitude integer, orders the floats; mapped to a
    two's-complement line, the distance between two floats is the difference of their integers."""
    def on_line(x: NDArray[np.float32]) -> NDArray[np.int64]:
        bits = np.ascontiguousarray(x, dtype=np.float32).view(np.int32).astype(np.int64)
        line: NDArray[np.int64] = np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)
        return line

    apart: NDArray[np.int64] = np.abs(on_line(a) - on_line(b))
    return apart


@dataclass(frozen=True)
class RowComparison:
    """Per row: whether every logit has the very same bits, and the row's largest differences."""

    identical: NDArray[np.bool_]
    ulps: NDArray[np.int64]
    abs: NDArray[np.float64]


def compare_rows(found: NDArray[np.float32], recorded: NDArray[np.float32]) -> RowComparison:
    """Compare [n, K] float32 logits row by row: identical means the same 32 bits in every column."""
    if found.shape != recorded.shape:
        raise ValueError(f"logits of shape {found.shape} cannot be compared with {recorded.shape}")
    same_bits = (np.ascontiguousarray(found, dtype=np.float32).view(np.uint32)
                 == np.ascontiguousarray(recorded, dtype=np.float32).view(np.uint32))
    ulps = ulps_apart(found, recorded).max(axis=1, initial=0)
    diff = np.abs(found.astype(np.float64) - recorded.astype(np.float64)).max(axis=1, initial=0.0)
    return RowComparison(identical=same_bits.all(axis=1), ulps=ulps, abs=diff)


def predictions_changed(found: NDArray[np.float32], recorded: NDArray[np.float32]) -> NDArray[np.bool_]:
    """Per row: whether the predicted class (the first largest logit) differs."""
    changed: NDArray[np.bool_] = found.argmax(axis=1) != recorded.argmax(axis=1)
    return changed


def grade(identical: bool, largest_abs: float, tolerance: float, predictions_changed: int,
          inputs_differ: bool) -> str:
    """The verdict of a reproduction (bundle/FORMAT.md, "Reproduction attestation").

    `bit-identical`: every compared logit has the same bits and every per-row input agrees.
    `equivalent`: not every bit is equal, but every compared logit is within `tolerance` (absolute)
    of the stored one, no compared row's predicted class changed, and every per-row input agrees.
    `mismatch`: anything else."""
    if inputs_differ:
        return "mismatch"
    if identical:
        return "bit-identical"
    if largest_abs <= tolerance and predictions_changed == 0:
        return "equivalent"
    return "mismatch"
