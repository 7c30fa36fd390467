"""The inference hot path: the job's own DistilBERT forward equals transformers' bit for bit,
batches are assembled as the protocol says, and loading stays off transformers' modeling stack."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from job.batching import batch_plan, encode, padded_batch
from job.distilbert import PACKED_FORWARD, DistilBertClassifier, WordRows, _file_backing
from job.errors import JobError
from job.forward_check import compare_forwards
from job.inference import run_pool
from job.model import TransformersForward, load_model, load_transformers
from job.protocol import load_protocol
from job.runtime import Settings, configure_torch, set_deterministic
from tests.factory import REPO, SHARED_FIXTURES

STANDIN = SHARED_FIXTURES / "distilbert-minilm-sst2"
SST2 = SHARED_FIXTURES / "sst2" / "validation-00000-of-00001.parquet"
needs_shared = pytest.mark.skipif(not STANDIN.is_dir() or not SST2.is_file(), reason="../shared/fixtures is absent")


def settings(threads: int = 1) -> Settings:
    inference = load_protocol().inference
    inference["torch_threads"] = threads
    return Settings.from_protocol(inference)


def tiny_texts(tiny_world: tuple[Path, Path]) -> tuple[Path, list[str]]:
    _, lock = tiny_world
    doc = json.loads(lock.read_text())
    model_dir = Path(doc["model"]["files"][0]["local_path"]).parent
    texts = pq.read_table(doc["dataset"]["files"][0]["local_path"]).column("sentence").to_pylist()
    return model_dir, texts


def both_ways(model_dir: Path, texts: list[str], s: Settings) -> tuple[np.ndarray, np.ndarray, Any]:
    configure_torch(s)
    model = load_model(model_dir, s)
    enc = encode(model.tokenizer, texts, s.max_length)
    keys = [f"{i:08d}" for i in range(len(texts))]
    ours = run_pool(model.forward, model.pad_id, enc, keys, s).logits
    theirs = run_pool(TransformersForward(load_transformers(model_dir, "eager")), model.pad_id, enc, keys, s).logits
    return ours, theirs, model.forward


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
    tokenizer = load_model(model_dir, s).tokenizer
    hf = load_transformers(model_dir, "eager")
    enc = encode(tokenizer, texts[:20], s.max_length)
    keys = [str(i) for i in range(20)]
    packed = run_pool(DistilBertClassifier.from_transformers(hf), 0, enc, keys, s).logits
    assert np.array_equal(packed, run_pool(TransformersForward(hf), 0, enc, keys, s).logits)


def test_two_passes_are_bit_identical(tiny_world):
    model_dir, texts = tiny_texts(tiny_world)
    s = settings()
    configure_torch(s)
    model = load_model(model_dir, s)
    enc = encode(model.tokenizer, texts, s.max_length)
    keys = [str(i) for i in range(len(texts))]
    a, b = (run_pool(model.forward, 0, enc, keys, s) for _ in range(2))
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


def test_run_pool_runs_the_forward_it_is_given_on_padded_batches():
    import torch

    seen: list[tuple[list[list[int]], list[list[int]]]] = []

    class Recording:
        name = "recording"

        def __call__(self, ids: Any, mask: Any) -> Any:
            seen.append((ids.tolist(), mask.tolist()))
            return torch.from_numpy(ids[:, :1].astype(np.float32)).repeat(1, 2)

    enc = encode_ids([(101, 5, 102), (101, 102), (101, 6, 7, 102)])
    out = run_pool(Recording(), 0, enc, ["a", "b", "c"], dataclasses.replace(settings(), batch_size=2))
    assert seen == [([[101, 6, 7, 102], [101, 5, 102, 0]], [[1, 1, 1, 1], [1, 1, 1, 0]]),
                    ([[101, 102]], [[1, 1]])]
    assert out.batch.tolist() == [0, 1, 0] and out.logits.dtype == np.float32


def encode_ids(ids: list[tuple[int, ...]]) -> Any:
    from job.batching import Encoded

    return Encoded(tuple(ids), np.zeros(len(ids), dtype=bool))


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
        "from job.model import load_model\n"
        "from job.runtime import Settings, configure_torch\n"
        "from job.protocol import load_protocol\n"
        "s = Settings.from_protocol(load_protocol().inference)\n"
        "info = configure_torch(s)\n"
        f"model = load_model(Path({str(model_dir)!r}), s)\n"
        "print(json.dumps({'type': type(model.forward).__name__, 'deterministic': info['deterministic_algorithms'],"
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
    model = load_model(model_dir, s)
    assert not model.packed and isinstance(model.forward, TransformersForward)
    assert model.forward.name.endswith(".DistilBertForSequenceClassification")


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


def test_predictions_import_without_torch():
    code = "import sys, job.predictions; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.strip() == "False"


def first_batch(tiny_world: tuple[Path, Path]) -> tuple[Any, Any, Any]:
    model_dir, texts = tiny_texts(tiny_world)
    s = settings()
    configure_torch(s)
    model = load_model(model_dir, s)
    enc = encode(model.tokenizer, texts[:8], s.max_length)
    flat = np.array([t for row in enc.ids for t in row], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(enc.lengths[:-1])]).astype(np.int64)
    ids, mask = padded_batch(flat, offsets, enc.lengths, list(range(8)), model.pad_id)
    return model, TransformersForward(load_transformers(model_dir, "eager")), (ids, mask)


def test_the_forward_check_records_identical_logits(tiny_world):
    model, reference, (ids, mask) = first_batch(tiny_world)
    got = compare_forwards(model.forward, reference, ids, mask)
    assert got == {"rows": 8, "identical": True, "forward": PACKED_FORWARD, "reference": reference.name}


def test_the_forward_check_stops_on_one_perturbed_packed_weight(tiny_world):
    model, reference, (ids, mask) = first_batch(tiny_world)
    packed = model.forward
    assert isinstance(packed, DistilBertClassifier)
    weight, bias = packed.classifier
    changed = weight.clone()
    changed[0, 0] += 0.25  # in the packed forward only: transformers keeps reading the file
    packed.classifier = (changed, bias)
    with pytest.raises(JobError, match=r"^The job's packed forward and transformers' eager forward gave different"):
        compare_forwards(packed, reference, ids, mask)


@pytest.fixture
def disagreeing_packed_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """The packed forward loads with one classifier weight changed; transformers reads the file as it is."""
    original = DistilBertClassifier.load.__func__  # type: ignore[attr-defined]

    def load(cls: type[DistilBertClassifier], model_dir: Path) -> DistilBertClassifier:
        model = original(cls, model_dir)
        weight, bias = model.classifier
        changed = weight.clone()
        changed[0, 0] += 0.25
        model.classifier = (changed, bias)
        return model

    monkeypatch.setattr(DistilBertClassifier, "load", classmethod(load))


@pytest.mark.parametrize("command", ["run", "smoke"])
def test_a_disagreeing_packed_forward_stops_the_job_without_a_bundle(command, tmp_path, tiny_world,
                                                                     disagreeing_packed_weights, capsys):
    from job.cli import main

    protocol, lock = tiny_world
    out = tmp_path / "out"
    args = ["--out", str(out), "--ephemeral-key", "--no-progress"] if command == "run" else []
    assert main([command, "--protocol", str(protocol), "--resources", str(lock), *args]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: The job's packed forward and transformers' eager forward")
    assert not out.exists() and not list(tmp_path.glob(".out*"))
