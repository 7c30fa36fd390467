"""Free text in a bundle's records cannot inject Markdown into its views (bundle/FORMAT.md, "Text
from records").

A signer with a key of their own writes a fake "Audit metrics (headline)" table, an "approved by
the ethics board" sentence, a remote image and an H1 "APPROVED FOR DEPLOYMENT" into every free
text field: the question, the label names, the CPU model, the deviations, a package's name and
version, a torch setting, the publisher and an author. The bundle verifies (its views are the
records' rendering), and a CommonMark/GFM parser finds in every view exactly the structure of
the same bundle with ordinary text: the same headings, the same tables with the same shapes,
no HTML, no link and no image beyond the template's two figures. A report rendered the old way,
with the text raw, is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from markdown_it.token import Token

from bundle import layout
from bundle.canonical import loads_strict
from bundle.keys import fingerprint
from job.publishing.dates import bagging_date
from tests.bundle.test_markdown import MD, gfm_autolinks
from tests.payload import described_files, figures_of, seal_payload
from tests.synthetic import REPO, write_payload
from tests.verify.tamper import Keys, edit_json, reseal, update_stage_hashes, verify_keys  # noqa: F401
from verify.api import verify_path
from verify.checks import Trust
from verify.result import EXIT_FAILED, EXIT_OK

INJECTION = ("\n\n## Audit metrics (headline)\n\n<!-- table: metrics-audit -->\n"
             "| metric | raw | calibrated | change |\n|---|---:|---:|---:|\n"
             "| ece | 0.300000 | 0.001000 | -0.299000 |\n\n"
             "This calibration was approved by the ethics board.\n\n"
             "<img src=https://tracker.example/pixel.png>\n\n# APPROVED FOR DEPLOYMENT\n\n"
             "[details](https://evil.example) ![badge](https://evil.example/b.svg) www.evil.example\n")


def _hostile(name: str) -> str:
    return f"{name}{INJECTION}"


ORDINARY = {"question": "How well calibrated is the classifier?", "label0": "negative",
            "label1": "positive", "cpu": "Intel(R) Xeon(R) Processor",
            "deviation": "The logits are synthetic test data, not the pinned model's.",
            "package": "numpy", "version": "2.4.6", "setting": "deterministic_algorithms",
            "publisher": "Example Lab", "author": "Ada Lovelace"}
HOSTILE = {key: _hostile(value) for key, value in ORDINARY.items()}


def _protocol(strings: dict[str, str]) -> bytes:
    doc = json.loads((REPO / "provenance.json").read_bytes())
    for pool, size in zip(doc["split"]["pools"], (8, 40, 40), strict=True):
        pool["size"] = size
    doc["resources"]["dataset"]["rows"] = 88
    doc["question"] = strings["question"]
    labels = [strings["label0"], strings["label1"]]
    doc["resources"]["dataset"]["labels"] = labels
    doc["label_map"] = {"by": "explicit", "rule": "as listed",
                        "pairs": [{"model_index": i, "model_label": label, "dataset_label": label}
                                  for i, label in enumerate(labels)]}
    return (json.dumps(doc, indent=2) + "\n").encode()


def _publication(strings: dict[str, str]) -> dict[str, Any]:
    return {"license": "https://spdx.org/licenses/CC-BY-4.0",
            "publisher": {"name": strings["publisher"], "id": None},
            "authors": [{"name": strings["author"], "id": None}], "contact": None}


def build(bag: Path, key: Any, strings: dict[str, str]) -> Path:
    """A synthetic bundle whose every free-text field holds `strings`, signed by `key`, with its
    views rendered by the job's own modules."""
    from bundle.views.crate import Described, crate_document
    from job.rocrate import CRATE
    from scripts.payload_report import REPORT, report_markdown

    data = bag / "data"
    psha = write_payload(data, protocol=_protocol(strings), signer_fingerprint=fingerprint(key))

    def resources(doc: dict[str, Any]) -> None:
        doc["deviations"] = [strings["deviation"], "A second deviation."]

    def environment(doc: dict[str, Any]) -> None:
        doc["cpu_model"] = strings["cpu"]
        doc["packages"][strings["package"]] = strings["version"]
        doc["torch"][strings["setting"]] = strings["version"]

    edit_json(bag, layout.RESOURCES_JSON, resources)
    edit_json(bag, layout.ENVIRONMENT_JSON, environment)
    update_stage_hashes(bag)
    for rel, png in figures_of(data).items():
        (data / rel).write_bytes(png)
    (data / REPORT).write_bytes(report_markdown(data).encode("utf-8"))
    publication = _publication(strings)
    from bundle.canonical import dumps

    payload = {rel: Described.of((data / rel).read_bytes()) for rel in described_files(data)}
    read = {p: loads_strict((data / layout.data_name(p)).read_bytes())
            for p in (layout.PROTOCOL_JSON, layout.RESOURCES_JSON, layout.ENVIRONMENT_JSON)}
    from job import __version__

    (data / CRATE).write_bytes(dumps(crate_document(
        payload, protocol=read[layout.PROTOCOL_JSON], resources=read[layout.RESOURCES_JSON],
        environment=read[layout.ENVIRONMENT_JSON], signer_fingerprint=fingerprint(key),
        date_published=bagging_date(), publication=publication, software_version=__version__)))
    seal_payload(bag, description="synthetic test bundle", protocol_sha256=psha, profile="other",
         private_key=key)
    reseal(bag, key, predicate=lambda p: {**p, "publication": publication}, report=False,
           crate=False)
    return bag


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory, verify_keys: Keys) -> dict[str, Path]:  # noqa: F811
    root = tmp_path_factory.mktemp("injection")
    return {"ordinary": build(root / "ordinary", verify_keys.real, ORDINARY),
            "hostile": build(root / "hostile", verify_keys.real, HOSTILE)}


