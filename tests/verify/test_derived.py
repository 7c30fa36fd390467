"""The verifier's own report-table and crate code (verify/report_md.py, verify/crate.py) agrees
with the job's writers (bundle/views/report.py, job/rocrate.py) on real bundles, and rejects what it must."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundle import layout
from bundle.canonical import loads_strict
from bundle.views.report import expected_tables
from scripts.payload_report import load_docs
from tests.synthetic import tiny_png
from tests.verify.tamper import Keys, base, synthetic_bag, verify_keys  # noqa: F401
from verify import crate, figures, report_md
from verify.result import Failed


def _doc(bag: Path, path: str) -> object:
    return loads_strict((bag / path).read_bytes()) if (bag / path).exists() else None


def test_formatting_rule() -> None:
    assert report_md.fmt(1.0) == "1.000000" and report_md.fmt(-1e-9) == "-0.000000"
    assert report_md.fmt(3) == "3" and report_md.fmt(None) == "n/a"
    assert report_md.fmt(True) == "yes" and report_md.fmt(False) == "no"
    assert report_md.fmt("no claim") == "no claim"
    assert report_md.fmt_change(7, 7) == "+0" and report_md.fmt_change(5, 7) == "-2"
    assert report_md.fmt_change(0.25, 0.5) == "-0.250000"
    assert report_md.fmt_change(0.5, 0) == "+0.500000"
    with pytest.raises(Failed):
        report_md.fmt([1])


def test_tables_agree_with_the_job(base: tuple[Path, Keys]) -> None:  # noqa: F811
    bag, _ = base
    data = bag / "data"
    required = report_md.required_tables(
        *(_doc(bag, p) for p in (layout.METRICS_JSON, layout.TEMPERATURE_JSON, layout.POOLS_JSON,
                                 layout.BOOTSTRAP_JSON, layout.STABILITY_JSON)))  # type: ignore[arg-type]
    assert required == expected_tables(load_docs(data))
    text = (bag / layout.REPORT_MD).read_text()
    assert report_md.parse_tables(text) == required
    assert report_md.image_links(text) == ["figures/reliability-audit.png",
                                             "figures/confidence-audit.png"]


@pytest.mark.parametrize("text,words", [
    (("<!-- table: pools -->\n| pool | size |\n|---|---:|\n| audit | 1 |\n"
      "<!-- table: pools -->\n| pool | size |\n|---|---:|\n"), "twice"),
    ("<!-- table: pools -->\n| pool | size |\n| audit | 1 |\n", "separator"),
    ("<!-- table: pools -->\n| pool | size |\n|---|---:|\n| audit | 1 | 2 |\n", "cells"),
    ("<!-- table: pools -->\n| pool | size |\n|---|---:|\n| audit | 1 |\n| audit | 2 |\n",
     "twice"),
    ("<!-- table: pools -->\nno table\n", "header"),
])
def test_malformed_tables_are_refused(text: str, words: str) -> None:
    with pytest.raises(Failed, match=words):
        report_md.parse_tables(text)


def test_png_checks() -> None:
    assert figures.check_png(tiny_png(), "x.png") == (1, 1)
    png = tiny_png()
    for bad, words in ((png[:-4], "ends inside|runs past"), (b"GIF89a" + png, "signature"),
                       (png[:-5] + bytes([png[-5] ^ 1]) + png[-4:], "CRC")):
        with pytest.raises(Failed, match=words):
            figures.check_png(bad, "x.png")


def test_crate_refuses_other_context_and_dangling_references(base: tuple[Path, Keys]) -> None:  # noqa: F811
    from bundle.canonical import dumps

    bag, _ = base
    doc = loads_strict((bag / layout.RO_CRATE_JSON).read_bytes())
    assert crate.parse(dumps(doc))[1]["./"]["@type"] == "Dataset"
    other = dict(doc, **{"@context": "https://w3id.org/ro/crate/1.1/context"})
    with pytest.raises(Failed, match="@context"):
        crate.parse(dumps(other))
    dangling = dict(doc, **{"@graph": [e for e in doc["@graph"] if e["@id"] != "#run"]})
    with pytest.raises(Failed, match="#run"):
        crate.parse(dumps(dangling))
    with pytest.raises(Failed, match="not canonical"):
        crate.parse(dumps(doc) + b" ")
