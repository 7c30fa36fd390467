"""data/report.md from the parsed records (bundle/FORMAT.md "report.md").

Every number a verifier checks sits in a checked table: a line `<!-- table: NAME -->`, then a
Markdown table whose first column is the row key and whose header names the columns. Cells are
formatted by one rule (`cell`):

    float            format(x, ".6f")           e.g. 0.283519, -0.000000
    change (float)   format(cal - raw, "+.6f")  cal, raw: the float64 values of the JSON file
    int              str(x)                     change: format(cal - raw, "+d")
    bool             "yes" | "no"
    null             "n/a"
    str              markdown.text(x): unchanged unless it could make Markdown structure

`report_markdown(docs, protocol_sha256, figures)` is the whole document; `expected_tables(docs)`
the checked tables as {table: {row: {column: cell}}}. Numbers in the prose (trajectory summary,
bootstrap settings, environment) are read from the records too, and the whole text is compared
byte for byte by the verifier. Every string from a record reaches the text through
`markdown.text` or `markdown.code` (bundle/FORMAT.md "Text from records"), so that it shows as
its characters and never as Markdown structure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bundle import layout
from bundle.layout import DEFAULT_LOGIT_TOLERANCE, data_name
from bundle.views import RENDERER_PACKAGE, STATED_REVISION
from bundle.views.markdown import code, text

JSON_FILES = (layout.PROTOCOL_JSON, layout.RESOURCES_JSON, layout.POOLS_JSON, layout.TEMPERATURE_JSON,
              layout.TRAJECTORY_JSON, layout.METRICS_JSON, layout.ENVIRONMENT_JSON, layout.BOOTSTRAP_JSON,
              layout.STABILITY_JSON)
"""The payload files the report is written from (the keys of `docs`), in reading order; the
optional ones (bootstrap, stability) are None when the bundle has none."""
FIGURE_FILES = ((layout.RELIABILITY_FIGURE, ("Reliability diagrams of the audit pool, raw and "
                 "calibrated, with the rows in each bin")),
                (layout.CONFIDENCE_FIGURE, ("Histogram of top-label confidence on the audit "
                 "pool, raw and calibrated")))
"""The figures the report shows, in order, with their alternative text."""

METRIC_ROWS = ("n", "correct", "accuracy", "mean_confidence", "nll", "brier", "ece", "mce")


# --- the one formatting rule ----------------------------------------------------------------

def cell(x: Any) -> str:
    """A value as it appears in a machine-checkable table."""
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return format(x, ".6f")
    if isinstance(x, str):
        return text(x)
    raise TypeError(f"no table format for {type(x).__name__}")


def change(cal: Any, raw: Any) -> str:
    """calibrated minus raw, signed."""
    if isinstance(cal, bool) or isinstance(raw, bool):
        raise TypeError("no change of a boolean")
    if isinstance(cal, int) and isinstance(raw, int):
        return format(cal - raw, "+d")
    return format(float(cal) - float(raw), "+.6f")


# --- the checked tables -----------------------------------------------------------------------

Tables = dict[str, dict[str, dict[str, str]]]


def _metrics_table(pool: dict[str, Any]) -> dict[str, dict[str, str]]:
    raw, cal = pool["raw"], pool["calibrated"]
    return {r: {"raw": cell(raw[r]), "calibrated": cell(cal[r]), "change": change(cal[r], raw[r])}
            for r in METRIC_ROWS}


def expected_tables(docs: Mapping[str, Any]) -> Tables:
    """{table: {row: {column: cell}}} from the parsed JSON files (keys as in JSON_FILES)."""
    t, m, pools = docs[layout.TEMPERATURE_JSON], docs[layout.METRICS_JSON], docs[layout.POOLS_JSON]
    out: Tables = {
        "pools": {text(name): {"size": cell(pools["sizes"][name])} for name in pools["sizes"]},
        "temperature": {k: {"value": cell(t[k])} for k in
                        ("temperature", "beta", "t_min", "t_max", "steps", "boundary", "nll_before",
                         "nll_after")},
        "metrics-audit": _metrics_table(m["pools"]["audit"]),
        "metrics-calibration": _metrics_table(m["pools"]["calibration"]),
        "threshold": {
            f"{pool}/{kind}": {c: cell(m["pools"][pool][kind]["threshold"][c])
                               for c in ("value", "accepted", "wrong_accepted")}
            for pool in ("audit", "calibration") for kind in ("raw", "calibrated")
        },
        "bins-audit": {
            str(b): {
                "lower": cell(m["pools"]["audit"]["raw"]["bins"][b]["lower"]),
                "upper": cell(m["pools"]["audit"]["raw"]["bins"][b]["upper"]),
                **{f"{kind}_{c}": cell(m["pools"]["audit"][kind]["bins"][b][c])
                   for kind in ("raw", "calibrated") for c in ("count", "accuracy", "mean_confidence")},
            }
            for b in range(len(m["pools"]["audit"]["raw"]["bins"]))
        },
    }
    if "estimators" in m:
        out.update(_estimator_tables(m["estimators"]["results"]))
    if docs.get(layout.BOOTSTRAP_JSON) is not None:
        out["bootstrap"] = _bootstrap_table(docs[layout.BOOTSTRAP_JSON])
    if docs.get(layout.STABILITY_JSON) is not None:
        out["stability"] = _stability_table(docs[layout.STABILITY_JSON])
    return out


def _estimator_tables(results: dict[str, Any]) -> Tables:
    """`estimators`: each scalar estimator raw, calibrated, their change and its paired-bootstrap
    interval and verdict (n/a where none was pre-registered); `bin-intervals-<id>`: each ECE bin's
    Clopper-Pearson interval, raw and calibrated."""
    out: Tables = {}
    scalars = {}
    for key, r in results.items():
        if r["kind"] == "bin-intervals":
            out[f"bin-intervals-{text(key)}"] = {
                str(b): {f"{kind}_{c}": cell(r[kind]["bins"][b][c]) for kind in ("raw", "calibrated")
                         for c in ("count", "correct", "lower", "upper")}
                for b in range(len(r["raw"]["bins"]))}
            continue
        raw, cal, d = r["raw"]["value"], r["calibrated"]["value"], r.get("difference", {})
        scalars[text(key)] = {"raw": cell(raw), "calibrated": cell(cal),
                              "change": cell(None) if raw is None or cal is None else change(cal, raw),
                              **{c: cell(d.get(c)) for c in ("lower", "upper", "verdict")}}
    if scalars:
        out["estimators"] = scalars
    return out


def _bootstrap_table(b: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {text(k): {c: cell(v[c]) for c in ("point", "lower", "upper", "verdict")}
            for k, v in b["differences"].items()}


def _stability_table(s: dict[str, Any]) -> dict[str, dict[str, str]]:
    rows = {str(e["m"]): {c: cell(e[c]) for c in ("temperature", "boundary", "audit_nll")}
            for e in s["sizes"]}
    rows["raw"] = {"temperature": cell(1.0), "boundary": cell(False), "audit_nll": cell(s["audit_nll_raw"])}
    return rows


def _render_table(name: str, rows: dict[str, dict[str, str]], key: str) -> list[str]:
    cols = list(next(iter(rows.values())))
    lines = [f"<!-- table: {name} -->", "| " + " | ".join([key, *cols]) + " |",
             "|" + "---|" + "---:|" * len(cols)]
    lines += ["| " + " | ".join([r, *(rows[r][c] for c in cols)]) + " |" for r in rows]
    return lines + [""]


# --- the document ---------------------------------------------------------------------------

def _short(h: str | None) -> str:
    return "n/a" if h is None else code(h)


def _optional(x: Any) -> str:
    """A record value shown in prose: a string as Markdown text, anything else (a number, a flag,
    null) as Python writes it."""
    return text(x) if isinstance(x, str) else str(x)


def _kernels_clause(inf: dict[str, Any]) -> str:
    """The linear layers' kernels where the protocol names them; a protocol without the field says
    nothing of them, as every report before the field."""
    kernels = inf.get("linear_kernels")
    if kernels is None:
        return ""
    return f", linear layers on {layout.LINEAR_KERNELS.get(kernels, text(str(kernels)))} kernels"


def _protocol_paragraph(p: dict[str, Any], sha: str) -> str:
    inf, fit, met = p["inference"], p["fit"], p["metrics"]
    pools = ", ".join(f"{text(x['name'])} {x['size']}" for x in p["split"]["pools"])
    res = p["resources"]
    return (
        f"The protocol {code(p['name'])} (protocol.json, sha256 `{sha}`) was fixed before the run. "
        f"It pins the model {code(res['model']['repo_id'])} at revision {code(res['model']['revision'])} and "
        f"the dataset {code(res['dataset']['repo_id'])} at revision {code(res['dataset']['revision'])}. "
        f"Rows are ordered by the sha256 of {code(p['split']['prefix'])} + idx and cut, in that order, "
        f"into the pools {pools}. Inference runs on {text(inf['device'])} in {text(inf['dtype'])}, "
        f"batches of {inf['batch_size']}, at most {inf['max_length']} tokens, "
        f"{inf['torch_threads']} torch threads{_kernels_clause(inf)}, deterministic algorithms "
        f"{'on' if inf['deterministic_algorithms'] else 'off'}. One temperature is fitted on the "
        f"{text(fit['pool'])} pool by {fit['steps']} bisection steps on beta = 1/T over "
        f"T in [{fit['t_min']}, {fit['t_max']}], written and frozen before the {text(met['pool'])} pool is "
        f"run. Metrics on the {text(met['pool'])} pool are the evidence: accuracy, NLL, Brier score, "
        f"ECE and MCE over {met['ece']['bins']} equal-width confidence bins, and the rows accepted "
        f"at top-label probability >= {met['threshold']['value']}."
    )


def _local_revision_lines(r: dict[str, Any]) -> list[str]:
    """For resources read from local files: their revisions are only stated, never checked by a hub
    (resources.json `revision_checked_by_hub` false; records written before the field say nothing)."""
    local = _stated_only(r)
    if not local:
        return []
    whose = "each revision is a" if len(local) == 2 else "its revision is a"
    return ["", (f"The {' and '.join(local)} files were read from local files (source local), so {whose} "
                 f"{STATED_REVISION}, not one a hub confirmed; what was checked is the sha256 of every file.")]


def _stated_only(r: dict[str, Any]) -> list[str]:
    """The resources whose revision no hub checked (resources.json `revision_checked_by_hub` false)."""
    return [kind for kind in ("model", "dataset") if r[kind].get("revision_checked_by_hub") is False]


def _resources_lines(r: dict[str, Any]) -> list[str]:
    formal = (" (every file is the protocol's pinned file, by sha256)." if _stated_only(r) else
              " (every file is the protocol's pinned file at the pinned revision).")
    lines = [f"Profile: **{text(r['profile'])}**"
             + (formal if r["profile"] == "formal" else " (the resources differ from the protocol's pins).")]
    lines += _local_revision_lines(r)
    if r["deviations"]:
        lines += ["", "Deviations from the pins:", ""] + [f"- {text(d)}" for d in r["deviations"]]
    lines += ["", "| resource | repository | revision | source | file | size | sha256 | pin | matches pin |",
              "|---|---|---|---|---|---:|---|---|---|"]
    for kind in ("model", "dataset"):
        repo = r[kind]
        for f in repo["files"]:
            lines.append(f"| {kind} | {code(repo['repo_id'])} | {code(repo['revision'])} | {text(repo['source'])} | "
                         f"{code(f['path'])} | {f['size']} | {code(f['sha256'])} | {text(f['pin'])} | "
                         f"{cell(bool(f['matches_pin']))} |")
    return lines


def _trajectory_lines(t: dict[str, Any], traj: dict[str, Any]) -> list[str]:
    if t["boundary"]:
        side = t["boundary_side"]
        return [(f"The NLL derivative g(beta) did not change sign on [1/t_max, 1/t_min] "
                f"(g at 1/t_max: {traj['g_at_beta_min']:.6e}, at 1/t_min: {traj['g_at_beta_max']:.6e}); "
                f"the boundary {code(side)} was taken and flagged. No bisection steps were run.")]
    lo, hi = t["bracket"]
    return [(f"Bisection on beta: g(1/t_max) = {traj['g_at_beta_min']:.6e} < 0 < g(1/t_min) = "
            f"{traj['g_at_beta_max']:.6e}; {len(traj['steps'])} steps (trajectory.json) narrowed the "
            f"bracket to width {hi - lo:.3e}; the gradient at the estimate is {t['final_gradient']:.3e}.")]


def _environment_lines(e: dict[str, Any]) -> list[str]:
    lines = [f"- Python {text(e['python'])} ({text(e['implementation'])}) on {text(e['platform'])}",
             f"- CPU: {_optional(e['cpu_model'])}, {e['logical_cores']} logical cores",
             f"- Container image: {_short(e['image'])}",
             f"- Project commit: {_short(e['git_commit'])}",
             "- Torch settings: " + ", ".join(f"{text(k)} {_optional(v)}" for k, v in sorted(e["torch"].items())
                                               if isinstance(v, (str, int, float, bool)) or v is None),
             "- Packages: " + ", ".join(f"{text(k)} {_optional(v)}" for k, v in sorted(e["packages"].items())
                                        if v is not None and k != RENDERER_PACKAGE)]
    return lines + _cluster_lines(e.get("cluster")) + [
        "", "Wall times and peak memory vary between runs; they are in environment.json."]


def _cluster_lines(cluster: dict[str, Any] | None) -> list[str]:
    """Where a sharded run's batches ran: workers, machines and CPU kinds (only those that ran a batch)."""
    if cluster is None:
        return []
    ran = [w for w in cluster["workers"] if any(w["batches"].values())]
    machines = len({w["node_id"] for w in ran})
    kinds = sorted({w["cpu_kind"] for w in ran})
    died = sum(1 for w in cluster["workers"] if w["died"])
    line = (f"- Inference on a Ray cluster: {len(ran)} workers on {machines} machine{'s' * (machines != 1)}, "
            f"{len(kinds)} CPU kind{'s' * (len(kinds) != 1)} ({'; '.join(text(k) for k in kinds)})")
    if len(kinds) > 1:
        line += "; MIXED CPU kinds: a batch's logits are those of the kind that ran it (environment.json)"
    if died:
        line += f"; {died} worker(s) died, their unfinished batches ran again on the others"
    return [line]


