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
from dataclasses import dataclass
from typing import Any, cast

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.layout_engine import PlaceHolderLayoutEngine
from numpy.typing import NDArray

from bundle import layout
from bundle.layout import data_name
from bundle.memo import memoized
from bundle.views.smooth import smooth_curve

RELIABILITY = data_name(layout.RELIABILITY_FIGURE)
CONFIDENCE = data_name(layout.CONFIDENCE_FIGURE)
FIGURES = (RELIABILITY, CONFIDENCE)
"""Paths, relative to data/, of every figure."""

DPI = 100
SIZE_RELIABILITY = (9.0, 5.4)
SIZE_RELIABILITY_CLASSWISE = (13.5, 5.4)
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
    """The figure's PNG bytes, drawn once (call it where the rcParams are RC's, inside _fresh_rc).

    Figure.tight_layout() leaves a placeholder layout engine behind, and savefig then runs a whole
    draw without rendering before the real one ("so that CL works"). The placeholder lays nothing
    out, so it is dropped first: the same bytes (every committed golden figure) from one draw, about
    15% less CPU per figure."""
    FigureCanvasAgg(fig)
    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        fig.set_layout_engine(None)  # None under RC: no autolayout, no constrained layout
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


@dataclass(frozen=True)
class Estimates:
    """What a record with pre-registered estimators adds to one reliability panel: each bin's
    Clopper-Pearson interval (None for an empty bin), and the smoothed reliability curve with its
    bootstrap band (bundle.views.smooth) at the smooth ECE's bandwidth."""

    intervals: list[tuple[float, float] | None] | None
    smooth: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]] | None
    smooth_ece: float | None
    bandwidth: float | None
    classwise: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]] | None = None


def classwise_bins(logits: NDArray[np.float64], labels: NDArray[np.int64], beta: float
                   ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """Every class's probability p_k against 1[y = k], all classes pooled, in the protocol's 10
    left-closed bins (the last holding 1.0): per bin the mean p_k, the frequency of y = k (NaN
    for an empty bin) and the count of (row, class) pairs."""
    edges = np.arange(11) / 10.0
    total = np.zeros(10)
    hits = np.zeros(10)
    count = np.zeros(10, dtype=np.int64)
    step = max(1, BLOCK_CELLS // max(logits.shape[1], 1))
    for start in range(0, len(logits), step):
        z = beta * logits[start:start + step]
        shifted = z - z.max(axis=1, keepdims=True)
        p = np.exp(shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True)))
        onehot = np.zeros_like(p)
        onehot[np.arange(len(p)), labels[start:start + step]] = 1.0
        which = np.clip(np.searchsorted(edges, p.ravel(), side="right") - 1, 0, 9)
        total += np.bincount(which, weights=p.ravel(), minlength=10)
        hits += np.bincount(which, weights=onehot.ravel(), minlength=10)
        count += np.bincount(which, minlength=10)
    safe = np.where(count > 0, count, 1)
    return (np.where(count > 0, total / safe, np.nan), np.where(count > 0, hits / safe, np.nan), count)


def _reliability_panel(ax: Any, cax: Any, m: dict[str, Any], label: str, color: str,
                       legend_above: bool = True, extra: Estimates | None = None) -> None:
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
    summary = f"ECE {m['ece']:.4f}\nMCE {m['mce']:.4f}\naccuracy {m['accuracy']:.4f}\nn = {m['n']}"
    if extra is not None:
        _estimates(ax, bins, extra, color)
        if extra.smooth_ece is not None:
            summary += f"\nsmooth ECE {extra.smooth_ece:.4f}"
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.set_ylabel("accuracy")
    ax.text(0.03, 0.97, summary, transform=ax.transAxes, ha="left", va="top", fontsize=8)
    if legend_above:
        ax.set_title(label, pad=22 if extra is None else 44)
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3 if extra is None else 2, fontsize=7,
                  frameon=False, borderaxespad=0.2, columnspacing=1.2)
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


