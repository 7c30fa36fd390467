"""Pre-registered calibration-size stability study: how the fitted temperature, and the audit NLL
at it, move with the size of the calibration pool. Descriptive only: the bundle's temperature is
always the one fitted on the whole calibration pool (temperature.json); nothing here feeds back.

Nesting: subset m is the first m rows of the calibration pool in pool order (ascending split key),
so every subset contains the smaller ones. Each subset is fitted with job.calibration.
fit_temperature and the protocol's t_min, t_max and steps; the audit NLL is job.calibration.
mean_nll at the subset's beta. Sizes larger than the pool are skipped and listed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bundle.digests import sha256_file
from job.calibration import fit_temperature, mean_nll
from job.predictions import read_logits

F64 = NDArray[np.float64]
CAL_REL = "predictions/calibration.parquet"
AUDIT_REL = "predictions/audit.parquet"


def size_curve(cal_logits: F64, cal_labels: NDArray[np.int64], audit_logits: F64,
               audit_labels: NDArray[np.int64], sizes: list[int], t_min: float, t_max: float,
               steps: int) -> tuple[list[dict[str, Any]], list[int]]:
    """(one entry per size that fits in the pool, the sizes skipped), sizes in ascending order."""
    n = len(cal_labels)
    entries: list[dict[str, Any]] = []
    skipped: list[int] = []
    for m in sorted(sizes):
        if m > n:
            skipped.append(m)
            continue
        fit = fit_temperature(cal_logits[:m], cal_labels[:m], t_min, t_max, steps)
        entries.append({
            "m": m, "temperature": fit.temperature, "beta": fit.beta, "boundary": fit.boundary,
            "boundary_side": fit.boundary_side, "calibration_nll_after": fit.nll_after,
            "audit_nll": mean_nll(audit_logits, audit_labels, fit.beta),
        })
    return entries, skipped


def stability_record(protocol_doc: dict[str, Any], protocol_sha256: str, data_dir: Path) -> dict[str, Any]:
    """data/stability.json (schema stability/v1) from the two predictions files and
    temperature.json, under the protocol's `stability` and `fit` sections."""
    spec, fit = protocol_doc["stability"], protocol_doc["fit"]
    t_min, t_max, steps = float(fit["t_min"]), float(fit["t_max"]), int(fit["steps"])
    c32, cy = read_logits(data_dir / CAL_REL)
    a32, ay = read_logits(data_dir / AUDIT_REL)
    cz, az = c32.astype(np.float64), a32.astype(np.float64)
    entries, skipped = size_curve(cz, cy, az, ay, [int(m) for m in spec["sizes"]], t_min, t_max, steps)
    return {
        "protocol_sha256": protocol_sha256,
        "role": "descriptive only; never used to choose the temperature",
        "nesting": "first m rows of the calibration pool in pool order (ascending split key)",
        "calibration_predictions_sha256": sha256_file(data_dir / CAL_REL),
        "audit_predictions_sha256": sha256_file(data_dir / AUDIT_REL),
        "temperature_sha256": sha256_file(data_dir / "temperature.json"),
        "calibration_n": len(cy),
        "audit_n": len(ay),
        "t_min": t_min, "t_max": t_max, "steps": steps,
        "audit_nll_raw": mean_nll(az, ay, 1.0),
        "sizes": entries,
        "skipped_sizes": skipped,
    }
