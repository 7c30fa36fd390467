"""Any classifier on any dataset layout: tiny BERT and RoBERTa models whose outputs are the dataset's
labels in another order, datasets of 2, 3, 20 and 100 classes with one text or a pair, in Parquet, JSON
lines and CSV, through `python -m job run` and the verifier; the label map caught before inference."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from job.cli import main
from job.dataset import DatasetSpec, load_rows, text_hash
from job.errors import JobError
from tests.anymodel import make_any_world, make_rows
from tests.factory import edited_json

WORLDS = {  # name: (architecture, K, format, pairs, id column)
    "roberta-nli-jsonl": ("roberta", 3, "jsonl", True, "id"),
    "bert-topics-csv-rownumber": ("bert", 20, "csv", False, None),
    "roberta-sentiment-parquet": ("roberta", 2, "parquet", False, "id"),
    "bert-100-classes-parquet": ("bert", 100, "parquet", False, "id"),
}


@pytest.fixture(scope="module", params=sorted(WORLDS))
def any_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            signing_key_dir: Path) -> tuple[str, Path, Path, Path]:
    arch, k, fmt, paired, id_column = WORLDS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    protocol, lock = make_any_world(root, arch=arch, k=k, fmt=fmt, paired=paired, sizes=(6, 30, 40),
                                    id_column=id_column)
    out = root / "run"
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        rc = main(["run", "--protocol", str(protocol), "--resources", str(lock), "--out", str(out),
                   "--signing-key", str(signing_key_dir / "signing-key.pem"), "--no-progress"])
    assert rc == 0
    (root / "stderr.txt").write_text(stderr.getvalue())
    return request.param, protocol, lock, out


def test_the_verifier_recomputes_every_figure_of_the_bundle(any_run):
    from verify.api import verify_path
    from verify.context import Trust

    name, _, _, out = any_run
    result = verify_path(out, Trust())  # the signer is another test's business; every other check passes
    failed = [(c.id, c.detail) for c in result.checks if c.status != "pass" and c.id != "signature.signer-trusted"]
    assert failed == []
    ids = {c.id for c in result.checks}
    assert {"labels.map", "metrics.audit.raw", "metrics.audit.calibrated", "bootstrap.intervals",
            "stability.refit", "fit.refit"} <= ids
    k = WORLDS[name][1]
    table = pq.read_table(out / "data" / "predictions" / "audit.parquet")
    assert [c for c in table.column_names if c.startswith("logit_")] == [f"logit_{j}" for j in range(k)]


def test_logits_are_stored_in_dataset_label_order(any_run):
    """The model's outputs are the dataset's labels reversed: stored logit_j is model output K-1-j."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    name, protocol, lock, out = any_run
    _, k, _, _, _ = WORLDS[name]
    model_dir = Path(json.loads(lock.read_text())["model"]["files"][0]["local_path"]).parent
    doc = json.loads(protocol.read_text())
    rows = load_rows([Path(f["local_path"]) for f in json.loads(lock.read_text())["dataset"]["files"]],
                     doc["resources"]["dataset"], DatasetSpec.from_protocol(doc["resources"]["dataset"]))
    table = pq.read_table(out / "data" / "predictions" / "calibration.parquet").slice(0, 3)
    position = {int(i): p for p, i in enumerate(rows.ids)}
    positions = [position[i] for i in table.column("idx").to_pylist()]
    texts, pairs = rows.inputs(positions)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, attn_implementation="eager").eval()
    with torch.inference_mode():
        for r, (text, pair) in enumerate(zip(texts, pairs or [None] * len(texts), strict=True)):
            enc = tok(text, pair, truncation=True, max_length=512, return_tensors="pt")
            z = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits[0].numpy()
            stored = np.array([table.column(f"logit_{j}")[r].as_py() for j in range(k)], dtype=np.float32)
            np.testing.assert_allclose(stored, z[::-1], rtol=1e-5, atol=1e-5)
            assert table.column("text_sha256")[r].as_py() == text_hash(text, pair)


def test_the_report_shows_the_label_map_and_the_environment_names_the_forward(any_run):
    name, _, _, out = any_run
    report = (out / "data" / "report.md").read_text()
    assert "## Label map" in report and "| 0 | " in report
    env = json.loads((out / "data" / "environment.json").read_text())
    arch = WORLDS[name][0]
    assert env["torch"]["forward"].endswith({"bert": "BertForSequenceClassification",
                                              "roberta": "RobertaForSequenceClassification"}[arch])
    assert env["torch"]["allocator"]["arrow_memory_pool"] == "system"  # Arrow's buffers go back with malloc_trim