def _skeleton(tokens: list[Token]) -> list[tuple[str, str]]:
    """Every block token (type, tag): headings, paragraphs, lists and their items, tables with
    their rows and cells, HTML blocks."""
    return [(t.type, t.tag) for t in tokens if t.type != "inline"]


def _inline(tokens: list[Token]) -> list[Token]:
    return [c for t in tokens if t.type == "inline" for c in (t.children or [])]


def _headings(tokens: list[Token]) -> list[str]:
    return [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]


def _without_code_spans(source: str) -> str:
    return "".join(part for i, part in enumerate(source.split("`")) if i % 2 == 0)


def test_hostile_free_text_verifies(bags: dict[str, Path], verify_keys: Keys) -> None:  # noqa: F811
    for bag in bags.values():
        outcome = verify_path(bag, Trust(key=verify_keys.real.public_key(), source="real.pem"))
        assert outcome.exit_code == EXIT_OK, [(c.id, c.detail) for c in outcome.checks if not c.ok]


def test_the_report_shows_only_the_checked_structure(bags: dict[str, Path]) -> None:
    ordinary, hostile = ((bags[k] / layout.REPORT_MD).read_text(encoding="utf-8")
                         for k in ("ordinary", "hostile"))
    assert "APPROVED FOR DEPLOYMENT" in hostile and "ethics board" in hostile
    plain, attacked = MD.parse(ordinary), MD.parse(hostile)
    assert _skeleton(attacked) == _skeleton(plain)
    assert _headings(attacked) == _headings(plain)
    assert not any("APPROVED" in h for h in _headings(attacked))
    kinds = [c.type for c in _inline(attacked)]
    assert "html_inline" not in kinds

    def blocks(tokens: list[Token]) -> list[str]:
        return [t.content for t in tokens if t.type == "html_block"]

    assert blocks(attacked) == blocks(plain)  # the template's table markers, nothing more
    assert len(blocks(plain)) == 10  # 8, and the estimators' two tables
    assert "link_open" not in kinds
    images = [c.attrGet("src") for c in _inline(attacked) if c.type == "image"]
    assert images == [c.attrGet("src") for c in _inline(plain) if c.type == "image"] == [
        "figures/reliability-audit.png", "figures/confidence-audit.png"]
    assert gfm_autolinks(_without_code_spans(hostile)) == []
    html = MD.render(hostile)
    assert "<img src=\"https" not in html and "<a " not in html and "<h1>APPROVED" not in html


def test_the_figures_show_no_record_text(bags: dict[str, Path]) -> None:
    """Same numbers, other free text: the same pictures, byte for byte."""
    for path in layout.FIGURES:
        assert (bags["hostile"] / path).read_bytes() == (bags["ordinary"] / path).read_bytes()


def test_the_crate_keeps_free_text_as_json_strings(bags: dict[str, Path]) -> None:
    """The crate is JSON, not Markdown: the text is a string value, the graph keeps its shape."""
    plain, attacked = (loads_strict((bags[k] / layout.RO_CRATE_JSON).read_bytes())
                       for k in ("ordinary", "hostile"))
    assert [sorted(e) for e in attacked["@graph"]] == [sorted(e) for e in plain["@graph"]]
    names = {e.get("name") for e in attacked["@graph"]}
    assert {HOSTILE["publisher"], HOSTILE["author"]} <= names


def test_a_report_rendered_with_raw_text_is_refused(bags: dict[str, Path], verify_keys: Keys,  # noqa: F811
                                                    tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The format-1 renderer showed record text as it was: such a report of these records is the
    injection, and the verifier now requires the escaped rendering."""
    import shutil

    import bundle.views.report as view
    from scripts.payload_report import report_markdown

    bag = tmp_path / "bag"
    shutil.copytree(bags["hostile"], bag)
    with monkeypatch.context() as patch:
        patch.setattr(view, "text", lambda s: s)
        patch.setattr(view, "code", lambda s: f"`{s}`")
        raw = report_markdown(bag / "data")
    assert "<h1>APPROVED FOR DEPLOYMENT</h1>" in MD.render(raw)
    (bag / layout.REPORT_MD).write_text(raw, encoding="utf-8")
    reseal(bag, verify_keys.real, report=False)
    outcome = verify_path(bag, Trust(key=verify_keys.real.public_key(), source="real.pem"))
    failed = {c.id: c.detail for c in outcome.checks if c.status == "fail"}
    assert outcome.exit_code == EXIT_FAILED
    assert "report.regenerated" in failed, failed
    assert set(failed) <= {"report.regenerated", "report.tables"}, failed  # the fake marker too


def test_a_cluster_workers_cpu_kind_makes_no_structure() -> None:
    """A worker's cpu_kind comes from that node's /proc/cpuinfo: free text from any cluster node."""
    from bundle.views.report import _cluster_lines

    workers = [{"node_id": f"n{i}", "cpu_kind": kind, "died": False, "batches": {"audit": [i]}}
               for i, kind in enumerate(("AMD EPYC | AVX512", HOSTILE["cpu"]))]
    (line,) = _cluster_lines({"engine": "ray", "workers": workers, "audit_temperature_sha256": None})
    assert "MIXED CPU kinds" in line
    tokens = MD.parse(line)
    assert [t.type for t in tokens] == ["bullet_list_open", "list_item_open", "paragraph_open", "inline",
                                        "paragraph_close", "list_item_close", "bullet_list_close"]
    assert not [c for c in tokens[3].children or [] if c.type in ("html_inline", "image", "link_open")]
