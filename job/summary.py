"""The short human summary printed at the end of a run."""

from __future__ import annotations

from typing import Any

ROWS = (("accuracy", "{:.4f}"), ("mean_confidence", "{:.4f}"), ("nll", "{:.4f}"),
        ("brier", "{:.4f}"), ("ece", "{:.4f}"), ("mce", "{:.4f}"))


def summary(metrics: dict[str, Any], temperature: dict[str, Any], profile: str,
            bootstrap: dict[str, Any] | None = None) -> str:
    """Warnings first, then T, the audit-pool metric table raw vs calibrated, the rows cut to
    max_length, and the bootstrap intervals if any."""
    audit = metrics["pools"]["audit"]
    raw, cal = audit["raw"], audit["calibrated"]
    flag = f"  (BOUNDARY: {temperature['boundary_side']})" if temperature["boundary"] else ""
    lines = [f"WARNING: {w}." for w in metrics.get("warnings", [])]
    lines += [
        f"profile {profile}; temperature T = {temperature['temperature']:.6f} (beta = {temperature['beta']:.6f}){flag}",
        (f"calibration-pool NLL {temperature['nll_before']:.4f} -> {temperature['nll_after']:.4f} "
         "(fit pool, not evidence)"),
        f"audit pool, n = {raw['n']}:",
        f"  {'metric':<16}{'raw':>10}{'calibrated':>12}",
    ]
    for key, fmt in ROWS:
        lines.append(f"  {key:<16}{fmt.format(raw[key]):>10}{fmt.format(cal[key]):>12}")
    lines.append(f"  {'correct':<16}{raw['correct']:>10}{cal['correct']:>12}")
    for side, m in (("raw", raw), ("calibrated", cal)):
        t = m["threshold"]
        lines.append(f"  p >= {t['value']} ({side}): {t['accepted']} accepted, {t['wrong_accepted']} of them wrong")
    lines += truncation_lines(metrics)
    if bootstrap is not None:
        level = round(100 * bootstrap["interval"]["level"])
        lines.append(f"  calibrated - raw, {level}% paired bootstrap ({bootstrap['resamples']} resamples):")
        for key, d in sorted(bootstrap["differences"].items()):
            lines.append(f"    {key:<6}{d['point']:+.4f}  [{d['lower']:+.4f}, {d['upper']:+.4f}]  {d['verdict']}")
    lines += estimator_lines(metrics)
    return "\n".join(lines)


def estimator_lines(metrics: dict[str, Any]) -> list[str]:
    """The pre-registered estimators of the audit pool, raw -> calibrated, with the interval of the
    change where one was pre-registered; none for a record without estimators."""
    record = metrics.get("estimators")
    if record is None:
        return []
    out = ["  estimators, raw -> calibrated, and the interval of the change where pre-registered:"]
    for key, r in sorted(record["results"].items()):
        if r["kind"] == "bin-intervals":
            continue
        raw, cal = r["raw"]["value"], r["calibrated"]["value"]
        shown = "n/a" if raw is None or cal is None else f"{raw:.4f} -> {cal:.4f}"
        d = r.get("difference")
        if d is not None and d["lower"] is not None:
            shown += f"  [{d['lower']:+.4f}, {d['upper']:+.4f}]  {d['verdict']}"
        out.append(f"    {key:<16}{shown}")
    return out


def truncation_lines(metrics: dict[str, Any]) -> list[str]:
    """One line per pool with rows cut to max_length, none when no row was cut."""
    out = []
    for pool, t in sorted(metrics.get("truncation", {}).items()):
        if t["truncated"]:
            out.append(f"  {pool}: {t['truncated']} of {t['rows']} rows cut to {t['max_length']} tokens "
                       f"(longest {t['longest_tokens']})")
    return out