def _estimates(ax: Any, bins: list[dict[str, Any]], extra: Estimates, color: str) -> None:
    """Clopper-Pearson whiskers at the bins' centres and the smoothed curve with its band."""
    if extra.smooth is not None:
        t, curve, low, high = extra.smooth
        ax.fill_between(t, low, high, color=color, alpha=0.25, linewidth=0, label="95% bootstrap band")
        ax.plot(t, curve, color="black", linewidth=1.2, label=f"smoothed (sigma = {extra.bandwidth:.3f})")
    if extra.intervals is not None:
        first = True
        for b, interval in zip(bins, extra.intervals, strict=True):
            if interval is None or not b["count"]:
                continue
            x, acc = (b["lower"] + b["upper"]) / 2, b["accuracy"]
            ax.errorbar([x], [acc], yerr=[[acc - interval[0]], [interval[1] - acc]], fmt="none", ecolor="black",
                        elinewidth=1.0, capsize=3, label="Clopper-Pearson 95%" if first else None)
            first = False


def _classwise_panel(ax: Any, cax: Any, extras: Mapping[str, Estimates], temperature: float) -> None:
    """Every class's probability against its frequency, raw and calibrated (K > 2 only)."""
    ax.plot([0, 1], [0, 1], linestyle="--", linewidth=1.0, color=COLORS["ideal"], label="perfect calibration")
    edges = np.arange(11) / 10.0
    for scale, label in (("raw", "raw (T = 1)"), ("calibrated", f"calibrated (T = {temperature:.4f})")):
        bins = extras[scale].classwise
        assert bins is not None
        mean_p, freq, count = bins
        ax.plot(mean_p, freq, marker="o", markersize=3, linewidth=1.2, color=COLORS[scale], label=label)
        cax.stairs(count, edges, color=COLORS[scale], linewidth=1.2)
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.set_ylabel("frequency of the class")
    ax.set_title("classwise, every class pooled", pad=44)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=1, fontsize=7, frameon=False, borderaxespad=0.2)
    ax.tick_params(labelbottom=False)
    cax.set_yscale("symlog", linthresh=1.0)
    cax.set_xlim(0.0, 1.0)
    cax.set_xticks(np.linspace(0, 1, 6))
    cax.set_xlabel("class probability")
    cax.set_ylabel("pairs")


def estimates_of(metrics: Mapping[str, Any], audit_logits: NDArray[np.float64],
                 audit_labels: NDArray[np.int64] | None) -> dict[str, Estimates] | None:
    """Per scale (raw, calibrated), what metrics.json's estimators add to the figure; None for a
    record without them (drawn exactly as before they existed). The smoothed curve needs the
    audit labels; without them it is left out."""
    record = metrics.get("estimators")
    if record is None:
        return None
    results = record["results"]
    intervals = next((r for r in results.values() if r["kind"] == "bin-intervals"), None)
    smooth = next((r for r in results.values() if r["kind"] == "smooth-ece"), None)
    out = {}
    for scale, beta in (("raw", 1.0), ("calibrated", float(metrics["beta"]))):
        curve = None
        if smooth is not None and audit_labels is not None:
            correct = (audit_logits.argmax(axis=1) == audit_labels).astype(np.float64)
            curve = smooth_curve(top_confidence(audit_logits, beta), correct, float(smooth[scale]["bandwidth"]),
                                 int(record["seed"]), int(record["resamples"]))
        out[scale] = Estimates(
            intervals=None if intervals is None else [
                None if b["lower"] is None else (float(b["lower"]), float(b["upper"]))
                for b in intervals[scale]["bins"]],
            smooth=curve, smooth_ece=None if smooth is None else smooth[scale]["value"],
            bandwidth=None if smooth is None else smooth[scale]["bandwidth"],
            classwise=(classwise_bins(audit_logits, audit_labels, beta)
                       if audit_labels is not None and audit_logits.shape[1] > 2 else None))
    return out


def reliability_png(audit: dict[str, Any], temperature: float, legend_above: bool = True,
                    extras: Mapping[str, Estimates] | None = None) -> bytes:
    """Raw and calibrated reliability diagrams side by side, with the rows in each bin below.

    `audit` is metrics.json's pools.audit ({"raw": M, "calibrated": M}); `legend_above` as in
    `_reliability_panel`; `extras` (estimates_of) adds the estimators' whiskers and curves."""
    with _fresh_rc():
        return _png(reliability_figure(audit, temperature, legend_above, extras))


