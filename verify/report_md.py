"""data/report.md: its machine-checkable tables restate the JSON records (bundle/FORMAT.md,
"report.md").

Written from FORMAT.md, not from the job's code: the tables are parsed here, and the cells they
must hold are formatted here from metrics.json, temperature.json, pools.json, bootstrap.json and
stability.json by the format's one rule:

    float            format(x, ".6f")
    change (float)   format(cal - raw, "+.6f")
    int              str(x); a change of two ints format(cal - raw, "+d")
    bool             "yes" | "no"
    null             "n/a"
    str              the string made inert for Markdown (bundle.views.markdown.text: unchanged
                     unless it could make structure)

A table is the line `<!-- table: NAME -->`, a header row, a separator row, then rows up to the
first line that does not start with `|`; cells are split on `|` and stripped; the first cell of
a row is its key, the header names the other columns.

The checked tables catch a wrong number and say which; `regenerated` then requires the whole
file to be the report bundle.views.report renders from the checked records, byte for byte, so
that no sentence, unmarked table, hidden comment or layout trick says what the records do not."""

from __future__ import annotations

import re
from typing import Any

from bundle import layout
from bundle.views.markdown import text as markdown_text
from bundle.views.report import JSON_FILES, report_markdown
from verify import renderer
from verify.context import Context
from verify.result import Failed

Table = dict[str, dict[str, str]]

_MARKER = re.compile(r"<!-- table: ([a-z0-9-]+) -->")
_SEPARATOR_CELL = re.compile(r":?-{3,}:?")
_IMAGE = re.compile(r"!\[[^\[\]\n]*\]\(([^()\[\]\s]+)\)")
"""A Markdown image. Neither the alt text nor the target may hold a bracket (nor a line break,
nor the target white space), so every attempt stops at the next bracket: linear time on any
text, where an alt text of any non-closing-bracket character made many `![` quadratic."""

METRIC_ROWS = ("n", "correct", "accuracy", "mean_confidence", "nll", "brier", "ece", "mce")
TEMPERATURE_ROWS = ("temperature", "beta", "t_min", "t_max", "steps", "boundary", "nll_before",
                    "nll_after")
THRESHOLD_COLUMNS = ("value", "accepted", "wrong_accepted")
BIN_COLUMNS = ("count", "accuracy", "mean_confidence")
BOOTSTRAP_COLUMNS = ("point", "lower", "upper", "verdict")
STABILITY_COLUMNS = ("temperature", "boundary", "audit_nll")


# -- the formatting rule ---------------------------------------------------------------------

def fmt(value: Any) -> str:
    """One JSON value as a table cell."""
    if value is None:
        return "n/a"
    if value is True:
        return "yes"
    if value is False:
        return "no"
    if type(value) is int:
        return str(value)
    if type(value) is float:
        return format(value, ".6f")
    if type(value) is str:
        return markdown_text(value)
    raise Failed(f"a record holds {type(value).__name__} {str(value)[:40]!r} where the report "
                 "needs a number, a flag, null or a string.")


def fmt_change(calibrated: Any, raw: Any) -> str:
    """calibrated minus raw, with its sign."""
    if type(calibrated) is int and type(raw) is int:
        return format(calibrated - raw, "+d")
    if type(calibrated) in (int, float) and type(raw) in (int, float):
        return format(float(calibrated) - float(raw), "+.6f")
    raise Failed(f"no change between {calibrated!r} and {raw!r}: both must be numbers.")


# -- the tables the records require ----------------------------------------------------------

def _metric_rows(pool: dict[str, Any]) -> Table:
    raw, cal = pool["raw"], pool["calibrated"]
    return {row: {"raw": fmt(raw[row]), "calibrated": fmt(cal[row]),
                  "change": fmt_change(cal[row], raw[row])} for row in METRIC_ROWS}