def _bootstrap_lines(b: dict[str, Any] | None) -> list[str]:
    if b is None:
        return [("The pre-registered bootstrap did not run, so this report makes **no claim** that "
                "the calibrated figures differ from the raw ones beyond chance."), ""]
    q = b["interval"]["quantiles"]
    lines = [(f"Paired bootstrap over the audit pool (bootstrap.json): {b['resamples']} resamples of "
             f"the {b['n']} rows drawn with numpy's PCG64 from seed {b['seed']}; each resample "
             f"scores the same rows raw and calibrated (T held fixed) and records calibrated minus "
             f"raw. The interval is the {q[0]} and {q[1]} quantiles (numpy, method linear); "
             "negative means calibration lowered the metric. A decrease or increase is claimed only "
             "when the whole interval lies on one side of 0."), ""]
    lines += _render_table("bootstrap", _bootstrap_table(b), "metric")
    return lines


def _estimator_lines(m: dict[str, Any], tables: Tables) -> list[str]:
    """The pre-registered estimators' section (nothing for a protocol without them)."""
    if "estimators" not in m:
        return []
    e = m["estimators"]
    lines = ["### Pre-registered estimators, audit pool", "",
             ("Each estimator the protocol names in metrics.estimators (metrics.json `estimators`), raw "
              "and calibrated; `lower`, `upper` and `verdict` are its paired bootstrap of calibrated "
              f"minus raw over the {e['resamples']} resamples of bootstrap.json (n/a: none "
              "pre-registered). Definitions and the reference library each one agrees with: "
              "docs/GUIDE.md, \"The estimators\"."), ""]
    if "estimators" in tables:
        lines += _render_table("estimators", tables["estimators"], "estimator")
    for key, r in e["results"].items():
        for kind in ("raw", "calibrated"):
            if r[kind].get("reason"):
                lines += [f"{text(key)} ({kind}) is not reported: {text(r[kind]['reason'])}.", ""]
        if r["kind"] == "smooth-ece":
            lines += [(f"{text(key)}: kernel bandwidth {cell(r['raw']['bandwidth'])} raw, "
                       f"{cell(r['calibrated']['bandwidth'])} calibrated."), ""]
        if r["kind"] == "bin-intervals":
            lines += [(f"{text(key)}: Clopper-Pearson interval of each reliability bin's accuracy "
                       "(n/a: an empty bin)."), ""]
            lines += _render_table(f"bin-intervals-{text(key)}", tables[f"bin-intervals-{text(key)}"], "bin")
    return lines


