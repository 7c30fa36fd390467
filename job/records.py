"""The records the run's stages write into data/, built from what the stages computed: the pools,
the temperature and its trajectory, the metrics and each stage's record. Pure functions of their
inputs, so the run (job.pipeline) and a reproduction recomputing the published figures
(job.reproduced_figures) build every record the same way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from job.calibration import TemperatureFit, softmax
from job.dataset import Rows
from job.errors import JobError
from job.estimators import estimators_record
from job.metrics import compute_metrics
from job.perclass import class_warnings, per_class
from job.plausibility import run_warnings, truncation_summary
from job.predictions import Predictions
from job.protocol import AUDIT, Protocol
from job.protocol import CALIBRATION as CAL
from job.resources import Resources
from job.split import Pool
from job.tolerance_bounds import fit_of, reproduction_bounds

__all__ = ["metrics_record", "pools_record", "stage_record", "temperature_record", "trajectory_record"]


def pools_record(protocol: Protocol, resources: Resources, rows: Rows, pools: dict[str, Pool]) -> dict[str, Any]:
    """data/pools.json: every pool's rows (idx, split key, text hash) and sizes; raises JobError when
    two pools share a row."""
    members: dict[str, list[dict[str, Any]]] = {
        name: [{"idx": int(rows.ids[p]), "split_key": k, "text_sha256": rows.text_sha256[p]}
               for p, k in zip(pool.positions, pool.keys, strict=True)]
        for name, pool in pools.items()
    }
    seen: set[int] = set()
    for entries in members.values():
        ids = {int(e["idx"]) for e in entries}
        if seen & ids:
            raise JobError("The pools overlap; the split rule must give disjoint pools.")
        seen |= ids
    return {
        "protocol_sha256": protocol.sha256,
        "dataset_sha256": resources.dataset.files[0].sha256,
        "prefix": protocol.prefix,
        "pools": members,
        "sizes": {name: len(pool.positions) for name, pool in pools.items()},
    }


def temperature_record(protocol: Protocol, fit: TemperatureFit, n: int, predictions_sha256: str) -> dict[str, Any]:
    """data/temperature.json: the fitted temperature on the `n` calibration rows of the named predictions."""
    f = protocol.fit
    return {
        "protocol_sha256": protocol.sha256, "pool": CAL, "n": n, "predictions_sha256": predictions_sha256,
        "temperature": fit.temperature, "beta": fit.beta, "t_min": f.t_min,
        "t_max": f.t_max, "steps": f.steps, "boundary": fit.boundary,
        "boundary_side": fit.boundary_side, "final_gradient": fit.final_gradient,
        "bracket": list(fit.bracket), "nll_before": fit.nll_before, "nll_after": fit.nll_after,
    }


def trajectory_record(protocol: Protocol, fit: TemperatureFit) -> dict[str, Any]:
    """data/trajectory.json: every bisection step of the fit and the gradient at the bracket's ends."""
    return {
        "protocol_sha256": protocol.sha256,
        "beta_min": protocol.fit.beta_min, "beta_max": protocol.fit.beta_max,
        "g_at_beta_min": fit.g_at_beta_min, "g_at_beta_max": fit.g_at_beta_max,
        "steps": [{"step": s.step, "lo": s.lo, "hi": s.hi, "mid": s.mid, "g": s.g} for s in fit.steps],
    }


def metrics_record(protocol: Protocol, predictions: Mapping[str, Predictions], beta: float,
                   temperature: dict[str, Any], temperature_sha256: str) -> dict[str, Any]:
    """Raw and calibrated metrics of both pools, computed from the float32 logits as written; the
    warnings the audit accuracy and the fitted temperature call for; each pool's truncation.
    `predictions`: both pools' records by pool name."""
    pools: dict[str, Any] = {}
    unchanged = True
    logits = {name: predictions[name].logits.astype(np.float64) for name in (AUDIT, CAL)}
    for name, role in ((AUDIT, "evidence"), (CAL, "fit pool, not evidence")):
        pred = predictions[name]
        z = logits[name]
        unchanged &= bool((softmax(beta * z).argmax(axis=1) == z.argmax(axis=1)).all())
        pools[name] = {
            "role": role, "predictions_sha256": pred.sha256,
            "raw": compute_metrics(z, pred.labels, 1.0, protocol.threshold),
            "calibrated": compute_metrics(z, pred.labels, beta, protocol.threshold),
        }
    audit = pools[AUDIT]["raw"]
    max_length = protocol.inference.max_length
    classes = {name: per_class(logits[name], predictions[name].labels) for name in (AUDIT, CAL)}
    tau, source = protocol.logit_tolerance
    bounds = reproduction_bounds({name: (logits[name], predictions[name].labels) for name in (AUDIT, CAL)},
                                 pools, beta, tau, source, fit_of(protocol))
    record = {"protocol_sha256": protocol.sha256, "temperature_sha256": temperature_sha256,
              "beta": beta, "temperature": 1.0 / beta, "argmax_unchanged": unchanged, "pools": pools,
              "warnings": (run_warnings(audit["accuracy"], len(protocol.resources.dataset.labels), temperature)
                           + class_warnings(classes[AUDIT])),
              "per_class": classes, "reproduction_bounds": bounds,
              "truncation": {name: truncation_summary(predictions[name].full_token_count,
                                                      predictions[name].truncated, max_length)
                             for name in (AUDIT, CAL)}}
    if protocol.estimators:
        boot = protocol.bootstrap
        record["estimators"] = estimators_record(
            protocol.estimators, AUDIT, logits[AUDIT], predictions[AUDIT].labels,
            beta, boot.resamples if boot else 0, boot.seed if boot else 0)
    return record


def stage_record(protocol: Protocol, name: str, consumed: dict[str, str], produced: dict[str, str]) -> dict[str, Any]:
    """One entry of data/stages.json: the stage, and the files it read and wrote with their sha256."""
    return {"name": name, "protocol_sha256": protocol.sha256, "consumed": consumed, "produced": produced}
