"""The label map that cannot look normal, as a new user meets it: a 4-class classifier whose data
writes its class names in another order (the integer labels unchanged). `job lock` reads the names
from the data, `init` maps the model's labels onto them by name, and the run scores every row
through the wrong names. The run must warn loudly (its output, metrics.json, the report), name the
permutation that undoes the mistake, and the verifier must derive and show the same warning."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from job.cli import main
from tests.anymodel import make_hf_model
from tests.factory import WORDS
from tests.job.test_own_classifier import DATA_PATH, hf_metadata, init_args, lock_args

MODEL_LABELS = ["WORLD", "SPORTS", "BUSINESS", "SCIENCE"]
WRITTEN = ["sports", "world", "science", "business"]
"""The names the data's metadata gives labels 0..3: the model's classes, in another order."""
ROWS = 160


def _aim_the_head(model_dir: Path, premises: list[str], hypotheses: list[str]) -> None:
    """A random classifier head gives every row the same class; aim it along the two directions in
    which these rows' pooled features vary most, so that several classes are predicted."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, attn_implementation="eager").eval()
    with torch.inference_mode():
        enc = tok(premises, hypotheses, truncation=True, max_length=512, padding=True, return_tensors="pt")
        pooled = model.bert(**enc).pooler_output
        centre = pooled.mean(dim=0)
        _, scale, v = torch.linalg.svd(pooled - centre, full_matrices=False)
        w = torch.stack([v[0], -v[0], v[1], -v[1]]) / scale[:2].repeat_interleave(2)[:, None] * 4.0 * ROWS ** 0.5
        model.classifier.weight.copy_(w)
        model.classifier.bias.copy_(-(w @ centre))
    model.save_pretrained(model_dir, safe_serialization=True)


def _write(path: Path, premises: list[str], hypotheses: list[str], labels: list[int], names: list[str]) -> None:
    table = pa.table({"idx": pa.array(range(ROWS), pa.int32()), "premise": pa.array(premises, pa.string()),
                      "hypothesis": pa.array(hypotheses, pa.string()), "label": pa.array(labels, pa.int64())})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata({b"huggingface": hf_metadata(names)}), path)


def _run(root: Path, key: Path) -> Path:
    """lock, init and run on root/model and root/dataset; the bundle's folder."""
    assert main(lock_args(root, root / "lock.json")) == 0
    assert main(init_args(root / "protocol.json", "--resources", str(root / "lock.json"))) == 0
    assert main(["run", "--protocol", str(root / "protocol.json"), "--resources", str(root / "lock.json"),
                 "--out", str(root / "run"), "--signing-key", str(key), "--no-progress"]) == 0
    return root / "run"


def _predicted(run: Path) -> dict[int, int]:
    """idx -> the class the run predicted, over both pools it ran."""
    out: dict[int, int] = {}
    for pool in ("calibration", "audit"):
        cols = pq.read_table(run / "data" / "predictions" / f"{pool}.parquet", columns=["idx", "pred"]).to_pydict()
        out.update(zip(cols["idx"], cols["pred"], strict=True))
    return out


def test_names_in_another_order_warn_loudly_and_name_the_permutation(tmp_path: Path, signing_key_dir: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from verify.api import verify_path
    from verify.context import Trust
    from verify.verdict_output import table

    rng = random.Random(11)
    premises = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + " ." for _ in range(ROWS)]
    hypotheses = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + " ." for _ in range(ROWS)]
    key = signing_key_dir / "signing-key.pem"
    honest = tmp_path / "honest"
    model = make_hf_model(honest / "model", "bert", MODEL_LABELS, seed=5)
    _aim_the_head(model, premises, hypotheses)
    # First the names in the model's order: the run's own predictions become the labels (7 rows of 8).
    _write(honest / "dataset" / DATA_PATH, premises, hypotheses, [i % 4 for i in range(ROWS)],
           [name.lower() for name in MODEL_LABELS])
    truth = _predicted(_run(honest, key))
    labels = [(truth.get(i, 0) + (0 if i % 8 else 1)) % 4 for i in range(ROWS)]
    # Then the same integers with the names written in another order, as a new user's data may have them.
    swapped = tmp_path / "swapped"
    shutil.copytree(model, swapped / "model")
    _write(swapped / "dataset" / DATA_PATH, premises, hypotheses, labels, WRITTEN)
    capsys.readouterr()
    run = _run(swapped, key)
    protocol = json.loads((swapped / "protocol.json").read_text())
    assert protocol["resources"]["dataset"]["labels"] == WRITTEN  # init took the data's names, by name
    out = capsys.readouterr().out
    metrics = json.loads((run / "data" / "metrics.json").read_text())
    audit = metrics["per_class"]["audit"]
    # Model output i is stored as the data's label WRITTEN.index(MODEL_LABELS[i].lower()); the rows
    # say label i, so predicted class WRITTEN.index(...) is right when read as i.
    undo = {WRITTEN.index(name.lower()): i for i, name in enumerate(MODEL_LABELS)}
    predicted = {c for c, count in enumerate(audit["predicted"]) if count}
    assert len(predicted) >= 3  # the model predicts several classes, so the swaps are visible
    assert all(audit["best_permutation"]["map"][c] == undo[c] for c in predicted), audit
    n = sum(audit["support"])
    assert audit["best_permutation"]["correct"] / n >= 0.8 > sum(audit["correct"]) / n
    warned = [w for w in metrics["warnings"] if w.startswith("reading each predicted label through the permutation")]
    assert len(warned) == 1 and "the label map is probably wrong" in warned[0]
    assert f"WARNING: {warned[0]}." in out
    report = (run / "data" / "report.md").read_text()
    assert report.index("## Warnings") < report.index("## Question") and f"**WARNING: {warned[0]}.**" in report
    assert "### Per class, audit pool" in report and "Confusion matrix, audit pool" in report
    result = verify_path(run, Trust())
    checks = {c.id: c for c in result.checks}
    assert checks["metrics.per-class"].status == "pass", checks["metrics.per-class"].detail
    assert checks["metrics.warnings"].status == "pass" and warned[0] in checks["metrics.warnings"].detail
    assert [c.id for c in result.checks if c.status == "fail" and c.id != "signature.signer-trusted"] == []
    assert warned[0] in table(result)
