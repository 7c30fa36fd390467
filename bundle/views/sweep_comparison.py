"""A sweep's comparison view, from its signed index (bundle/FORMAT.md "Sweeps"): `sweep.md`, a
table of every planned member, and two figures, T per member and the audit ECE raw against
calibrated with the bootstrap interval of the change.

Like a bundle's views, these are pure functions of the records: the job writes them from the
index it signs, and the verifier renders them again from the index it has checked and requires
the files to be exactly these bytes. Every number shown is read from the index; failed members
are listed with their error, never left out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from matplotlib.figure import Figure

from bundle import layout
from bundle.views.figures import COLORS, DPI, _fresh_rc, _png
from bundle.views.markdown import text

SIZE_PER_MEMBER = 0.45  # inches of width per member in the figures
MIN_WIDTH, MAX_WIDTH, HEIGHT = 6.4, 40.0, 4.2
METRIC_LABELS = {"nll": "NLL", "ece": "ECE", "brier": "Brier"}


def _f(x: float) -> str:
    return format(x, ".6f")


def _interval(d: Mapping[str, Any] | None) -> str:
    if d is None:
        return "n/a"
    return f"{format(d['point'], '+.6f')} [{format(d['lower'], '+.6f')}, {format(d['upper'], '+.6f')}]"


def _head(plan: Mapping[str, Any], index: Mapping[str, Any]) -> list[str]:
    rows = index["members"]
    done = [r for r in rows if r["status"] == "done"]
    level = next((r["summary"]["interval_level"] for r in done if r["summary"]["interval_level"] is not None),
                 None)
    return [
        f"# Sweep {plan['sweep']['name']}",
        "",
        f"Sweep file sha256 `{plan['sweep']['sha256']}`; plan statement sha256 `{index['plan_sha256']}`.",
        f"{len(rows)} members planned: {len(done)} done, {len(rows) - len(done)} failed.",
        "",
        "Audit pool, raw -> calibrated; the change is calibrated minus raw with its "
        + (f"{format(100 * level, 'g')}% paired bootstrap interval." if level is not None
           else "bootstrap interval (n/a: no bootstrap)."),
    ]


def _tail(failed: list[Mapping[str, Any]]) -> list[str]:
    lines: list[str] = []
    if failed:
        lines += ["", "## Failed members", ""]
        lines += [f"- {text(r['name'])}: {text(r['error'])}" for r in failed]  # errors are free text
    return lines + ["", "## Figures", "",
                    f"![T per member]({layout.SWEEP_TEMPERATURE_FIGURE})", "",
                    f"![Audit ECE raw and calibrated per member]({layout.SWEEP_ECE_FIGURE})", ""]


def _median(xs: list[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count), in a fixed order."""
    ordered, n = sorted(xs), len(xs)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _spread(xs: list[float]) -> str:
    return f"{_f(_median(xs))} | {_f(min(xs))} | {_f(max(xs))}"


def _sides(intervals: list[Mapping[str, Any] | None]) -> str:
    """How many members' intervals lie wholly below 0, contain 0, lie wholly above 0 (and lack one)."""
    have = [d for d in intervals if d is not None]
    below = sum(d["upper"] < 0 for d in have)
    above = sum(d["lower"] > 0 for d in have)
    cell = f"{below} / {len(have) - below - above} / {above}"
    return cell + (f" ({len(intervals) - len(have)} without)" if len(have) < len(intervals) else "")


def across_members(done: list[Mapping[str, Any]]) -> list[str]:
    """The sweep summed up across its done members: for T and each headline figure raw, calibrated
    and its change, the median, smallest and largest, and for each change how many members'
    bootstrap intervals lie below 0 (calibration helped), contain 0, or lie above 0."""
    if not done:
        return ["", "## Across members", "", "No member is done: nothing to sum up."]
    lines = ["", f"## Across the {len(done)} done members", "",
             "| figure | median | smallest | largest | change's interval below 0 / contains 0 / above 0 |",
             "|---|---|---|---|---|",
             f"| T | {_spread([r['summary']['temperature'] for r in done])} | |"]
    for k in layout.SWEEP_SUMMARY_METRICS:
        m = [r["summary"]["metrics"][k] for r in done]
        lines.append(f"| {METRIC_LABELS[k]} raw | {_spread([x['raw'] for x in m])} | |")
        lines.append(f"| {METRIC_LABELS[k]} calibrated | {_spread([x['calibrated'] for x in m])} | |")
        lines.append(f"| {METRIC_LABELS[k]} change | {_spread([x['calibrated'] - x['raw'] for x in m])} | "
                     f"{_sides([x['difference'] for x in m])} |")
    return lines


