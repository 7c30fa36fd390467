"""The inference hot path: the job's own DistilBERT forward equals transformers' bit for bit on
batches without padding and within the check's bound on padded ones, the run's check of that stops
on a disagreement, batches are assembled as the protocol says, and loading stays off transformers'
modeling stack."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

import job.model as job_model
from job.batching import batch_plan, encode, padded_batch
from job.distilbert import RECORDED_NAME, WORD_EMBEDDINGS, DistilBertClassifier, WordRows
from job.errors import JobError
from job.forward_check import (
    PADDED_BOUND,
    check_packed_forward,
    compare_forwards,
    compare_padded,
    compare_unpadded,
    first_padded_batch,
    reference_forward,
    sparse_word_table,
    unpadded_batch,
)
from job.inference import run_pool
from job.mapped_pages import file_backing
from job.model import PACKED, TRANSFORMERS, ForwardChoice, Model, TransformersForward, load_model, load_transformers
from job.protocol import load_protocol
from job.runtime import Settings, configure_torch, set_deterministic
from tests.factory import REPO, SHARED_FIXTURES

STANDIN = SHARED_FIXTURES / "distilbert-minilm-sst2"
SST2 = SHARED_FIXTURES / "sst2" / "validation-00000-of-00001.parquet"
needs_shared = pytest.mark.skipif(not STANDIN.is_dir() or not SST2.is_file(), reason="../shared/fixtures is absent")


def settings(threads: int = 1) -> Settings:
    return Settings.from_protocol(dataclasses.replace(load_protocol().inference, torch_threads=threads))


def tiny_texts(tiny_world: tuple[Path, Path]) -> tuple[Path, list[str]]:
    _, lock = tiny_world
    doc = json.loads(lock.read_text())
    model_dir = Path(doc["model"]["files"][0]["local_path"]).parent
    texts = pq.read_table(doc["dataset"]["files"][0]["local_path"]).column("sentence").to_pylist()
    return model_dir, texts


def tiny_model(tiny_world: tuple[Path, Path], threads: int = 1) -> tuple[Any, list[str], Settings, Path]:
    model_dir, texts = tiny_texts(tiny_world)
    s = settings(threads)
    configure_torch(s)
    return load_model(model_dir, s), texts, s, model_dir


def logits(forward: Any, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return np.asarray(forward(ids, mask).numpy())


def unpadded_shapes(enc: Any, n_rows: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Batches without padding of several shapes: rows from the top, middle and a seeded draw of the
    pool, each batch cut to its shortest row or shorter; widths include 2, 13 and the pool's longest."""
    rng = np.random.default_rng(7)
    lengths = enc.lengths
    order = [int(i) for i in np.argsort(-lengths, kind="stable")]
    sets = [(order[:8], None), (order[:1], None), (order[:16], 13), (order[n_rows // 2:n_rows // 2 + 5], None),
            ([int(i) for i in rng.choice(n_rows, 11, replace=False)], None),
            ([int(i) for i in rng.choice(n_rows, 3, replace=False)], 2)]
    out = []
    for rows, width in sets:
        w = int(lengths[rows].min()) if width is None else min(width, int(lengths[rows].min()))
        ids = np.array([enc.ids[i][:w] for i in rows], dtype=np.int64)
        out.append((ids, np.ones_like(ids)))
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_tiny_model_logits_equal_transformers_bit_for_bit_without_padding(tiny_world, threads):
    model, texts, s, model_dir = tiny_model(tiny_world, threads)
    assert isinstance(model.forward, DistilBertClassifier)
    reference = reference_forward(model_dir)
    enc = encode(model.tokenizer, texts, s.max_length)
    shapes = unpadded_shapes(enc, len(texts))
    assert {ids.shape[1] for ids, _ in shapes} >= {2, 13, int(enc.lengths.max())}  # the truncated 512-token row
    for ids, mask in shapes:
        assert logits(model.forward, ids, mask).tobytes() == logits(reference, ids, mask).tobytes(), ids.shape


def test_tiny_model_logits_are_close_to_transformers_on_padded_batches(tiny_world):
    model, texts, s, model_dir = tiny_model(tiny_world)
    enc = encode(model.tokenizer, texts, s.max_length)
    keys = [f"{i:08d}" for i in range(len(texts))]
    ours = run_pool(model.forward, model.pad_id, enc, keys, s).logits
    theirs = run_pool(TransformersForward(load_transformers(model_dir, "eager")), model.pad_id, enc, keys, s).logits
    assert np.abs(ours - theirs).max() <= PADDED_BOUND


@needs_shared
@pytest.mark.integration
@pytest.mark.parametrize("threads", [1, 2])
def test_standin_logits_equal_transformers_bit_for_bit_without_padding(threads):
    texts = pq.read_table(SST2).column("sentence").to_pylist()[:120]
    s = settings(threads)
    configure_torch(s)
    model = load_model(STANDIN, s)
    assert isinstance(model.forward, DistilBertClassifier) and model.forward.word_rows is not None
    reference = reference_forward(STANDIN)
    for ids, mask in unpadded_shapes(encode(model.tokenizer, texts, s.max_length), len(texts)):
        assert logits(model.forward, ids, mask).tobytes() == logits(reference, ids, mask).tobytes(), ids.shape


@needs_shared
@pytest.mark.integration
def test_standin_logits_are_close_to_transformers_on_padded_batches():
    texts = pq.read_table(SST2).column("sentence").to_pylist()[:120]
    s = settings(threads=2)
    configure_torch(s)
    model = load_model(STANDIN, s)
    enc = encode(model.tokenizer, texts, s.max_length)
    keys = [f"{i:08d}" for i in range(len(texts))]
    ours = run_pool(model.forward, model.pad_id, enc, keys, s).logits
    theirs = run_pool(TransformersForward(load_transformers(STANDIN, "eager")), model.pad_id, enc, keys, s).logits
    assert np.abs(ours - theirs).max() <= PADDED_BOUND


def test_a_loaded_transformers_model_runs_the_same_packed_arithmetic(tiny_world):
    model, texts, s, model_dir = tiny_model(tiny_world)
    reference = reference_forward(model_dir)
    packed = DistilBertClassifier.from_transformers(reference.model)
    for ids, mask in unpadded_shapes(encode(model.tokenizer, texts, s.max_length), len(texts)):
        assert logits(packed, ids, mask).tobytes() == logits(reference, ids, mask).tobytes()


def test_the_reference_head_copy_changes_no_logit_at_one_thread(tiny_world):
    """reference_forward only changes the memory layout of the head's input: at one thread, where
    sgemm does not depend on that layout, its logits are plain transformers' on padded batches too."""
    model, texts, s, model_dir = tiny_model(tiny_world)
    enc = encode(model.tokenizer, texts, s.max_length)
    keys = [f"{i:08d}" for i in range(len(texts))]
    plain = run_pool(TransformersForward(load_transformers(model_dir, "eager")), model.pad_id, enc, keys, s).logits
    assert plain.tobytes() == run_pool(reference_forward(model_dir), model.pad_id, enc, keys, s).logits.tobytes()


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


def padded_layout_forward(model: DistilBertClassifier) -> Any:
    """The packed forward as it was with attention in transformers' own layout: q, k and v
    scattered into [B * longest, dim], viewed as [B, heads, longest, head_dim] through transposes
    (which the batched products copy), scores scaled and masked out of place."""
    import torch
    import torch.nn.functional as F

    from job.distilbert import LAYER_NORM_EPS

    def forward(ids: np.ndarray, mask: np.ndarray) -> Any:
        bsz, width = ids.shape
        sel_np = np.flatnonzero(mask.reshape(-1))
        sel, pos, row_of = (torch.from_numpy(a) for a in (sel_np, sel_np % width, sel_np // width))
        starts = torch.from_numpy(np.concatenate([[0], np.cumsum(mask.sum(axis=1))[:-1]]).astype(np.int64))
        d, heads = model.dim, model.n_heads
        words = F.embedding(torch.from_numpy(ids.reshape(-1)[sel_np]), model.word)
        x = F.layer_norm(words + F.embedding(pos, model.position), (d,), *model.emb_norm, LAYER_NORM_EPS)
        bias = torch.zeros((bsz, 1, 1, width))
        bias.masked_fill_(torch.from_numpy(mask == 0)[:, None, None, :], torch.finfo(x.dtype).min)
        qkv = x.new_zeros((3, bsz * width, d))
        for layer in model.layers:
            for j, lin in enumerate((layer.q, layer.k, layer.v)):
                qkv[j].index_copy_(0, sel, F.linear(x, *lin))
            q, k, v = (qkv[j].view(bsz, width, heads, d // heads).transpose(1, 2) for j in range(3))
            scores = torch.matmul(q, k.transpose(2, 3)) * (d // heads) ** -0.5
            probs = F.softmax(scores + bias, dim=-1)
            x = F.layer_norm(F.linear(torch.matmul(probs, v).transpose(1, 2)[row_of, pos].reshape(-1, d),
                                      *layer.out) + x, (d,), *layer.sa_norm, LAYER_NORM_EPS)
            h = F.linear(F.gelu(F.linear(x, *layer.lin1)), *layer.lin2)
            x = F.layer_norm(h + x, (d,), *layer.out_norm, LAYER_NORM_EPS)
        return F.linear(torch.relu(F.linear(x.index_select(0, starts), *model.pre_classifier)), *model.classifier)

    return forward


@pytest.mark.parametrize("threads", [1, 2])
def test_attention_in_its_own_layout_keeps_the_bits_of_transformers_layout(tiny_world, threads):
    """q, k and v held as [B, heads, longest, head_dim] (no transpose copies) and the scores scaled
    and masked in place give every logit of every padded batch the same bits as before."""
    model, texts, s, _ = tiny_model(tiny_world, threads)
    enc = encode(model.tokenizer, texts, s.max_length)
    keys = [f"{i:08d}" for i in range(len(texts))]
    plan = batch_plan(enc.lengths, keys, s.batch_size)
    assert any(len(set(enc.lengths[rows].tolist())) > 1 for rows in plan)  # padded batches among them
    ours = run_pool(model.forward, model.pad_id, enc, keys, s).logits
    before = run_pool(padded_layout_forward(model.forward), model.pad_id, enc, keys, s).logits
    assert ours.tobytes() == before.tobytes()


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
    assert file_backing(torch.ones(100, 8)) is None  # anonymous memory
    mapped[5, 0] = -1.0  # a copy-on-write page: the file no longer says what the tensor holds
    assert file_backing(mapped) is None


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
        assert not torch._C._get_deterministic_fill_uninitialized_memory()  # no NaN fill of new tensors
        set_deterministic(False)
        assert not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(before)


def test_loading_stays_off_transformers_modeling_stack(tiny_world):
    """configure_torch + load_model import neither transformers.modeling_utils nor torch._dynamo
    (with sympy and torch.distributed they cost ~90 MB of the job's peak resident memory). The
    forward check's transformers model, loaded after, imports no scipy (its object-detection
    losses would, where scipy is installed, as in this environment), and transformers' scipy flag
    reads as before."""
    model_dir, _ = tiny_texts(tiny_world)
    code = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from job.model import load_model, load_transformers\n"
        "from job.runtime import Settings, configure_torch\n"
        "from job.protocol import load_protocol\n"
        "s = Settings.from_protocol(load_protocol().inference)\n"
        "info = configure_torch(s)\n"
        f"model = load_model(Path({str(model_dir)!r}), s)\n"
        "loaded = [m for m in ('transformers.modeling_utils', 'torch._dynamo', 'torch._inductor', 'sympy')"
        " if m in sys.modules]\n"
        "import transformers.utils\n"
        "flag = transformers.utils.is_scipy_available()\n"
        f"reference = load_transformers(Path({str(model_dir)!r}), 'eager')\n"
        "print(json.dumps({'type': type(model.forward).__name__, 'deterministic': info['deterministic_algorithms'],"
        " 'loaded': loaded, 'reference': type(reference).__name__, 'scipy': 'scipy' in sys.modules,"
        " 'flag': transformers.utils.is_scipy_available() == flag,"
        " 'losses': 'transformers.loss.loss_for_object_detection' in sys.modules}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                         check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"type": "DistilBertClassifier", "deterministic": True, "loaded": [],
                   "reference": "DistilBertForSequenceClassification", "scipy": False, "flag": True, "losses": True}


def test_keeping_scipy_out_tolerates_a_transformers_without_its_loss_modules_or_flag(monkeypatch):
    """Another transformers, without `transformers.loss.loss_utils` or without the scipy flag, loads
    as it would without the guard: no error, and the flag (where there is one) as it was."""
    import transformers.utils

    flag = transformers.utils.is_scipy_available
    monkeypatch.setitem(sys.modules, "transformers.loss.loss_utils", None)  # importing it raises ImportError
    job_model._import_losses_without_scipy()
    assert transformers.utils.is_scipy_available is flag
    monkeypatch.delattr(transformers.utils, "is_scipy_available")
    job_model._import_losses_without_scipy()
    assert not hasattr(transformers.utils, "is_scipy_available")


def test_sdpa_protocol_uses_transformers(tiny_world):
    model_dir, _ = tiny_texts(tiny_world)
    s = Settings.from_protocol(dataclasses.replace(load_protocol().inference, attn_implementation="sdpa"))
    model = load_model(model_dir, s)
    assert model.packed is None and isinstance(model.forward, TransformersForward)
    assert model.forward.name.endswith(".DistilBertForSequenceClassification")
    assert model.choice == ForwardChoice(
        TRANSFORMERS, "fallback: the protocol asks for 'sdpa' attention and the packed forward implements eager")
    assert model.choice.note() is not None


def test_the_packed_forward_is_chosen_with_its_reason(tiny_world):
    model_dir, _ = tiny_texts(tiny_world)
    model = load_model(model_dir, settings())
    assert model.packed is model.forward and model.choice.packed and model.choice.note() is None
    assert model.choice.record() == {"name": PACKED, "reason": "float32 DistilBertForSequenceClassification in "
                                     "transformers' tensor layout, eager attention"}
    with pytest.raises(ValueError, match="does not match the choice"):
        Model(model.tokenizer, model.forward, ForwardChoice(TRANSFORMERS, "fallback: none"))


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda c: c.update(model_type="bert"), "config.json's model_type is 'bert', not 'distilbert'"),
    (lambda c: c.update(sinusoidal_pos_embds=True), "config.json asks for a DistilBERT variant"),
    (lambda c: c.update(architectures=["DistilBertForMaskedLM"]), "do not include DistilBertForSequenceClassification"),
    (lambda c: c.pop("n_heads"), "config.json has no DistilBERT n_layers and n_heads (KeyError)"),
])
def test_the_packed_forward_says_why_it_does_not_apply(tiny_world, tmp_path, edit, reason):
    from job.distilbert import Unsupported

    model_dir, _ = tiny_texts(tiny_world)
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    config = json.loads((copy / "config.json").read_text())
    edit(config)
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(Unsupported, match=re.escape(reason)):
        DistilBertClassifier.load(copy)


def test_a_float16_checkpoint_falls_back_with_its_reason(tiny_world, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    model_dir, _ = tiny_texts(tiny_world)
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    tensors = load_file(copy / "model.safetensors")
    save_file({k: v.to(torch.float16) for k, v in tensors.items()}, copy / "model.safetensors")
    from job.distilbert import Unsupported

    with pytest.raises(Unsupported, match="holds float16 tensors, not only float32"):
        DistilBertClassifier.load(copy)


def test_configure_torch_reports_the_allocator_settings():
    info = configure_torch(settings())
    assert info["deterministic_algorithms"] and info["fill_uninitialized_memory"] is False
    assert "malloc" in info["allocator"]
    assert info["allocator"]["arrow_memory_pool"] == "system"  # Arrow's buffers go back with malloc_trim


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


def check_inputs(tiny_world: tuple[Path, Path]) -> tuple[Any, Any, Any, list[str], Settings]:
    """The packed model, transformers' reference, and the first 20 rows encoded, as the check sees them."""
    model, texts, s, model_dir = tiny_model(tiny_world)
    enc = encode(model.tokenizer, texts[:20], s.max_length)
    return model, reference_forward(model_dir), enc, [f"k{i:02d}" for i in range(20)], s


def test_the_unpadded_check_batch_is_the_longest_rows_cut_to_the_shortest_of_them():
    enc = encode_ids([(101, 5, 102), (101, 6, 7, 8, 102), (101, 9, 10, 102), (101, 102), (101, 11, 12, 13, 102)])
    ids, mask = unpadded_batch(enc, ["e", "d", "c", "b", "a"], rows=3)
    assert ids.tolist() == [[101, 11, 12, 13], [101, 6, 7, 8], [101, 9, 10, 102]]  # ties by key: "a" before "d"
    assert mask.tolist() == [[1, 1, 1, 1]] * 3 and ids.dtype == mask.dtype == np.int64


def test_the_forward_check_records_both_batches(tiny_world):
    model, reference, enc, keys, s = check_inputs(tiny_world)
    got = compare_forwards(model.forward, reference, enc, keys, s, model.pad_id)
    width = int(np.sort(enc.lengths)[::-1][:8].min())
    assert got["forward"] == RECORDED_NAME and got["reference"] == reference.name
    assert got["unpadded"] == {"rows": 8, "tokens_per_row": width, "identical": True}
    padded = got["padded"]
    assert padded["rows"] == 16 and padded["longest"] == int(enc.lengths.max()) and padded["bound"] == PADDED_BOUND
    assert padded["max_abs_diff"] <= PADDED_BOUND and padded["rows_differing"] <= 16 and padded["max_ulps"] >= 0


class Shifted:
    """A forward whose logits are the reference's moved by `ulps` floats (or by `by` when given)."""

    name = "shifted"

    def __init__(self, reference: Any, ulps: int = 0, by: float = 0.0) -> None:
        self.reference, self.ulps, self.by = reference, ulps, by

    def __call__(self, ids: Any, mask: Any) -> Any:
        out = self.reference(ids, mask).clone()
        out[0, 0] += self.by
        for _ in range(self.ulps):
            out[0, 1] = float(np.nextafter(np.float32(out[0, 1].item()), np.float32(np.inf)))
        return out


def test_the_padded_comparison_reports_small_differences_and_stops_on_large_ones(tiny_world):
    model, reference, enc, keys, s = check_inputs(tiny_world)
    ids, mask = first_padded_batch(enc, keys, s.batch_size, model.pad_id)
    got = compare_padded(Shifted(reference, ulps=3), reference, ids, mask)
    assert got["rows_differing"] == 1 and got["max_ulps"] == 3 and 0 < got["max_abs_diff"] < 1e-5
    with pytest.raises(JobError, match=r"^The job's packed forward and transformers' eager forward gave logits up to"):
        compare_padded(Shifted(reference, by=1e-3), reference, ids, mask)


def test_the_unpadded_comparison_stops_on_one_ulp(tiny_world):
    _, reference, enc, keys, _ = check_inputs(tiny_world)
    with pytest.raises(JobError, match=r"different logits for 1 of 8 calibration rows in a batch without padding"):
        compare_unpadded(Shifted(reference, ulps=1), reference, *unpadded_batch(enc, keys))


def test_the_forward_check_stops_on_one_perturbed_packed_weight(tiny_world):
    model, reference, enc, keys, s = check_inputs(tiny_world)
    packed = model.forward
    assert isinstance(packed, DistilBertClassifier)
    weight, bias = packed.classifier
    changed = weight.clone()
    changed[0, 0] += 0.25  # in the packed forward only: transformers keeps reading the file
    packed.classifier = (changed, bias)
    with pytest.raises(JobError, match=r"^The job's packed forward and transformers' eager forward gave different"):
        compare_forwards(packed, reference, enc, keys, s, model.pad_id)


@pytest.fixture
def disagreeing_packed_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """The packed forward loads with one classifier weight changed; transformers reads the file as it is."""
    original = DistilBertClassifier.load.__func__  # type: ignore[attr-defined]

    def load(cls: type[DistilBertClassifier], model_dir: Path, kernels: Any = None) -> DistilBertClassifier:
        model = original(cls, model_dir, kernels)
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


def test_the_reference_reads_word_rows_by_the_header_and_shares_every_other_tensor(tiny_world):
    """The reference forward's word-embedding table holds the checkpoint's rows for the checked tokens,
    read at the offsets of the safetensors header, zeros elsewhere; every other parameter is the packed
    forward's own tensor (no second copy of the weights)."""
    model, _, _, model_dir = tiny_model(tiny_world)
    packed = model.forward
    assert isinstance(packed, DistilBertClassifier)
    word = packed.word.numpy()
    ids = [0, 3, len(word) - 1]
    table = sparse_word_table(model_dir / "model.safetensors", WORD_EMBEDDINGS, ids + [3])
    assert np.array_equal(table.numpy()[ids], word[ids])
    assert not np.delete(table.numpy(), ids, axis=0).any()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        sparse_word_table(model_dir / "model.safetensors", WORD_EMBEDDINGS, [len(word)])
    reference = reference_forward(model_dir, {**packed.tensors, WORD_EMBEDDINGS: table})
    params = dict(reference.model.named_parameters())
    assert params[WORD_EMBEDDINGS].data_ptr() == table.data_ptr()
    assert all(params[name].data_ptr() == t.data_ptr() for name, t in packed.tensors.items() if name != WORD_EMBEDDINGS)
    missing = {k: v for k, v in packed.tensors.items() if k != "classifier.bias"}
    with pytest.raises(ValueError, match="do not provide: classifier.bias"):
        reference_forward(model_dir, missing)


def test_the_forward_check_catches_word_rows_read_at_a_wrong_offset(tiny_world):
    """The packed forward reads word rows through WordRows; the check's reference reads them by the file's
    header, so a packed forward that reads every token's neighbouring row is stopped."""
    from job.resources import resolve_local

    protocol_path, lock = tiny_world
    model, texts, s, _ = tiny_model(tiny_world)
    repo = resolve_local(lock, load_protocol(protocol_path).resources).model
    keys = [f"k{i:02d}" for i in range(20)]
    assert check_packed_forward(model, repo, s, texts[:20], keys) is not None
    packed = model.forward
    assert isinstance(packed, DistilBertClassifier) and packed.word_rows is not None
    rows = packed.word_rows
    packed.word_rows = dataclasses.replace(rows, offset=rows.offset + rows.dim * 4)
    with pytest.raises(JobError, match="gave different logits"):
        check_packed_forward(model, repo, s, texts[:20], keys)