def _stability_lines(s: dict[str, Any] | None) -> list[str]:
    if s is None:
        return ["The calibration-size study did not run.", ""]
    lines = [("Descriptive only, never used to choose the temperature (stability.json): the first m "
             "rows of the calibration pool in split-key order, each fitted as the main fit, and "
             "the audit NLL at each temperature. The row `raw` is the audit NLL at T = 1."), ""]
    lines += _render_table("stability", _stability_table(s), "m")
    if any(e["m"] == s["calibration_n"] for e in s["sizes"]):
        lines += [f"m = {s['calibration_n']} is the whole calibration pool: its temperature is the run's.", ""]
    if s["skipped_sizes"]:
        lines += [f"Skipped (larger than the calibration pool of {s['calibration_n']} rows): "
                  + ", ".join(str(m) for m in s["skipped_sizes"]) + ".", ""]
    return lines


COVERAGE_CAVEAT = (
    "Several intervals here cover less often than their 95% says. In simulation at the formal audit "
    "pool's 360 rows (docs/PERFORMANCE.md, \"Interval coverage\") the bootstrap intervals of the "
    "plug-in estimators (ece-equal-mass, classwise-ece, ks) never held the true value for a "
    "well-calibrated model, because those estimates are biased upwards, and held it 48% to 93% of the "
    "time for an overconfident one; the debiased-l2 interval held it 73% to 89% of the time; the "
    "bootstrap interval of the ECE change held it 53% of the time. Read them as the spread of the "
    "estimate over the audit rows, not as a range for the true calibration error. The Clopper-Pearson "
    "bin intervals (97%) and the bootstrap intervals of the NLL and Brier changes (94%) covered as "
    "stated.")
