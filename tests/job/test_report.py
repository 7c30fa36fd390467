"""data/report.md (rendered by bundle/views/report.py): generated from the payload's own files, with machine-checkable
tables that parse back to exactly the JSON values under the documented formatting rule."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from bundle import layout
from bundle.canonical import dumps, loads_strict
from bundle.layout import data_name
from bundle.views.report import FIGURE_FILES, cell, change, expected_tables
from bundle.views.report import report_markdown as render
from job.protocol import StabilitySpec, load_protocol
from scripts.payload_report import load_docs, report_markdown
from tests.payload import bootstrap_from_files, figures_of, stability_from_files
from verify.report_md import compare, parse_tables
from verify.result import Failed


def check_report(markdown: str, docs: dict[str, Any]) -> list[str]:
    """The verifier's reading of the report's tables, compared with the tables the records give."""
    return compare(parse_tables(markdown), expected_tables(docs))


@pytest.fixture
def base_data(tiny_data: Path, tmp_path: Path) -> Path:
    """A copy without the optional files."""
    data = tmp_path / "base"
    shutil.copytree(tiny_data, data)
    for name in ("bootstrap.json", "stability.json", "report.md", "ro-crate-metadata.json"):
        (data / name).unlink(missing_ok=True)
    shutil.rmtree(data / "figures", ignore_errors=True)
    return data


@pytest.fixture
def full_data(base_data: Path) -> Path:
    """The copy with bootstrap, stability (sizes that fit the tiny pool) and figures."""
    protocol = load_protocol(base_data / "protocol.json")
    assert protocol.bootstrap is not None
    bootstrap = bootstrap_from_files(protocol.bootstrap, protocol.sha256, base_data)
    (base_data / "bootstrap.json").write_bytes(dumps(bootstrap))
    stability = stability_from_files(StabilitySpec(sizes=(5, 10, 20)), protocol.fit, protocol.sha256, base_data)
    (base_data / "stability.json").write_bytes(dumps(stability))
    for rel, png in figures_of(base_data).items():
        (base_data / rel).parent.mkdir(parents=True, exist_ok=True)
        (base_data / rel).write_bytes(png)
    return base_data


def test_formatting_rule():
    assert cell(0.1234565) == format(0.1234565, ".6f")
    assert cell(1.0) == "1.000000" and cell(-1e-9) == "-0.000000"
    assert cell(3) == "3" and cell(True) == "yes" and cell(False) == "no" and cell(None) == "n/a"
    assert cell("no claim") == "no claim"
    assert change(0.25, 0.5) == "-0.250000" and change(0.5, 0.25) == "+0.250000"
    assert change(7, 7) == "+0" and change(5, 7) == "-2"


def test_report_is_consistent_and_deterministic(full_data: Path):
    md = report_markdown(full_data)
    assert md == report_markdown(full_data)
    docs = load_docs(full_data)
    assert check_report(md, docs) == []
    tables = parse_tables(md)
    assert set(tables) == {"pools", "temperature", "metrics-audit", "metrics-calibration", "threshold",
                           "bins-audit", "bootstrap", "stability", "estimators", "bin-intervals-bin-intervals"}
    assert tables == expected_tables(docs)


def test_the_report_reads_pool_sizes_not_pool_entries(full_data: Path):
    """load_docs drops pools.json's per-row entries while parsing; the report is the same bytes as one
    rendered from the whole parsed file, the way the verifier renders it."""
    docs = load_docs(full_data)
    pools = docs[layout.POOLS_JSON]
    assert pools["pools"] and all(entry is None for members in pools["pools"].values() for entry in members)
    whole = dict(docs, **{layout.POOLS_JSON: loads_strict((full_data / "pools.json").read_bytes())})
    figures = [data_name(path) for path, _ in FIGURE_FILES]
    assert all((full_data / name).is_file() for name in figures)
    psha = hashlib.sha256((full_data / "protocol.json").read_bytes()).hexdigest()
    assert render(whole, psha, figures) == report_markdown(full_data)


def test_every_checked_number_parses_back_within_half_a_unit(full_data: Path):
    md = report_markdown(full_data)
    tables = parse_tables(md)
    m = json.loads((full_data / "metrics.json").read_text())["pools"]["audit"]
    for row in ("accuracy", "mean_confidence", "nll", "brier", "ece", "mce"):
        for kind in ("raw", "calibrated"):
            assert abs(float(tables["metrics-audit"][row][kind]) - m[kind][row]) <= 5e-7
        assert abs(float(tables["metrics-audit"][row]["change"])
                   - (m["calibrated"][row] - m["raw"][row])) <= 5e-7
    t = json.loads((full_data / "temperature.json").read_text())
    assert abs(float(tables["temperature"]["temperature"]["value"]) - t["temperature"]) <= 5e-7
    b = json.loads((full_data / "bootstrap.json").read_text())
    for metric, d in b["differences"].items():
        assert abs(float(tables["bootstrap"][metric]["lower"]) - d["lower"]) <= 5e-7
        assert tables["bootstrap"][metric]["verdict"] == d["verdict"]


def test_sections_and_figures(full_data: Path):
    md = report_markdown(full_data)
    for heading in ("## Question", "## Protocol", "## Resources", "## Pools", "## Temperature",
                    "## Metrics", "### Threshold", "## Figures", "## Uncertainty",
                    "## Calibration-size stability", "## Environment", "## What this result does not show"):
        assert f"\n{heading}\n" in md, heading
    protocol = json.loads((full_data / "protocol.json").read_text())
    assert protocol["question"] in md
    assert "](figures/reliability-audit.png)" in md and "](figures/confidence-audit.png)" in md
    resources = json.loads((full_data / "resources.json").read_text())
    for f in resources["model"]["files"] + resources["dataset"]["files"]:
        assert f["sha256"] in md
    assert "no significance claim" not in md.lower()


def test_without_the_bootstrap_there_is_no_claim(base_data: Path):
    md = report_markdown(base_data)
    assert check_report(md, load_docs(base_data)) == []
    assert "bootstrap" not in parse_tables(md) and "stability" not in parse_tables(md)
    assert "no significance claim" in md.lower()
    assert "**no claim**" in md
    assert "No figures were rendered." in md


def test_a_changed_number_is_caught(full_data: Path):
    md = report_markdown(full_data)
    docs = load_docs(full_data)
    nll = cell(docs[layout.METRICS_JSON]["pools"]["audit"]["calibrated"]["nll"])
    bad = md.replace(f"| nll | {cell(docs[layout.METRICS_JSON]['pools']['audit']['raw']['nll'])} | {nll} |",
                     f"| nll | {cell(docs[layout.METRICS_JSON]['pools']['audit']['raw']['nll'])} | 0.000001 |", 1)
    assert bad != md
    problems = check_report(bad, docs)
    assert problems == [f"metrics-audit[nll][calibrated] is '0.000001', the records give {nll!r}"]
    assert check_report(md.replace("<!-- table: threshold -->\n", ""), docs) == ["table 'threshold' is missing"]
    extra = md.replace("| nll |", "| nll |", 1) + "\n<!-- table: extra -->\n| k | v |\n|---|---:|\n| a | 1 |\n"
    assert check_report(extra, docs) == ["table 'extra' is not one the format defines here"]
    with pytest.raises(Failed, match="twice"):
        parse_tables(md + "\n<!-- table: pools -->\n| k | v |\n|---|---:|\n")


def test_tables_follow_the_documented_syntax(full_data: Path):
    md = report_markdown(full_data)
    lines = md.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("<!-- table:"):
            assert re.fullmatch(r"<!-- table: [a-z0-9-]+ -->", line)
            assert lines[i + 1].startswith("| ") and re.fullmatch(r"\|(---\|)(---:\|)+", lines[i + 2])


def test_a_boundary_fit_is_reported_as_such(base_data: Path):
    t = json.loads((base_data / "temperature.json").read_text())
    beta = 1.0 / t["t_max"]
    t.update(beta=beta, temperature=t["t_max"], boundary=True, boundary_side="t_max", bracket=[beta, beta])
    (base_data / "temperature.json").chmod(0o644)
    (base_data / "temperature.json").write_bytes(dumps(t))
    traj = json.loads((base_data / "trajectory.json").read_text())
    traj["steps"] = []
    (base_data / "trajectory.json").write_bytes(dumps(traj))
    md = report_markdown(base_data)
    assert "the boundary `t_max` was taken and flagged" in md
    assert parse_tables(md)["temperature"]["boundary"] == {"value": "yes"}
    assert check_report(md, load_docs(base_data)) == []


def test_estimators_get_their_section_and_the_coverage_caveat(full_data: Path):
    from bundle.views.report import COVERAGE_CAVEAT

    md = report_markdown(full_data)
    assert "\n### Pre-registered estimators, audit pool\n" in md and COVERAGE_CAVEAT in md
    assert check_report(md, load_docs(full_data)) == []
    metrics = json.loads((full_data / "metrics.json").read_text())
    del metrics["estimators"]
    (full_data / "metrics.json").write_bytes(dumps(metrics))
    plain = report_markdown(full_data)
    assert "Pre-registered estimators" not in plain and COVERAGE_CAVEAT not in plain
    assert "estimators" not in parse_tables(plain)
