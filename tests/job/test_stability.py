"""The calibration-size stability study (job/stability.py): nesting, refits that agree with
job.calibration, skipped sizes, the record, and that it never touches the temperature."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import jsonschema
import numpy as np

from bundle.canonical import dumps
from job.calibration import fit_temperature, mean_nll
from job.predictions import read_logits
from job.protocol import FitSpec, StabilitySpec, load_protocol
from job.stability import size_curve

FIT = FitSpec(t_min=0.05, t_max=20.0, steps=60)

REPO = Path(__file__).resolve().parents[2]
from tests.payload import stability_from_files


def validate(doc: dict, name: str) -> None:
    schema = json.loads((REPO / "schemas" / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(doc)


def overconfident(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    z = rng.normal(size=(n, 2)) * 4
    z[np.arange(n), y] += 1.5
    return z, y.astype(np.int64)


def test_nested_first_m_rows_and_skipped_sizes():
    cz, cy = overconfident(100, 0)
    az, ay = overconfident(70, 1)
    entries, skipped = size_curve(cz, cy, az, ay, [64, 16, 200, 100, 32], FIT)
    assert [e["m"] for e in entries] == [16, 32, 64, 100] and skipped == [200]
    for e in entries:
        fit = fit_temperature(cz[: e["m"]], cy[: e["m"]], 0.05, 20.0, 60)
        assert e["beta"] == fit.beta and e["temperature"] == fit.temperature
        assert e["boundary"] == fit.boundary and e["boundary_side"] == fit.boundary_side
        assert e["calibration_nll_after"] == fit.nll_after
        assert e["audit_nll"] == mean_nll(az, ay, fit.beta)
    # the whole pool reproduces the main fit exactly
    full = fit_temperature(cz, cy, 0.05, 20.0, 60)
    assert entries[-1]["temperature"] == full.temperature


def test_the_curve_does_not_depend_on_rows_after_m():
    cz, cy = overconfident(80, 2)
    az, ay = overconfident(40, 3)
    a, _ = size_curve(cz, cy, az, ay, [20, 40], FIT)
    cz2 = cz.copy()
    cz2[40:] = -cz2[40:]
    b, _ = size_curve(cz2, cy, az, ay, [20, 40], FIT)
    assert a == b


def test_record_from_the_payload_files(tiny_data: Path):
    protocol = load_protocol(tiny_data / "protocol.json")
    doc = copy.deepcopy(protocol.doc)
    n_cal = json.loads((tiny_data / "temperature.json").read_text())["n"]
    doc["stability"]["sizes"] = [5, 10, n_cal, 256]
    before = hashlib.sha256((tiny_data / "temperature.json").read_bytes()).hexdigest()
    rec = stability_from_files(StabilitySpec.from_protocol(doc["stability"]), protocol.fit, protocol.sha256, tiny_data)
    validate(rec, "stability")
    dumps(rec)
    assert [e["m"] for e in rec["sizes"]] == [5, 10, n_cal] and rec["skipped_sizes"] == [256]
    temperature = json.loads((tiny_data / "temperature.json").read_text())
    assert rec["sizes"][-1]["temperature"] == temperature["temperature"]
    assert rec["temperature_sha256"] == before
    assert hashlib.sha256((tiny_data / "temperature.json").read_bytes()).hexdigest() == before
    az, ay = read_logits(tiny_data / "predictions" / "audit.parquet")
    assert rec["audit_nll_raw"] == mean_nll(az.astype(np.float64), ay, 1.0)
    assert rec["calibration_n"] == n_cal and rec["audit_n"] == len(ay)


def test_protocol_sizes_larger_than_the_tiny_pool_are_all_skipped(tiny_data: Path):
    protocol = load_protocol(tiny_data / "protocol.json")
    doc = json.loads(json.dumps(protocol.doc))
    doc["stability"]["sizes"] = load_protocol().doc["stability"]["sizes"]  # the formal 32..256
    rec = stability_from_files(StabilitySpec.from_protocol(doc["stability"]), protocol.fit, protocol.sha256, tiny_data)
    validate(rec, "stability")
    assert rec["sizes"] == [] and rec["skipped_sizes"] == sorted(doc["stability"]["sizes"])