def test_a_fallback_to_transformers_is_recorded_and_printed(any_run):
    """No silent fallback: a model the packed forward does not implement runs transformers' forward,
    and the run both records why (environment.json forward_choice) and says so."""
    name, _, _, out = any_run
    env = json.loads((out / "data" / "environment.json").read_text())
    choice = env["forward_choice"]
    assert choice["name"] == "transformers" and "forward_check" not in env
    assert choice["reason"] == f"fallback: config.json's model_type is {WORLDS[name][0]!r}, not 'distilbert'"
    printed = (out.parent / "stderr.txt").read_text()
    assert f"note: the model runs on transformers' own forward ({choice['reason']})" in printed


def test_a_label_map_the_model_contradicts_stops_the_run_before_inference(tmp_path, monkeypatch, capsys):
    protocol, lock = make_any_world(tmp_path, arch="bert", k=3, fmt="parquet", paired=False, sizes=(2, 12, 12))

    def swap(doc):
        pairs = doc["label_map"]["pairs"]
        pairs[0]["model_label"], pairs[1]["model_label"] = pairs[1]["model_label"], pairs[0]["model_label"]
        pairs[0]["dataset_label"], pairs[1]["dataset_label"] = pairs[1]["dataset_label"], pairs[0]["dataset_label"]

    wrong = edited_json(protocol, tmp_path / "wrong.json", swap)

    def no_inference(*args, **kwargs):
        raise AssertionError("inference ran")

    monkeypatch.setattr("job.engines.load_model", no_inference)  # the name the local engine calls
    for command in (["smoke"], ["run", "--out", str(tmp_path / "run"), "--ephemeral-key", "--no-progress"]):
        assert main([*command, "--protocol", str(wrong), "--resources", str(lock)]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")][-1]
        assert "config names its outputs" in err and "label_map" in err and "\n" not in err
    assert not (tmp_path / "run").exists()


def test_a_label_map_that_is_not_a_bijection_is_refused_on_load(tmp_path):
    from job.protocol import load_protocol

    protocol, _ = make_any_world(tmp_path, arch="bert", k=3, fmt="parquet", paired=False, sizes=(2, 12, 12))
    twice = edited_json(protocol, tmp_path / "twice.json",
                        lambda d: d["label_map"]["pairs"][0].update(
                            dataset_label=d["label_map"]["pairs"][1]["dataset_label"],
                            model_label=d["label_map"]["pairs"][1]["model_label"]))
    with pytest.raises(JobError, match="one-to-one"):
        load_protocol(twice)


def test_the_verifier_refuses_a_label_map_that_is_not_a_bijection():
    from verify.labelmap import check_label_map
    from verify.result import Failed

    labels = ["a", "b", "c"]
    good = [{"model_index": i, "model_label": n.upper(), "dataset_label": n} for i, n in enumerate(reversed(labels))]
    doc = {"resources": {"dataset": {"labels": labels}}, "label_map": {"by": "name", "pairs": good}}
    assert "bijection" in check_label_map(doc, {"audit": 3})
    for broken, pool_columns in (
        ([*good[:2], {**good[2], "dataset_label": "b", "model_label": "B"}], {"audit": 3}),  # two onto "b"
        ([*good[:2], {**good[2], "model_label": "Z"}], {"audit": 3}),  # by name, but names differ
        (good, {"audit": 2}),  # predictions with another number of classes
    ):
        with pytest.raises(Failed):
            check_label_map({**doc, "label_map": {"by": "name", "pairs": broken}}, pool_columns)


def test_rows_by_row_number_with_label_names_and_pair_hashes(tmp_path):
    path = make_rows(tmp_path / "d.csv", "csv", 12, 3, paired=True, id_column=None)
    import pyarrow as pa
    import pyarrow.csv as pcsv

    table = pcsv.read_csv(path)
    names = ["x", "y", "z"]
    named = table.set_column(table.column_names.index("label"), "label",
                             pa.array([names[v] for v in table.column("label").to_pylist()]))
    pcsv.write_csv(named, tmp_path / "named.csv")
    spec = {"rows": 12, "columns": {"label": "string"}, "labels": names}
    rows = load_rows(tmp_path / "named.csv", spec, DatasetSpec(format="csv", id_column=None, text_column="text",
                                                               text_pair_column="hypothesis"))
    assert rows.ids.tolist() == list(range(12))
    assert rows.labels.tolist() == table.column("label").to_pylist()
    pair_json = json.dumps([rows.texts[3], rows.pairs[3]], separators=(",", ":")).encode()  # type: ignore[index]
    assert rows.text_sha256[3] == hashlib.sha256(pair_json).hexdigest()
    with pytest.raises(JobError, match="no column 'premise'"):
        load_rows(tmp_path / "named.csv", spec, DatasetSpec(format="csv", id_column=None, text_column="premise"))
    with pytest.raises(JobError, match="not one of the labels"):
        load_rows(tmp_path / "named.csv", {**spec, "labels": ["x", "y"]},
                  DatasetSpec(format="csv", id_column=None, text_column="text"))
