"""The words the format's records and the verifier share: the warnings a run carries
(metrics.json `warnings`, FORMAT.md "metrics.json") and the verdict of a change's interval
(bootstrap.json and estimators.json `verdict`).

Only the wording and the verdict rule live here. Whether a warning is called for is decided by the
job from its own numbers (job/plausibility.py) and decided again by the verifier from the logits
and records it has checked (verify/plausibility.py); the recorded list must equal the verifier's."""

from __future__ import annotations

from typing import Final

__all__ = ["DECREASE", "INCREASE", "NO_CLAIM", "at_bound_warning", "below_chance_warning", "interval_verdict"]

DECREASE: Final = "decrease"
INCREASE: Final = "increase"
NO_CLAIM: Final = "no claim"


def interval_verdict(lower: float, upper: float) -> str:
    """'decrease' if the interval of a change is wholly below 0, 'increase' if wholly above, else
    'no claim'."""
    if upper < 0:
        return DECREASE
    if lower > 0:
        return INCREASE
    return NO_CLAIM


def below_chance_warning(accuracy: float, chance: float) -> str:
    """The warning of an audit accuracy below chance (1/K)."""
    return f"accuracy {accuracy:.1%} is below chance ({chance:.1%}): the label map is probably wrong"


def at_bound_warning(temperature: float, side: str, t_min: float, t_max: float) -> str:
    """The warning of a temperature taken at the bound `side` of the fit interval [t_min, t_max]."""
    return (f"T = {temperature:g} sits at the bound {side} of the fit interval [{t_min:g}, {t_max:g}]: no "
            "temperature inside it fits, which usually means a wrong label map or a broken model")
