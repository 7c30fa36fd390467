"""Pre-registered calibration-size stability study: how the fitted temperature, and the audit NLL
at it, move with the size of the calibration pool. Descriptive only: the bundle's temperature is
always the one fitted on the whole calibration pool (temperature.json); nothing here feeds back.

Nesting: subset m is the first m rows of the calibration pool in pool order (ascending split key),
so every subset contains the smaller ones. Each subset is fitted with job.calibration.
fit_temperature and the protocol's t_min, t_max and steps; the audit NLL is job.calibration.
mean_nll at the subset's beta. Sizes larger than the pool are skipped and listed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from job.calibration import fit_temperature, mean_nll
from job.predictions import Predictions
from job.protocol import FitSpec, StabilitySpec

F64 = NDArray[np.float64]


def size_curve(cal_logits: F64, cal_labels: NDArray[np.int64], audit_logits: F64,
               audit_labels: NDArray[np.int64], sizes: list[int] | tuple[int, ...], fit_spec: FitSpec,
               ) -> tuple[list[dict[str, Any]], list[int]]:
    """(one entry per size that fits in the pool, the sizes skipped), sizes in ascending order."""
    n = len(cal_labels)
    entries: list[dict[str, Any]] = []
    skipped: list[int] = []
    for m in sorted(sizes):
        if m > n:
            skipped.append(m)
            continue
        fit = fit_temperature(cal_logits[:m], cal_labels[:m], fit_spec.t_min, fit_spec.t_max, fit_spec.steps)
        entries.append({
            "m": m, "temperature": fit.temperature, "beta": fit.beta, "boundary": fit.boundary,
            "boundary_side": fit.boundary_side, "calibration_nll_after": fit.nll_after,
            "audit_nll": mean_nll(audit_logits, audit_labels, fit.beta),
        })
    return entries, skipped


def stability_record(spec: StabilitySpec, fit: FitSpec, protocol_sha256: str, cal: Predictions,
                     audit: Predictions, temperature_sha256: str) -> dict[str, Any]:
    """data/stability.json (schema stability/v1) from the two pools' predictions as written and the
    sha256 of temperature.json, under the protocol's `stability` and `fit` sections."""
    cy, ay = cal.labels, audit.labels
    cz, az = cal.logits.astype(np.float64), audit.logits.astype(np.float64)
    entries, skipped = size_curve(cz, cy, az, ay, spec.sizes, fit)
    return {
        "protocol_sha256": protocol_sha256,
        "role": "descriptive only; never used to choose the temperature",
        "nesting": "first m rows of the calibration pool in pool order (ascending split key)",
        "calibration_predictions_sha256": cal.sha256,
        "audit_predictions_sha256": audit.sha256,
        "temperature_sha256": temperature_sha256,
        "calibration_n": len(cy),
        "audit_n": len(ay),
        "t_min": fit.t_min, "t_max": fit.t_max, "steps": fit.steps,
        "audit_nll_raw": mean_nll(az, ay, 1.0),
        "sizes": entries,
        "skipped_sizes": skipped,
    }
