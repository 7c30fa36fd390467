"""What a run's own numbers say about whether it went wrong, and how much of the text was cut.

A run whose audit accuracy is below chance (1/K), or whose temperature sits at a bound of the fit
interval, almost always read its labels through a wrong label map or a broken model. Such a run
still reports what it found (the pre-registered outcome is not changed), but it must not look
normal: `warnings` are written into metrics.json, the report, the run's output and, recomputed, the
verifier's. The truncation summary says, per pool, how many rows were cut to max_length and the
longest row's token count before the cut.

The verifier derives both again from the bundle (verify/plausibility.py); the wording of each
warning is the format's (bundle/wording.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from bundle.wording import at_bound_warning, below_chance_warning


def below_chance(accuracy: float, k: int) -> str | None:
    """The warning for an accuracy below chance (1/k), or None."""
    chance = 1.0 / k
    if accuracy >= chance:
        return None
    return below_chance_warning(accuracy, chance)


def at_bound(temperature: dict[str, Any]) -> str | None:
    """The warning for a temperature taken at a bound of the fit interval (temperature.json), or None."""
    if not temperature["boundary"]:
        return None
    return at_bound_warning(temperature["temperature"], temperature["boundary_side"], temperature["t_min"],
                            temperature["t_max"])


def run_warnings(audit_accuracy: float, k: int, temperature: dict[str, Any]) -> list[str]:
    """Every warning the audit accuracy (of k classes) and the fitted temperature call for, in order."""
    return [w for w in (below_chance(audit_accuracy, k), at_bound(temperature)) if w is not None]


def truncation_summary(full_token_count: NDArray[np.int64], truncated: NDArray[np.bool_],
                       max_length: int) -> dict[str, int]:
    """One pool's rows cut to max_length, and the longest row's token count before the cut."""
    return {"rows": len(truncated), "truncated": int(np.count_nonzero(truncated)),
            "longest_tokens": int(full_token_count.max()) if len(full_token_count) else 0,
            "max_length": int(max_length)}
