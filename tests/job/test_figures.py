"""Figures (bundle/views/figures.py): deterministic PNG bytes, no metadata, independent of a user's rcParams."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import matplotlib
import numpy as np

from bundle.views.figures import FIGURES, confidence_png, reliability_png
from job.metrics import compute_metrics
from tests.payload import figures_of

REPO = Path(__file__).resolve().parents[2]


def chunks(png: bytes) -> list[bytes]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    out, pos = [], 8
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        out.append(png[pos + 4:pos + 8])
        pos += 12 + length
    return out


def test_two_renders_are_byte_identical(tiny_data: Path):
    a, b = figures_of(tiny_data, fresh=True), figures_of(tiny_data, fresh=True)
    assert set(a) == set(FIGURES)
    for path in FIGURES:
        assert a[path] == b[path], path


def test_no_metadata_text_or_time_in_the_png(tiny_data: Path):
    for path, png in figures_of(tiny_data).items():
        kinds = set(chunks(png))
        assert not kinds & {b"tEXt", b"iTXt", b"zTXt", b"tIME"}, (path, kinds)
        assert b"matplotlib" not in png.lower()


def test_a_users_rcparams_change_nothing_and_are_restored(tiny_data: Path):
    reference = figures_of(tiny_data, fresh=True)
    with matplotlib.rc_context({"font.size": 23.0, "axes.facecolor": "#ffeeaa", "lines.linewidth": 4}):
        again = figures_of(tiny_data, fresh=True)
        assert matplotlib.rcParams["font.size"] == 23.0
    assert again == reference


def test_a_fresh_interpreter_renders_the_same_bytes(tiny_data: Path, tmp_path: Path):
    code = ("import sys; from pathlib import Path; from tests.payload import figures_of; "
            "out = Path(sys.argv[2]); "
            "[(out / p.replace('/', '_')).write_bytes(b) for p, b in figures_of(Path(sys.argv[1])).items()]")
    env = {**os.environ, "PYTHONHASHSEED": "123", "MPLBACKEND": "svg"}
    subprocess.run([sys.executable, "-c", code, str(tiny_data), str(tmp_path)], check=True, cwd=REPO,
                   env=env, timeout=120)
    for path, png in figures_of(tiny_data, fresh=True).items():
        assert (tmp_path / path.replace("/", "_")).read_bytes() == png, path


def test_k_classes_and_empty_bins_render():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(30, 3)) * 5
    y = rng.integers(0, 3, 30)
    m = {"raw": compute_metrics(z, y, 1.0, 0.9), "calibrated": compute_metrics(z, y, 0.5, 0.9)}
    assert reliability_png(m, 2.0) == reliability_png(m, 2.0)
    assert confidence_png(z, 0.5)[:8] == b"\x89PNG\r\n\x1a\n"


def test_each_figure_is_drawn_once_whatever_the_users_layout_settings(monkeypatch) -> None:
    """savefig after tight_layout used to lay the whole figure out a second time; the PNG is drawn
    once, and a user's autolayout or constrained layout changes neither that nor the bytes."""
    from matplotlib.figure import Figure

    rng = np.random.default_rng(1)
    z = rng.normal(size=(30, 3)) * 5
    y = rng.integers(0, 3, 30)
    m = {"raw": compute_metrics(z, y, 1.0, 0.9), "calibrated": compute_metrics(z, y, 0.5, 0.9)}
    draws: list[Figure] = []
    original = Figure.draw

    def counting(self: Figure, renderer: object) -> None:
        draws.append(self)
        original(self, renderer)

    monkeypatch.setattr(Figure, "draw", counting)
    reference = (reliability_png(m, 2.0), confidence_png(z, 0.5))
    assert len(draws) == 2
    for rc in ({"figure.autolayout": True}, {"figure.constrained_layout.use": True}):
        with matplotlib.rc_context(rc):
            assert (reliability_png(m, 2.0), confidence_png(z, 0.5)) == reference
    assert len(draws) == 6


def test_estimators_add_whiskers_and_the_smoothed_curve_and_nothing_else_changes(tmp_path: Path) -> None:
    """A record with estimators gets Clopper-Pearson whiskers and the smoothed curve with its band
    (drawn only with the labels); the same record without them is drawn as before they existed."""
    import json

    from bundle.views.figures import RELIABILITY, estimates_of, render_figures
    from bundle.views.smooth import smooth_curve
    from tests.payload import predictions_of
    from tests.synthetic import write_payload

    write_payload(tmp_path / "data", sizes=(8, 40, 60))
    metrics = json.loads((tmp_path / "data" / "metrics.json").read_text())
    audit = predictions_of(tmp_path / "data", "audit")
    z = audit.logits.astype(np.float64)
    with_all = render_figures(metrics, z, audit.labels)[RELIABILITY]
    without_labels = render_figures(metrics, z)[RELIABILITY]
    plain = {k: v for k, v in metrics.items() if k != "estimators"}
    assert len({with_all, without_labels, render_figures(plain, z, audit.labels)[RELIABILITY]}) == 3
    assert render_figures(plain, z, audit.labels)[RELIABILITY] == reliability_png(
        metrics["pools"]["audit"], metrics["temperature"], legend_above=True)
    extras = estimates_of(metrics, z, audit.labels)
    assert extras is not None
    bins = metrics["estimators"]["results"]["bin-intervals"]["calibrated"]["bins"]
    assert extras["calibrated"].intervals == [None if b["lower"] is None else (b["lower"], b["upper"]) for b in bins]
    t, curve, low, high = extras["raw"].smooth
    drawn = ~np.isnan(curve)
    assert drawn.any() and np.all(low[drawn] <= curve[drawn] + 1e-12) and np.all(curve[drawn] <= high[drawn] + 1e-12)
    # One row right at confidence c and one wrong at 1 - c: the curve is 1/2 between them.
    t, curve, _, _ = smooth_curve(np.array([0.3, 0.7]), np.array([1.0, 0.0]), 0.3, 1, 0)
    assert t[50] == 0.5 and abs(curve[50] - 0.5) < 1e-15 and curve[30] > 0.5 > curve[70]


def test_the_classwise_panel_pools_every_class_in_the_protocols_bins() -> None:
    from bundle.views.figures import classwise_bins
    from job.calibration import softmax

    rng = np.random.default_rng(4)
    z = rng.normal(size=(50, 4)) * 2
    y = rng.integers(0, 4, 50)
    mean_p, freq, count = classwise_bins(z, y, 0.8)
    p = softmax(0.8 * z).ravel()
    hit = (np.arange(4)[None, :] == y[:, None]).ravel()
    which = np.minimum((p * 10).astype(int), 9)  # left-closed k/10 bins, 1.0 in the last
    for b in range(10):
        assert count[b] == (which == b).sum()
        if count[b]:
            assert abs(mean_p[b] - p[which == b].mean()) < 1e-15 and freq[b] == hit[which == b].mean()
        else:
            assert np.isnan(mean_p[b]) and np.isnan(freq[b])