"""The report's caveat for a record with estimators: measured by scripts/bench_coverage.py."""


def _limits(docs: Mapping[str, Any]) -> list[str]:
    r, b = docs[layout.RESOURCES_JSON], docs[layout.BOOTSTRAP_JSON]
    items = [
        ("It is about one model on one dataset's sentences; it says nothing about other data, "
        "domains or label shift."),
        ("Temperature scaling never changes the predicted label, so accuracy is the same raw and "
        "calibrated; the result is about probabilities, not about how often the model is right."),
        ("ECE and MCE depend on the 10 equal-width bins; bins with few rows (see the bin table) make "
        "them noisy."),
        ("The calibration-pool figures are those of the pool the temperature was fitted on; they are "
        "not evidence."),
    ]
    if b is None:
        items.append("No significance claim: the pre-registered bootstrap did not run.")
    else:
        items.append("The bootstrap interval covers the sampling of the audit rows only, with the "
                     "temperature held fixed; it does not cover the choice of calibration rows, the "
                     "model or the dataset. It is one pre-registered interval per metric, not a test "
                     "corrected for multiple comparisons.")
    if "estimators" in docs[layout.METRICS_JSON]:
        items.append(COVERAGE_CAVEAT)
    if docs[layout.STABILITY_JSON] is not None:
        items.append("The calibration-size study is descriptive; it did not choose the temperature.")
    if r["profile"] != "formal":
        items.append("The resources are not the protocol's pinned files (profile other); the figures "
                     "do not speak for the pinned model or dataset.")
    return [f"- {x}" for x in items]