def reliability_figure(audit: dict[str, Any], temperature: float, legend_above: bool = True,
                       extras: Mapping[str, Estimates] | None = None) -> Figure:
    """The figure reliability_png draws (call it where the rcParams are RC's, as there)."""
    classwise = extras is not None and extras["raw"].classwise is not None
    fig = Figure(figsize=SIZE_RELIABILITY_CLASSWISE if classwise else SIZE_RELIABILITY, dpi=DPI)
    axes = fig.subplots(2, 3 if classwise else 2, sharex="col", gridspec_kw={"height_ratios": [3, 1]})
    _reliability_panel(axes[0, 0], axes[1, 0], audit["raw"], "raw (T = 1)", COLORS["raw"], legend_above,
                       None if extras is None else extras["raw"])
    _reliability_panel(axes[0, 1], axes[1, 1], audit["calibrated"],
                       f"calibrated (T = {temperature:.4f})", COLORS["calibrated"], legend_above,
                       None if extras is None else extras["calibrated"])
    if classwise:
        assert extras is not None
        _classwise_panel(axes[0, 2], axes[1, 2], extras, temperature)
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


def figure_records(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a parsed metrics.json the figures are drawn from, in the record's own shape: the
    audit pool's metric sets, the temperature and beta, whether the record has `truncation` (where
    the legend sits), and of its estimators the seed, the resamples and the bin-interval and
    smooth-ECE results, in their order. draw_figures draws the same bytes from this part as from
    the whole record."""
    part: dict[str, Any] = {"pools": {"audit": metrics["pools"]["audit"]}, "temperature": metrics["temperature"],
                            "beta": metrics["beta"]}
    if "truncation" in metrics:
        part["truncation"] = True  # only whether it is there is drawn
    record = metrics.get("estimators")
    if record is not None:
        part["estimators"] = {"seed": record["seed"], "resamples": record["resamples"], "results": {
            entry_id: entry for entry_id, entry in record["results"].items()
            if entry["kind"] in ("bin-intervals", "smooth-ece")}}
    return part


def _reliability_of(metrics: Mapping[str, Any], audit_logits: NDArray[np.float64],
                    audit_labels: NDArray[np.int64] | None) -> bytes:
    # metrics.json records with `truncation` were written since the legend moved above the plots.
    return reliability_png(metrics["pools"]["audit"], float(metrics["temperature"]),
                           legend_above="truncation" in metrics,
                           extras=estimates_of(metrics, audit_logits, audit_labels))


def draw_figures(metrics: Mapping[str, Any], audit_logits: NDArray[np.float64],
                 audit_labels: NDArray[np.int64] | None = None) -> dict[str, bytes]:
    """{path relative to data/: PNG bytes} for every figure, from the parsed metrics.json and the
    audit pool's logits (the float32 values of its predictions file, as float64, in pool order)
    and labels (needed for the smoothed curve of a record with estimators), drawn now."""
    return {RELIABILITY: _reliability_of(metrics, audit_logits, audit_labels),
            CONFIDENCE: confidence_png(audit_logits, float(metrics["beta"]))}


_remembered_reliability = memoized(_reliability_of)
_remembered_confidence = memoized(confidence_png)


def render_figures(metrics: Mapping[str, Any], audit_logits: NDArray[np.float64],
                   audit_labels: NDArray[np.int64] | None = None) -> dict[str, bytes]:
    """draw_figures, each figure drawn once per process for the same inputs (bundle/memo.py): what
    the job writes and the verifier requires, byte for byte. The reliability diagram is remembered
    by figure_records(metrics), so records that differ only where no figure looks (a warning, a
    label map, an estimator the figures do not show) share one drawing; the confidence histogram by
    the logits and beta alone."""
    return {RELIABILITY: _remembered_reliability(figure_records(metrics), audit_logits, audit_labels),
            CONFIDENCE: _remembered_confidence(audit_logits, float(metrics["beta"]))}