def _estimator_tables(record: dict[str, Any] | None) -> dict[str, Table]:
    """The estimators' tables: one row per scalar estimator in `estimators`, one table of bin
    intervals per bin-intervals estimator (`bin-intervals-<id>`)."""
    if record is None:
        return {}
    tables: dict[str, Table] = {}
    scalar: Table = {}
    for name, result in record["results"].items():
        raw, cal = result["raw"], result["calibrated"]
        if result["kind"] == "bin-intervals":
            tables["bin-intervals-" + markdown_text(name)] = {
                str(b): {f"{side}_{c}": fmt(doc["bins"][b][c]) for side, doc in (("raw", raw), ("calibrated", cal))
                         for c in ("count", "correct", "lower", "upper")} for b in range(len(raw["bins"]))}
            continue
        both = raw["value"] is not None and cal["value"] is not None
        scalar[markdown_text(name)] = {
            "raw": fmt(raw["value"]), "calibrated": fmt(cal["value"]),
            "change": fmt_change(cal["value"], raw["value"]) if both else "n/a",
            **{c: fmt(result.get("difference", {}).get(c)) for c in ("lower", "upper", "verdict")}}
    if scalar:
        tables["estimators"] = scalar
    return tables


def required_tables(metrics: dict[str, Any], temperature: dict[str, Any], pools: dict[str, Any],
                    bootstrap: dict[str, Any] | None,
                    stability: dict[str, Any] | None) -> dict[str, Table]:
    """{table name: {row key: {column: cell}}} that report.md must hold, from the records."""
    audit = metrics["pools"]["audit"]
    tables: dict[str, Table] = {
        "pools": {markdown_text(name): {"size": fmt(size)} for name, size in pools["sizes"].items()},
        "temperature": {row: {"value": fmt(temperature[row])} for row in TEMPERATURE_ROWS},
        "metrics-audit": _metric_rows(audit),
        "metrics-calibration": _metric_rows(metrics["pools"]["calibration"]),
        "threshold": {},
        "bins-audit": {},
    }
    for pool in ("audit", "calibration"):
        for kind in ("raw", "calibrated"):
            threshold = metrics["pools"][pool][kind]["threshold"]
            tables["threshold"][f"{pool}/{kind}"] = {c: fmt(threshold[c]) for c in THRESHOLD_COLUMNS}
    for b, raw_bin in enumerate(audit["raw"]["bins"]):
        row = {"lower": fmt(raw_bin["lower"]), "upper": fmt(raw_bin["upper"])}
        for kind in ("raw", "calibrated"):
            for c in BIN_COLUMNS:
                row[f"{kind}_{c}"] = fmt(audit[kind]["bins"][b][c])
        tables["bins-audit"][str(b)] = row
    tables.update(_estimator_tables(metrics.get("estimators")))
    if bootstrap is not None:
        tables["bootstrap"] = {markdown_text(metric): {c: fmt(d[c]) for c in BOOTSTRAP_COLUMNS}
                               for metric, d in bootstrap["differences"].items()}
    if stability is not None:
        rows: Table = {str(e["m"]): {c: fmt(e[c]) for c in STABILITY_COLUMNS}
                       for e in stability["sizes"]}
        rows["raw"] = {"temperature": fmt(1.0), "boundary": fmt(False),
                       "audit_nll": fmt(stability["audit_nll_raw"])}
        tables["stability"] = rows
    return tables


# -- the tables the report holds -------------------------------------------------------------

def _cells(line: str) -> list[str]:
    body = line.strip()
    body = body.removeprefix("|")
    body = body.removesuffix("|")
    return [c.strip() for c in body.split("|")]


def parse_tables(text: str) -> dict[str, Table]:
    """Every marked table of the report; Failed on a malformed, repeated or ragged one."""
    lines = text.split("\n")
    tables: dict[str, Table] = {}
    i = 0
    while i < len(lines):
        marker = _MARKER.fullmatch(lines[i])
        i += 1
        if marker is None:
            continue
        name = marker.group(1)
        if name in tables:
            raise Failed(f"report.md has the table {name!r} twice.")
        if i + 1 >= len(lines) or not lines[i].startswith("|") or not lines[i + 1].startswith("|"):
            raise Failed(f"report.md table {name!r} lacks its header and separator rows.")
        header = _cells(lines[i])
        separator = _cells(lines[i + 1])
        if len(separator) != len(header) or not all(_SEPARATOR_CELL.fullmatch(c) for c in separator):
            raise Failed(f"report.md table {name!r}: the second row is not a separator row "
                         f"matching the header's {len(header)} columns.")
        columns = header[1:]
        if len(set(columns)) != len(columns):
            raise Failed(f"report.md table {name!r} names a column twice: {columns}.")
        i += 2
        rows: Table = {}
        while i < len(lines) and lines[i].startswith("|"):
            cells = _cells(lines[i])
            if len(cells) != len(header):
                raise Failed(f"report.md table {name!r}: row {cells[0]!r} has {len(cells)} "
                             f"cells, the header {len(header)}.")
            if cells[0] in rows:
                raise Failed(f"report.md table {name!r} has the row {cells[0]!r} twice.")
            rows[cells[0]] = dict(zip(columns, cells[1:], strict=True))
            i += 1
        tables[name] = rows
    return tables


