"""The inference hot path: the job's own DistilBERT forward equals transformers' bit for bit,
batches are assembled as the protocol says, and loading stays off transformers' modeling stack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from job.inference import (
    DistilBertClassifier,
    Settings,
    WordRows,
    _file_backing,
    _load_transformers,
    batch_forward,
    batch_plan,
    configure_torch,
    encode,
    load_model,
    padded_batch,
    run_pool,
    set_deterministic,
)
from job.protocol import load_protocol
from tests.factory import REPO, SHARED_FIXTURES

STANDIN = SHARED_FIXTURES / "distilbert-minilm-sst2"
SST2 = SHARED_FIXTURES / "sst2" / "validation-00000-of-00001.parquet"
needs_shared = pytest.mark.skipif(not STANDIN.is_dir() or not SST2.is_file(), reason="../shared/fixtures is absent")


def settings(threads: int = 1) -> Settings:
    inference = load_protocol().inference
    inference["torch_threads"] = threads
    return Settings.from_protocol(inference)


class Padded:
    """Hides a transformers model's type so that run_pool uses its own forward on padded batches."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __call__(self, **kwargs: Any) -> Any:
        return self.model(**kwargs)


def tiny_texts(tiny_world: tuple[Path, Path]) -> tuple[Path, list[str]]:
    _, lock = tiny_world
    doc = json.loads(lock.read_text())
    model_dir = Path(doc["model"]["files"][0]["local_path"]).parent
    texts = pq.read_table(doc["dataset"]["files"][0]["local_path"]).column("sentence").to_pylist()
    return model_dir, texts


def both_ways(model_dir: Path, texts: list[str], s: Settings) -> tuple[np.ndarray, np.ndarray, Any]:
    configure_torch(s)
    tokenizer, model = load_model(model_dir, s)
    enc = encode(tokenizer, texts, s.max_length)
    keys = [f"{i:08d}" for i in range(len(texts))]
    pad = int(tokenizer.pad_token_id or 0)
    ours = run_pool(model, pad, enc, keys, s).logits
    theirs = run_pool(Padded(_load_transformers(model_dir, s)), pad, enc, keys, s).logits
    return ours, theirs, model


def test_tiny_model_logits_equal_transformers_bit_for_bit(tiny_world):
    model_dir, texts = tiny_texts(tiny_world)
    ours, theirs, model = both_ways(model_dir, texts, settings())
    assert isinstance(model, DistilBertClassifier)
    assert np.array_equal(ours, theirs)  # includes a row truncated at 512 tokens


@needs_shared
@pytest.mark.integration
def test_standin_logits_equal_transformers_bit_for_bit():
    texts = pq.read_table(SST2).column("sentence").to_pylist()[:120]
    ours, theirs, model = both_ways(STANDIN, texts, settings(threads=2))
    assert isinstance(model, DistilBertClassifier) and model.word_rows is not None
    assert np.array_equal(ours, theirs)


def test_a_loaded_transformers_model_runs_the_same_packed_arithmetic(tiny_world):
    model_dir, texts = tiny_texts(tiny_world)
    s = settings()
    configure_torch(s)
    tokenizer, _ = load_model(model_dir, s)
    hf = _load_transformers(model_dir, s)
    assert isinstance(batch_forward(hf), DistilBertClassifier)
    enc = encode(tokenizer, texts[:20], s.max_length)
    keys = [str(i) for i in range(20)]
    assert np.array_equal(run_pool(hf, 0, enc, keys, s).logits, run_pool(Padded(hf), 0, enc, keys, s).logits)


def test_two_passes_are_bit_identical(tiny_world):
    model_dir, texts = tiny_texts(tiny_world)
    s = settings()
    configure_torch(s)
    tokenizer, model = load_model(model_dir, s)
    enc = encode(tokenizer, texts, s.max_length)
    keys = [str(i) for i in range(len(texts))]
    a, b = (run_pool(model, 0, enc, keys, s) for _ in range(2))
    assert a.logits.tobytes() == b.logits.tobytes()
    assert np.array_equal(a.batch, b.batch)


def test_padded_batch_is_right_padded_with_a_mask():
    ids = [(101, 5, 6, 102), (101, 7, 102), (101, 102)]
    lengths = np.array([len(x) for x in ids], dtype=np.int64)
    flat = np.array([t for x in ids for t in x], dtype=np.int64)
    offsets = np.array([0, 4, 7], dtype=np.int64)
    got_ids, got_mask = padded_batch(flat, offsets, lengths, [1, 2, 0], pad_id=0)
    assert got_ids.tolist() == [[101, 7, 102, 0], [101, 102, 0, 0], [101, 5, 6, 102]]
    assert got_mask.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    assert got_ids.dtype == np.int64 and got_mask.dtype == np.int64


