"""Small generated fixtures: a tiny DistilBERT classifier, a synthetic SST-2-like parquet, a
protocol sized for them, and a resource lock pointing at them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from scripts.generated_split import WORDS, make_lock, make_model, sha256  # noqa: F401  (shared with the benchmarks)

REPO = Path(__file__).resolve().parent.parent
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"


def computes_as_avx2_or_less() -> bool:
    """Whether this process already computes as an AVX2-only CPU (or less), as on a CPU without
    AVX-512: then a run limited to AVX2 is not another arithmetic."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability()) not in {"AVX512", "AVX512_BF16", "AVX512_VNNI",
                                                                 "AVX512_AMX", "AVX512_FP16"}


def make_dataset(path: Path, rows: int = 48, num_labels: int = 2, seed: int = 0,
                 long_rows: int = 1) -> Path:
    """idx int32, sentence string, label int64, like stanfordnlp/sst2; a few rows over 512 tokens."""
    import random

    rng = random.Random(seed)
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 20))) + " . " for _ in range(rows)]
    for i in range(long_rows):
        sentences[i] = " ".join(rng.choice(WORDS) for _ in range(600)) + " "
    table = pa.table({
        "idx": pa.array(range(rows), pa.int32()),
        "sentence": pa.array(sentences, pa.string()),
        "label": pa.array([rng.randrange(num_labels) for _ in range(rows)], pa.int64()),
    })
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def make_protocol(path: Path, sizes: tuple[int, int, int] = (8, 20, 20), labels: list[str] | None = None) -> Path:
    """The repository's protocol with pool sizes and dataset shape for the small fixtures."""
    doc = json.loads((REPO / "provenance.json").read_text())
    for pool, size in zip(doc["split"]["pools"], sizes, strict=True):
        pool["size"] = size
    doc["resources"]["dataset"]["rows"] = sum(sizes)
    if labels is not None:
        doc["resources"]["dataset"]["labels"] = labels
    doc["inference"]["torch_threads"] = 1
    if "stability" in doc:
        doc["stability"]["sizes"] = [5, 10, sizes[1]]
    path.write_text(json.dumps(doc, indent=2))
    return path


def edited_json(src: Path, out: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of the JSON file src at out, after edit(doc) changed the parsed document in place."""
    doc = json.loads(src.read_text())
    edit(doc)
    out.write_text(json.dumps(doc, indent=2))
    return out


def make_world(root: Path, num_labels: int = 2, sizes: tuple[int, int, int] = (8, 20, 20)) -> tuple[Path, Path]:
    """Model, dataset, protocol and lock under root; returns (protocol, lock)."""
    labels = ["negative", "positive"] if num_labels == 2 else [f"class{i}" for i in range(num_labels)]
    model = make_model(root / "model", num_labels)
    data = make_dataset(root / "data" / "validation.parquet", sum(sizes), num_labels)
    protocol = make_protocol(root / "protocol.json", sizes, labels)
    lock = make_lock(root / "lock.json", model, data, sum(sizes), labels)
    return protocol, lock
