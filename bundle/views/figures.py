"""The figures of a bundle, as deterministic PNG bytes, from its records (bundle/FORMAT.md
"Figures"): reliability diagrams of the audit pool from metrics.json (its bins), and a histogram
of top-label confidence from the audit pool's float32 logits and metrics.json's beta.

Determinism: the Agg canvas is used directly (no pyplot, no GUI backend), rcParams are reset to
matplotlib's built-in defaults for the duration of a render (a user's matplotlibrc or style has no
effect), the font is DejaVu Sans (shipped with matplotlib), size and dpi are fixed, and the PNG
carries no metadata text (no Software, no time). The same records, the same matplotlib version
and the same RENDERER_VERSION (bundle.views) give the same bytes.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator, Mapping
from typing import Any, cast

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from numpy.typing import NDArray

from bundle import layout
from bundle.layout import data_name

RELIABILITY = data_name(layout.RELIABILITY_FIGURE)
CONFIDENCE = data_name(layout.CONFIDENCE_FIGURE)
FIGURES = (RELIABILITY, CONFIDENCE)
"""Paths, relative to data/, of every figure."""

DPI = 100
SIZE_RELIABILITY = (9.0, 5.4)
SIZE_CONFIDENCE = (6.4, 4.0)
HIST_BINS = 20
BLOCK_CELLS = 1 << 20
"""Logits handled at once by top_confidence (8 MB of float64 per temporary)."""
RC: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "path.simplify": False,
    "text.hinting": "default",
    "text.antialiased": True,
    "lines.antialiased": True,
    "patch.antialiased": True,
}
PNG_METADATA: dict[str, Any] = {"Software": None}
COLORS = {"raw": "#4c72b0", "calibrated": "#dd8452", "gap": "#c44e52", "ideal": "#555555"}


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata=PNG_METADATA)
    return buf.getvalue()


@contextlib.contextmanager
def _fresh_rc() -> Iterator[None]:
    """rcParams are matplotlib's built-in defaults plus RC inside, restored afterwards."""
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        cast(Any, matplotlib.rcParams).update(RC)
        yield


def _reliability_panel(ax: Any, cax: Any, m: dict[str, Any], label: str, color: str,
                       legend_above: bool = True) -> None:
    """Accuracy per bin against the diagonal (ax) and the rows in each bin (cax, below). The legend
    sits above the plot, clear of the bars (legend_above); records written before that layout keep
    theirs inside, lower right, so that their figures are drawn byte for byte as they were."""
    bins = m["bins"]
    lower = np.array([b["lower"] for b in bins])
    upper = np.array([b["upper"] for b in bins])
    width = upper - lower
    counts = np.array([b["count"] for b in bins])
    ax.plot([0, 1], [0, 1], linestyle="--", linewidth=1.0, color=COLORS["ideal"], label="perfect calibration")
    first = True
    for b, x, w in zip(bins, lower, width, strict=True):
        if not b["count"]:
            continue
        acc, conf = b["accuracy"], b["mean_confidence"]
        ax.bar(x, acc, width=w, align="edge", color=color, edgecolor="black", linewidth=0.6,
               label="accuracy in bin" if first else None)
        ax.bar(x, conf - acc, bottom=acc, width=w, align="edge", color="none",
               edgecolor=COLORS["gap"], hatch="//", linewidth=0.6,
               label="gap to mean confidence" if first else None)
        first = False
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.set_ylabel("accuracy")
    ax.text(0.03, 0.97, f"ECE {m['ece']:.4f}\nMCE {m['mce']:.4f}\naccuracy {m['accuracy']:.4f}\n"
            f"n = {m['n']}", transform=ax.transAxes, ha="left", va="top", fontsize=8)
    if legend_above:
        ax.set_title(label, pad=22)
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=7, frameon=False,
                  borderaxespad=0.2, columnspacing=1.2)
    else:
        ax.set_title(label)
        ax.legend(loc="lower right", fontsize=7, frameon=False)
    ax.tick_params(labelbottom=False)
    cax.bar(lower, counts, width=width, align="edge", color=color, edgecolor="black", linewidth=0.6)
    top = max(int(counts.max()), 1)
    for x, w, c in zip(lower, width, counts, strict=True):
        cax.text(x + w / 2, c + 0.04 * top, str(int(c)), ha="center", va="bottom", fontsize=7)
    cax.set_xlim(0.0, 1.0)
    cax.set_ylim(0.0, top * 1.35)
    cax.set_xticks(np.linspace(0, 1, 6))
    cax.set_xlabel("top-label confidence")
    cax.set_ylabel("rows")