def image_links(text: str) -> list[str]:
    """Targets of the Markdown images in the report, in order."""
    return _IMAGE.findall(text)


def compare(found: dict[str, Table], required: dict[str, Table]) -> list[str]:
    """Differences between the report's tables and the required ones; empty when equal."""
    problems = [f"table {n!r} is missing" for n in required if n not in found]
    problems += [f"table {n!r} is not one the format defines here" for n in found
                 if n not in required]
    for name, rows in required.items():
        got = found.get(name)
        if got is None:
            continue
        for key, cells in rows.items():
            if key not in got:
                problems.append(f"{name}: row {key!r} is missing")
                continue
            for column in sorted(set(cells) | set(got[key])):
                want, have = cells.get(column), got[key].get(column)
                if want == have:
                    continue
                if have is None:
                    problems.append(f"{name}[{key}]: column {column!r} is missing")
                elif want is None:
                    problems.append(f"{name}[{key}]: column {column!r} is not expected")
                else:
                    problems.append(f"{name}[{key}][{column}] is {have!r}, the records give "
                                    f"{want!r}")
        problems += [f"{name}: row {key!r} is not in the records" for key in got if key not in rows]
    return problems


def check(data: bytes, metrics: dict[str, Any], temperature: dict[str, Any],
          pools: dict[str, Any], bootstrap: dict[str, Any] | None,
          stability: dict[str, Any] | None, payload: set[str]) -> str:
    """Failed unless report.md is UTF-8, its tables equal the records' and its images exist."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Failed(f"data/report.md is not UTF-8 (byte {exc.start}).") from exc
    found = parse_tables(text)
    required = required_tables(metrics, temperature, pools, bootstrap, stability)
    problems = compare(found, required)
    for target in image_links(text):
        if f"data/{target}" not in payload or target.startswith(("/", "..")):
            problems.append(f"the image {target!r} is not a file of the bundle")
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        raise Failed("report.md does not restate the records: " + "; ".join(problems[:3])
                     + more + ".")
    cells = sum(len(c) for rows in required.values() for c in rows.values())
    return (f"{len(required)} tables ({', '.join(required)}), {cells} cells equal the records "
            "under the formatting rule")


# -- the checks (verify/checks.py lists them in order) ---------------------------------------

def tables(ctx: Context) -> str:
    """report.md's checked tables restate the records, its images name payload files."""
    data = ctx.file(layout.REPORT_MD)
    tree = ctx.bag()
    return check(data, ctx.doc(layout.METRICS_JSON), ctx.doc(layout.TEMPERATURE_JSON),
                 ctx.doc(layout.POOLS_JSON), ctx.optional_doc(layout.BOOTSTRAP_JSON),
                 ctx.optional_doc(layout.STABILITY_JSON), set(tree.payload()))


def regenerated(ctx: Context) -> str:
    """report.md is byte for byte the report the verifier renders from the checked records."""
    data = ctx.file(layout.REPORT_MD)
    version = renderer.renderer(ctx)
    docs = {path: ctx.doc(path) for path in JSON_FILES if path not in layout.PROTOCOL_SECTION_PAYLOAD.values()}
    docs.update({path: ctx.optional_doc(path) for path in layout.PROTOCOL_SECTION_PAYLOAD.values()})
    figures = [layout.data_name(path) for path in layout.FIGURES if path in ctx.bag().files]
    expected = report_markdown(docs, ctx.sha(layout.PROTOCOL_JSON), figures).encode("utf-8")
    if data != expected:
        raise Failed(f"report.md is not the report of these records (renderer {version}): "
                     f"{renderer.first_difference(data, expected)}; a reader would see text the "
                     "records do not support.")
    return f"{len(data)} bytes, equal to the verifier's rendering of the records (renderer {version})"