def _warning_lines(m: dict[str, Any]) -> list[str]:
    """metrics.json's warnings, at the top of the report, when the run's own numbers raise any."""
    found = m.get("warnings") or []
    if not found:
        return []
    return (["## Warnings", "",
             ("The run's own numbers say something went wrong (metrics.json, `warnings`). The figures below "
              "are what the pre-registered run found; read them with these warnings in mind."), ""]
            # Not escaped: each warning is a fixed sentence with numbers that the verifier recomputes
            # (metrics.warnings), never text a signer chose.
            + [f"- **WARNING: {w}.**" for w in found] + [""])


def _truncation_lines(m: dict[str, Any]) -> list[str]:
    """Per pool, the rows cut to max_length tokens and the longest row before the cut (metrics.json)."""
    t = m.get("truncation")
    if t is None:
        return []
    pools = "; ".join(f"{pool} {t[pool]['truncated']} of {t[pool]['rows']} (longest {t[pool]['longest_tokens']} "
                      "tokens before the cut)" for pool in ("audit", "calibration"))
    return ["### Truncation", "",
            (f"Rows longer than {t['audit']['max_length']} tokens are cut to that length before inference "
             f"(metrics.json, `truncation`): {pools}."), ""]


def _label_map_lines(p: dict[str, Any]) -> list[str]:
    """The protocol's label map, when it has one (none for protocols written before the map)."""
    if "label_map" not in p:
        return []
    lm = p["label_map"]
    labels = p["resources"]["dataset"]["labels"]
    how = "by name, ignoring case" if lm["by"] == "name" else "explicitly"
    lines = ["## Label map", "",
             (f"The model's outputs mapped onto the dataset's labels ({how}), fixed in the protocol and checked "
              "against the model's config before inference. Logits are stored in dataset label order: "
              "`logit_j` is dataset label j."), "",
             "| model index | model label | dataset label | stored as |", "|---:|---|---|---|"]
    for pair in sorted(lm["pairs"], key=lambda x: x["model_index"]):
        j = labels.index(pair["dataset_label"])
        lines.append(f"| {pair['model_index']} | {text(pair['model_label'])} | {text(pair['dataset_label'])} | "
                     f"`logit_{j}` |")
    return lines + [""]


