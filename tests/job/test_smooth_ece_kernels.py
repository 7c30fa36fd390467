"""Smooth ECE's bits do not depend on the BLAS kernel numpy's OpenBLAS selects for the machine.

numpy.convolve takes its dot products from OpenBLAS, whose kernel (chosen by CPU, or named by
OPENBLAS_CORETYPE) rounds differently: with it, a host run and a container run on one AMD EPYC
wrote metrics.json differing in smooth ECE's last bit. Each child here selects another kernel
before numpy loads; the job's smooth ECE must give the same bits in all of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import hashlib, json, sys
import numpy as np
sys.path.insert(0, {repo!r})
from job.estimator_spec import parse_estimators
from job.estimators import smooth_ece
rng = np.random.default_rng(7)
conf = rng.uniform(0.5, 1.0, 900)
correct = (rng.random(900) < conf * 0.9) * 1.0
spec = parse_estimators([{{"id": "s", "kind": "smooth-ece", "confidence": "top-label",
                          "bandwidth": "fixed-point", "eps": 0.001, "refine": 10, "mesh": 200}}], False)[0]
x, k = rng.random(3001), rng.random(1001)
print(json.dumps({{"smooth": smooth_ece(spec, conf, correct)[0].hex(),
                  "convolve": hashlib.sha256(np.convolve(x, k, "valid").tobytes()).hexdigest()}}))
"""


def _child(coretype: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    if coretype is not None:
        env["OPENBLAS_CORETYPE"] = coretype
    done = subprocess.run([sys.executable, "-c", CHILD.format(repo=str(REPO))], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_smooth_ece_has_the_same_bits_under_every_blas_kernel() -> None:
    found = {kind: _child(kind) for kind in (None, "Prescott")}  # the machine's own kernel; SSE3, on any x86-64
    assert len({f["smooth"] for f in found.values()}) == 1, found
    if len({f["convolve"] for f in found.values()}) == 1:
        pytest.skip("this machine's OpenBLAS kernels round numpy.convolve alike; the test sees nothing here")
