"""Sentence pairs for a model with segment embeddings (a BERT NLI classifier, type_vocab_size 2):
the tokenizer's token type ids reach the model in a run and in its reproduction, and the bundle
verifies and reproduces bit for bit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from bundle.dsse import Envelope
from job.cli import main as job_main
from job.dataset import DatasetSpec, load_rows
from job.publishing.signing_keys import generate
from tests.anymodel import make_any_world
from verify.__main__ import main as verify_main


@pytest.fixture(scope="module")
def pair_run(tmp_path_factory: pytest.TempPathFactory, signing_key_dir: Path) -> tuple[Path, Path, Path]:
    """(protocol, lock, bundle) of a BERT pair classifier over 3 classes, its labels in reverse order."""
    root = tmp_path_factory.mktemp("bert-pairs")
    protocol, lock = make_any_world(root, arch="bert", k=3, fmt="jsonl", paired=True, sizes=(4, 24, 30))
    out = root / "run"
    assert job_main(["run", "--protocol", str(protocol), "--resources", str(lock), "--out", str(out),
                     "--signing-key", str(signing_key_dir / "signing-key.pem"), "--no-progress"]) == 0
    return protocol, lock, out


def _model_logits(lock: Path, protocol: Path, bundle: Path, with_types: bool) -> tuple[np.ndarray, np.ndarray]:
    """(stored calibration logits, transformers' logits row by row in dataset label order)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    files = json.loads(lock.read_text())
    model_dir = Path(files["model"]["files"][0]["local_path"]).parent
    ds = json.loads(protocol.read_text())["resources"]["dataset"]
    rows = load_rows([Path(f["local_path"]) for f in files["dataset"]["files"]], ds, DatasetSpec.from_protocol(ds))
    table = pq.read_table(bundle / "data" / "predictions" / "calibration.parquet")
    position = {int(i): p for p, i in enumerate(rows.ids)}
    texts, pairs = rows.inputs([position[i] for i in table.column("idx").to_pylist()])
    stored = np.stack([table.column(f"logit_{j}").to_numpy() for j in range(3)], axis=1)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, attn_implementation="eager").eval()
    found = []
    with torch.inference_mode():
        for text, pair in zip(texts, pairs or [], strict=True):
            enc = tok(text, pair, truncation=True, max_length=512, return_tensors="pt", return_token_type_ids=True)
            types: Any = enc["token_type_ids"] if with_types else None
            z = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], token_type_ids=types).logits
            found.append(z[0].numpy()[::-1])  # the model's outputs are the dataset's labels reversed
    return stored, np.array(found)


def test_the_second_text_reaches_the_model_as_the_second_segment(pair_run):
    protocol, lock, bundle = pair_run
    stored, with_types = _model_logits(lock, protocol, bundle, with_types=True)
    np.testing.assert_allclose(stored, with_types, rtol=1e-5, atol=1e-5)
    _, without = _model_logits(lock, protocol, bundle, with_types=False)
    assert np.abs(stored - without).max() > 1e-3  # the segment embeddings matter, so the test can fail
    env = json.loads((bundle / "data" / "environment.json").read_text())
    assert env["torch"]["forward"].endswith("BertForSequenceClassification")


def test_the_pair_bundle_verifies_and_reproduces_bit_for_bit(pair_run, signing_key_dir, tmp_path, capsys):
    _, lock, bundle = pair_run
    reproducer = tmp_path / "reproducer"
    generate(reproducer)
    att = tmp_path / "reproduction.intoto.json"
    assert job_main(["reproduce", str(bundle), "--out", str(att), "--signing-key",
                     str(reproducer / "signing-key.pem"), "--resources", str(lock), "--no-progress"]) == 0
    predicate = json.loads(Envelope.from_json(att.read_bytes()).payload)["predicate"]
    assert (predicate["verdict"], predicate["rows"]["compared"], predicate["rows"]["identical"]) == \
        ("bit-identical", 54, 54)
    capsys.readouterr()
    code = verify_main([str(bundle), "--trusted-key", str(signing_key_dir / "signing-key.pub.pem"),
                        "--reproduction", str(att), "--trusted-reproducer", str(reproducer / "signing-key.pub.pem")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.rstrip().endswith("logits reproduced bit for bit by 1 trusted party (full: 54 rows)")


def test_a_sampled_reproduction_feeds_the_same_segments(pair_run, tmp_path):
    _, lock, bundle = pair_run
    reproducer = tmp_path / "reproducer"
    generate(reproducer)
    att = tmp_path / "sample.intoto.json"
    assert job_main(["reproduce", str(bundle), "--out", str(att), "--signing-key",
                     str(reproducer / "signing-key.pem"), "--resources", str(lock), "--no-progress",
                     "--sample", "5", "--seed", "3"]) == 0
