"""The generated large split the benchmarks run on: random short sentences from a small word list,
the repository's protocol resized to them, and a resource lock for them with any classifier
folder, and a tiny generated classifier. Shared by scripts/bench_sharded.py, scripts/bench_large.py and
the test fixtures (tests/factory.py), so that every figure is measured on the same data.
`write_protocol` writes the edited protocol copies that benchmarks hand to `job run --protocol`:
bench.py's formal run, bench_sweep's loop, bench_memory and `make_protocol` below."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SEED = 20240601
WORDS = ["good", "great", "fine", "bad", "awful", "dull", "movie", "film", "plot", "actor", "story", "funny", "boring",
         "warm", "cold", "charming", "bleak", "smart", "silly", "moving", "flat", "lovely", "tedious", "bright", "dark"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_data(path: Path, rows: int, seed: int = SEED) -> Path:
    """`rows` rows (idx int32, sentence string, label int64) of 3-24 random words, labels 0/1."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 24))) + " ." for _ in range(rows)]
    table = pa.table({"idx": pa.array(range(rows), pa.int32()), "sentence": pa.array(sentences, pa.string()),
                      "label": pa.array([rng.randrange(2) for _ in range(rows)], pa.int64())})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def write_protocol(path: Path, doc: dict[str, Any], inference: dict[str, Any] | None = None) -> Path:
    """`doc`, a protocol document, written to `path` with the fields of `inference` set in its
    `inference` section; `doc` itself is left as it was. The copy is what a benchmark hands to
    `job run --protocol`, so the job checks it as it checks any protocol."""
    edited = {**doc, "inference": {**doc["inference"], **(inference or {})}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(edited, indent=2) + "\n")
    return path


def make_protocol(path: Path, rows: int, threads: int | None = None) -> Path:
    """The repository's protocol with pools explore 256, calibration 256 and audit the rest of
    `rows`; torch_threads `threads` when given."""
    doc = json.loads((REPO / "provenance.json").read_text())
    sizes = {"explore": 256, "calibration": 256, "audit": rows - 512}
    for pool in doc["split"]["pools"]:
        pool["size"] = sizes[pool["name"]]
    doc["resources"]["dataset"]["rows"] = rows
    return write_protocol(path, doc, {} if threads is None else {"torch_threads": threads})


def make_lock(path: Path, model_dir: Path, dataset: Path, rows: int, labels: list[str]) -> Path:
    """A resource lock with absolute local paths and the files' real hashes."""
    def entry(repo_path: str, local: Path) -> dict[str, Any]:
        return {"path": repo_path, "size": local.stat().st_size, "sha256": sha256(local), "local_path": str(local)}

    lock = {
        "model": {"repo_id": "test/tiny-distilbert", "repo_type": "model", "revision": "local",
                  "files": [entry(p.name, p) for p in sorted(model_dir.iterdir())]},
        "dataset": {"repo_id": "test/tiny-sst2", "repo_type": "dataset", "revision": "local",
                    "files": [entry("data/validation-00000-of-00001.parquet", dataset)],
                    "rows": rows, "columns": {"idx": "int32", "sentence": "string", "label": "int64"},
                    "labels": labels},
    }
    path.write_text(json.dumps(lock, indent=2))
    return path


def make_model(out: Path, num_labels: int = 2, seed: int = 0) -> Path:
    """A randomly initialised 2-layer DistilBERT classifier with a small word-level vocabulary."""
    import torch
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    out.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "'s", *WORDS]
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (out / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512, "do_lower_case": True}))
    torch.manual_seed(seed)
    config = DistilBertConfig(vocab_size=len(vocab), dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                              max_position_embeddings=512, num_labels=num_labels, pad_token_id=0)
    model = DistilBertForSequenceClassification(config)
    with torch.no_grad():  # make it confident so that calibration has something to fix
        model.classifier.weight.mul_(40.0)
    model.save_pretrained(out, safe_serialization=True)
    return out