def reliability_png(audit: dict[str, Any], temperature: float, legend_above: bool = True) -> bytes:
    """Raw and calibrated reliability diagrams side by side, with the rows in each bin below.

    `audit` is metrics.json's pools.audit ({"raw": M, "calibrated": M}); `legend_above` as in
    `_reliability_panel`."""
    with _fresh_rc():
        return _png(reliability_figure(audit, temperature, legend_above))


def reliability_figure(audit: dict[str, Any], temperature: float, legend_above: bool = True) -> Figure:
    """The figure reliability_png draws (call it where the rcParams are RC's, as there)."""
    fig = Figure(figsize=SIZE_RELIABILITY, dpi=DPI)
    axes = fig.subplots(2, 2, sharex="col", gridspec_kw={"height_ratios": [3, 1]})
    _reliability_panel(axes[0, 0], axes[1, 0], audit["raw"], "raw (T = 1)", COLORS["raw"], legend_above)
    _reliability_panel(axes[0, 1], axes[1, 1], audit["calibrated"],
                       f"calibrated (T = {temperature:.4f})", COLORS["calibrated"], legend_above)
    fig.suptitle("Reliability, audit pool (10 equal-width confidence bins)", fontsize=11)
    fig.tight_layout()
    return fig


def top_confidence(logits: NDArray[np.float64], beta: float) -> NDArray[np.float64]:
    """Probability of the first-argmax label under softmax(beta * logits), float64.

    The softmax is written out here, operation for operation as the job's fit computes it (max
    shift, exp, sum, log, exp): a last-bit difference may move a row across a histogram edge. It
    runs in blocks of about BLOCK_CELLS logits, so its temporaries stay small for any pool; each
    row is computed exactly as it would be alone."""
    top: NDArray[np.float64] = np.empty(len(logits), dtype=np.float64)
    step = max(1, BLOCK_CELLS // max(logits.shape[1], 1))
    for start in range(0, len(logits), step):
        block = logits[start:start + step]
        z = beta * block
        shifted = z - z.max(axis=1, keepdims=True)
        p = np.exp(shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True)))
        top[start:start + step] = p[np.arange(len(p)), block.argmax(axis=1)]
    return top


def confidence_png(logits: NDArray[np.float64], beta: float) -> bytes:
    """Histogram (HIST_BINS equal bins on [0, 1]) of top-label confidence, raw vs calibrated."""
    edges = np.linspace(0.0, 1.0, HIST_BINS + 1)
    with _fresh_rc():
        fig = Figure(figsize=SIZE_CONFIDENCE, dpi=DPI)
        ax = fig.subplots()
        for name, b in (("raw", 1.0), ("calibrated", beta)):
            counts, _ = np.histogram(top_confidence(logits, b), bins=edges)
            ax.stairs(counts, edges, color=COLORS[name], linewidth=1.5,
                      label=f"{name} (T = {1.0 / b:.4f})")
        k = logits.shape[1]
        ax.axvline(1.0 / k, color=COLORS["ideal"], linestyle=":", linewidth=1.0, label=f"1/K = {1.0 / k:.3f}")
        ax.set_xlim(0.0, 1.0)
        ax.set_xlabel("top-label confidence")
        ax.set_ylabel("rows")
        ax.set_title(f"Confidence, audit pool (n = {len(logits)}, {HIST_BINS} bins)")
        ax.legend(loc="upper left", fontsize=8, frameon=False)
        fig.tight_layout()
        return _png(fig)


def render_figures(metrics: Mapping[str, Any], audit_logits: NDArray[np.float64]) -> dict[str, bytes]:
    """{path relative to data/: PNG bytes} for every figure, from the parsed metrics.json and the
    audit pool's logits (the float32 values of its predictions file, as float64, in pool order)."""
    # metrics.json records with `truncation` were written since the legend moved above the plots.
    return {
        RELIABILITY: reliability_png(metrics["pools"]["audit"], float(metrics["temperature"]),
                                     legend_above="truncation" in metrics),
        CONFIDENCE: confidence_png(audit_logits, float(metrics["beta"])),
    }