def sweep_markdown(plan: Mapping[str, Any], index: Mapping[str, Any]) -> bytes:
    """sweep.md from the parsed plan and index predicates (sweep-plan/v1, sweep-index/v1): every
    member with each headline figure raw -> calibrated and its change with its interval, side by
    side, then the sweep summed up across its done members, the failed members and the figures."""
    rows = index["members"]
    names = [METRIC_LABELS[k] for k in layout.SWEEP_SUMMARY_METRICS]
    lines = [*_head(plan, index), "",
             "| member | status | T | n | " + " | ".join(f"{n} | {n} change" for n in names) + " |",
             "|---|---|---|---|" + "---|---|" * len(names)]
    for r in rows:
        if r["status"] != "done":
            lines.append(f"| {r['name']} | failed |" + " |" * (2 + 2 * len(names)))
            continue
        s = r["summary"]
        t = _f(s["temperature"]) + (" (boundary)" if s["boundary"] else "")
        cells = [f"{_f(s['metrics'][k]['raw'])} -> {_f(s['metrics'][k]['calibrated'])} | "
                 f"{_interval(s['metrics'][k]['difference'])}" for k in layout.SWEEP_SUMMARY_METRICS]
        lines.append(f"| {r['name']} | done | {t} | {s['n']} | " + " | ".join(cells) + " |")
    done = [r for r in rows if r["status"] == "done"]
    failed = [r for r in rows if r["status"] != "done"]
    return "\n".join(lines + across_members(done) + _tail(failed)).encode("utf-8")


def sweep_markdown_v1(plan: Mapping[str, Any], index: Mapping[str, Any]) -> bytes:
    """sweep.md as sweeps written before the across-members summary have it (one ECE interval,
    no summary); the verifier accepts it for them. New sweeps are written by sweep_markdown."""
    rows = index["members"]
    failed = [r for r in rows if r["status"] == "failed"]
    lines = [*_head(plan, index), "", "| member | status | T | n | NLL | ECE | ECE change | Brier |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] != "done":
            lines.append(f"| {r['name']} | failed | | | | | | |")
            continue
        s = r["summary"]
        m = s["metrics"]
        t = _f(s["temperature"]) + (" (boundary)" if s["boundary"] else "")
        cells = [f"{_f(m[k]['raw'])} -> {_f(m[k]['calibrated'])}" for k in ("nll", "ece", "brier")]
        lines.append(f"| {r['name']} | done | {t} | {s['n']} | {cells[0]} | {cells[1]} | "
                     f"{_interval(m['ece']['difference'])} | {cells[2]} |")
    return "\n".join(lines + _tail(failed)).encode("utf-8")


def _width(n: int) -> float:
    return min(MAX_WIDTH, max(MIN_WIDTH, 1.5 + SIZE_PER_MEMBER * n))


def _members_axis(ax: Any, names: list[str]) -> None:
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
    ax.set_xlim(-0.6, max(len(names), 1) - 0.4)


def temperature_png(index: Mapping[str, Any]) -> bytes:
    """T of every done member, in plan order."""
    done = [r for r in index["members"] if r["status"] == "done"]
    names = [r["name"] for r in done]
    with _fresh_rc():
        fig = Figure(figsize=(_width(len(done)), HEIGHT), dpi=DPI)
        ax = fig.subplots()
        ax.plot(range(len(done)), [r["summary"]["temperature"] for r in done], "o",
                color=COLORS["calibrated"], label="fitted T")
        ax.axhline(1.0, color=COLORS["ideal"], linestyle=":", linewidth=1.0, label="T = 1 (raw)")
        _members_axis(ax, names)
        ax.set_ylabel("temperature T")
        ax.set_title(f"Fitted temperature per member ({len(done)} of {len(index['members'])} done)")
        ax.legend(loc="best", fontsize=8, frameon=False)
        fig.tight_layout()
        return _png(fig)


def ece_png(index: Mapping[str, Any]) -> bytes:
    """Left: audit ECE raw and calibrated per done member. Right: the change (calibrated minus
    raw) with its bootstrap interval, where the member has one."""
    done = [r for r in index["members"] if r["status"] == "done"]
    names = [r["name"] for r in done]
    xs = list(range(len(done)))
    with _fresh_rc():
        fig = Figure(figsize=(_width(2 * len(done)), HEIGHT), dpi=DPI)
        left, right = fig.subplots(1, 2)
        for side in ("raw", "calibrated"):
            left.plot(xs, [r["summary"]["metrics"]["ece"][side] for r in done], "o", color=COLORS[side],
                      label=side)
        _members_axis(left, names)
        left.set_ylabel("audit ECE")
        left.set_title("Audit ECE, raw and calibrated")
        left.legend(loc="best", fontsize=8, frameon=False)
        with_interval = [(x, r["summary"]["metrics"]["ece"]["difference"]) for x, r in zip(xs, done, strict=True)
                         if r["summary"]["metrics"]["ece"]["difference"] is not None]
        for x, d in with_interval:
            right.plot([x, x], [d["lower"], d["upper"]], color=COLORS["calibrated"], linewidth=1.5)
            right.plot([x], [d["point"]], "o", color=COLORS["calibrated"])
        right.axhline(0.0, color=COLORS["ideal"], linestyle=":", linewidth=1.0)
        _members_axis(right, names)
        right.set_ylabel("calibrated - raw")
        right.set_title("ECE change with its bootstrap interval")
        fig.tight_layout()
        return _png(fig)


def render_sweep_views(plan: Mapping[str, Any], index: Mapping[str, Any]) -> dict[str, bytes]:
    """{path relative to the sweep directory: bytes} of every sweep view (layout.SWEEP_VIEWS)."""
    return {
        layout.SWEEP_MD: sweep_markdown(plan, index),
        layout.SWEEP_TEMPERATURE_FIGURE: temperature_png(index),
        layout.SWEEP_ECE_FIGURE: ece_png(index),
    }
