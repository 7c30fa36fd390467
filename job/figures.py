"""The figures of the payload in a data directory: the job's side of bundle.views.figures.

The PNGs are drawn by bundle/views/figures.py, the same code the verifier draws them with; this
module reads their inputs from the bundle's files: metrics.json and the audit pool's float32
logits (data/predictions/audit.parquet).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bundle import layout
from bundle.canonical import loads_strict
from bundle.layout import data_name
from bundle.views.figures import FIGURES, confidence_png, reliability_png
from bundle.views.figures import render_figures as render
from job.predictions import read_logits

__all__ = ["FIGURES", "confidence_png", "reliability_png", "render_figures"]


def render_figures(data_dir: Path) -> dict[str, bytes]:
    """{path relative to data/: PNG bytes} for every figure, from the bundle's own files."""
    metrics = loads_strict((data_dir / data_name(layout.METRICS_JSON)).read_bytes(), source=layout.METRICS_JSON)
    logits32, _ = read_logits(data_dir / data_name(layout.AUDIT_PREDICTIONS))
    return render(metrics, logits32.astype(np.float64))