def _ratio(x: float | None) -> str:
    return "n/a" if x is None else format(x, ".6f")


def _per_class_lines(p: dict[str, Any], m: dict[str, Any]) -> list[str]:
    """The audit pool's per-class results and, for K <= 10, its confusion matrix (metrics.json
    `per_class`; none for bundles written before it)."""
    found = m.get("per_class")
    if found is None:
        return []
    labels = p["resources"]["dataset"]["labels"]
    audit = found["audit"]
    lines = ["### Per class, audit pool", "",
             ("From the predicted labels (metrics.json, `per_class`), the same raw and calibrated: a temperature "
              "never changes the predicted label. The protocol's bootstrap asks for no per-class intervals, so "
              "there are none."), "",
             "| label | name | support | predicted | correct | recall | precision |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for j, name in enumerate(labels):
        lines.append(f"| {j} | {text(name)} | {audit['support'][j]} | {audit['predicted'][j]} | "
                     f"{audit['correct'][j]} | {_ratio(audit['recall'][j])} | {_ratio(audit['precision'][j])} |")
    best, recorded = audit["best_permutation"], m["pools"]["audit"]["raw"]
    lines += ["", (f"The permutation of the label map that makes the most audit rows right makes {best['correct']} "
                   f"right (accuracy {best['accuracy']:.6f}; the recorded map: {recorded['correct']}, "
                   f"{recorded['accuracy']:.6f})."), ""]
    k = len(labels)
    if k <= 10:
        cells = {(a, b): c for a, b, c in audit["confusion"]}
        lines += ["Confusion matrix, audit pool (rows: label; columns: predicted):", "",
                  "| label | " + " | ".join(str(b) for b in range(k)) + " |", "|---:|" + "---:|" * k]
        lines += [f"| {a} | " + " | ".join(str(cells.get((a, b), 0)) for b in range(k)) + " |" for a in range(k)]
        lines.append("")
    return lines


def _bounds_lines(m: dict[str, Any]) -> list[str]:
    """What an equivalent reproduction can move (metrics.json `reproduction_bounds`)."""
    b = m.get("reproduction_bounds")
    if b is None:
        return []
    tau = b["logit_tolerance"]
    whose = ("the format's default" if b["source"] == "format default" else
             "the protocol's, equal to the format's default" if tau == DEFAULT_LOGIT_TOLERANCE else
             f"the protocol's; the format's default is {DEFAULT_LOGIT_TOLERANCE:g}")
    t = b["temperature"]
    lines = ["### What an equivalent reproduction can move", "",
             (f"A reproduction is `equivalent` when every logit is within {tau:g} of the stored one ({whose}). "
              f"Over every such set of logits, with the temperature refitted (it stays in "
              f"[{t['t_low']:.6f}, {t['t_high']:.6f}]), no figure moves further than this "
              "(metrics.json, `reproduction_bounds`; bundle/FORMAT.md gives the derivation):"), "",
             ("| pool/probabilities | accuracy | mean_confidence | nll | brier | ece | mce | rows that could flip | "
              "rows near a bin edge |"), "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for pool in ("audit", "calibration"):
        for which in ("raw", "calibrated"):
            x = b["pools"][pool][which]
            moved = " | ".join(format(x[f], ".2e") for f in
                               ("accuracy", "mean_confidence", "nll", "brier", "ece", "mce"))
            lines.append(f"| {pool}/{which} | {moved} | {x['rows_that_could_flip']} | {x['rows_near_bin_edge']} |")
    return lines + [""]


def report_markdown(docs: Mapping[str, Any], protocol_sha256: str, figures: Sequence[str]) -> str:
    """The report for a bundle whose parsed JSON files are `docs` (keys as in JSON_FILES),
    whose protocol.json hashes to protocol_sha256 and whose payload holds the figures `figures`
    (names inside data/; FIGURE_FILES that are not among them are not shown)."""
    tables = expected_tables(docs)
    p, t, m = docs[layout.PROTOCOL_JSON], docs[layout.TEMPERATURE_JSON], docs[layout.METRICS_JSON]
    out: list[str] = [f"# Calibration run: {text(p['name'])}", "",
                      ("All numbers below are read from this bundle's files; tables marked "
                      "`<!-- table: ... -->` are checked against them by the verifier "
                      "(floats to 6 decimals)."), "",
                      *_warning_lines(m),
                      "## Question", "", text(p["question"]), "",
                      "## Protocol", "", _protocol_paragraph(p, protocol_sha256), "",
                      "## Resources", ""]
    out += _resources_lines(docs[layout.RESOURCES_JSON]) + [""]
    out += _label_map_lines(p)
    out += ["## Pools", "",
            ("Disjoint pools in ascending split key (pools.json). The explore pool is not used by the "
            "run; the calibration pool fits the temperature; the audit pool is the evidence."), ""]
    out += _render_table("pools", tables["pools"], "pool")
    out += ["## Temperature", "",
            ("Fitted on the calibration pool (temperature.json); `nll_before` and `nll_after` are the "
            "calibration-pool NLL at T = 1 and at the fitted T."), ""]
    out += _render_table("temperature", tables["temperature"], "quantity")
    out += _trajectory_lines(t, docs[layout.TRAJECTORY_JSON]) + [""]
    out += ["## Metrics", "",
            ("Audit pool, the evidence (metrics.json). `change` is calibrated minus raw; lower is "
            "better for nll, brier, ece and mce."), ""]
    out += _render_table("metrics-audit", tables["metrics-audit"], "metric")
    out += [f"Predicted labels unchanged by the temperature: {cell(bool(m['argmax_unchanged']))}.", "",
            "Calibration pool, the fit pool (not evidence):", ""]
    out += _render_table("metrics-calibration", tables["metrics-calibration"], "metric")
    out += _truncation_lines(m)
    out += _per_class_lines(p, m)
    out += _bounds_lines(m)
    out += ["### Threshold", "",
            "Rows accepted at top-label probability >= value, and the wrong ones among them.", ""]
    out += _render_table("threshold", tables["threshold"], "pool/probabilities")
    out += ["### Reliability bins, audit pool", "",
            "Bin b holds confidence in [lower, upper) (the last bin also holds 1.0).", ""]
    out += _render_table("bins-audit", tables["bins-audit"], "bin")
    out += _estimator_lines(m, tables)
    shown = [(data_name(path), alt) for path, alt in FIGURE_FILES if data_name(path) in figures]
    out += ["## Figures", ""]
    out += [f"![{alt}]({path})\n" for path, alt in shown] or ["No figures were rendered.", ""]
    out += ["## Uncertainty", ""] + _bootstrap_lines(docs[layout.BOOTSTRAP_JSON])
    out += ["## Calibration-size stability", ""] + _stability_lines(docs[layout.STABILITY_JSON])
    out += ["## Environment", ""] + _environment_lines(docs[layout.ENVIRONMENT_JSON]) + [""]
    out += ["## What this result does not show", ""] + _limits(docs)
    return "\n".join(out) + "\n"