def test_batch_plan_is_the_protocol_order():
    lengths = np.array([3, 5, 5, 2, 7], dtype=np.int64)
    keys = ["e", "d", "c", "b", "a"]
    assert batch_plan(lengths, keys, 2) == [[4, 2], [1, 0], [3]]


def test_other_models_run_their_own_forward_on_padded_batches():
    import torch

    seen = {}

    class Other:
        def __call__(self, input_ids: Any, attention_mask: Any) -> Any:
            seen["shapes"] = (tuple(input_ids.shape), tuple(attention_mask.shape))
            return type("Out", (), {"logits": torch.zeros(input_ids.shape[0], 2)})()

    forward = batch_forward(Other())
    out = forward(np.zeros((3, 4), dtype=np.int64), np.ones((3, 4), dtype=np.int64))
    assert seen["shapes"] == ((3, 4), (3, 4)) and tuple(out.shape) == (3, 2)


def test_word_rows_read_the_mapped_file_and_refuse_written_pages(tmp_path):
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    weight = torch.arange(40 * 8, dtype=torch.float32).reshape(40, 8)
    save_file({"w": weight}, tmp_path / "t.safetensors")
    with safe_open(tmp_path / "t.safetensors", framework="pt") as f:
        mapped = f.get_tensor("w")
    rows = WordRows.for_tensor(mapped)
    if rows is None:
        pytest.skip("this platform does not memory-map safetensors or has no /proc/self/pagemap")
    ids = np.array([3, 0, 39, 3], dtype=np.int64)
    assert torch.equal(rows(ids), weight[ids])
    assert _file_backing(torch.ones(100, 8)) is None  # anonymous memory
    mapped[5, 0] = -1.0  # a copy-on-write page: the file no longer says what the tensor holds
    assert _file_backing(mapped) is None


def test_word_rows_refuse_out_of_vocabulary_ids(tmp_path):
    from job.errors import JobError

    rows = WordRows(tmp_path / "none", 0, rows=10, dim=4)
    with pytest.raises(JobError, match="outside the model's vocabulary"):
        rows(np.array([10], dtype=np.int64))


def test_set_deterministic_sets_the_aten_flag():
    import torch

    before = torch.are_deterministic_algorithms_enabled()
    try:
        set_deterministic(True)
        assert torch.are_deterministic_algorithms_enabled()
        set_deterministic(False)
        assert not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(before)


def test_loading_stays_off_transformers_modeling_stack(tiny_world):
    """configure_torch + load_model import neither transformers.modeling_utils nor torch._dynamo
    (with sympy and torch.distributed they cost ~90 MB of the job's peak resident memory)."""
    model_dir, _ = tiny_texts(tiny_world)
    code = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from job.inference import Settings, configure_torch, load_model\n"
        "from job.protocol import load_protocol\n"
        "s = Settings.from_protocol(load_protocol().inference)\n"
        "info = configure_torch(s)\n"
        f"tok, model = load_model(Path({str(model_dir)!r}), s)\n"
        "print(json.dumps({'type': type(model).__name__, 'deterministic': info['deterministic_algorithms'],"
        " 'loaded': [m for m in ('transformers.modeling_utils', 'torch._dynamo', 'torch._inductor', 'sympy')"
        " if m in sys.modules]}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                         check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"type": "DistilBertClassifier", "deterministic": True, "loaded": []}


def test_sdpa_protocol_uses_transformers(tiny_world):
    model_dir, _ = tiny_texts(tiny_world)
    inference = load_protocol().inference
    inference["attn_implementation"] = "sdpa"
    s = Settings.from_protocol(inference)
    _, model = load_model(model_dir, s)
    assert type(model).__name__ == "DistilBertForSequenceClassification"
    assert not isinstance(batch_forward(model), DistilBertClassifier)


def test_configure_torch_reports_the_allocator_settings():
    info = configure_torch(settings())
    assert "malloc" in info["allocator"]


def test_an_unreadable_weights_file_is_a_clear_error(tmp_path):
    from job.errors import JobError
    from tests.factory import make_model

    model_dir = make_model(tmp_path / "model")
    (model_dir / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(JobError, match="Cannot load the model"):
        load_model(model_dir, settings())
