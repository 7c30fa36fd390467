"""Deterministic CPU inference: tokenise, batch in the protocol's order, return float32 logits."""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from job.errors import JobError
from job.resources import ResolvedRepo

MODEL_FILES = ("config.json", "tokenizer_config.json", "vocab.txt", "model.safetensors")


@dataclass(frozen=True)
class Settings:
    threads: int
    interop_threads: int
    attn_implementation: str
    batch_size: int
    max_length: int
    seed: int
    deterministic: bool

    @classmethod
    def from_protocol(cls, inference: dict[str, Any]) -> Settings:
        if inference["device"] != "cpu" or inference["dtype"] != "float32":
            raise JobError("This job runs on CPU in float32 only; set device cpu and dtype float32 in the protocol.")
        return cls(
            threads=int(inference["torch_threads"]),
            interop_threads=int(inference.get("torch_interop_threads", 1)),
            attn_implementation=str(inference["attn_implementation"]),
            batch_size=int(inference["batch_size"]),
            max_length=int(inference["max_length"]),
            seed=int(inference["seed"]),
            deterministic=bool(inference["deterministic_algorithms"]),
        )


@dataclass(frozen=True)
class Encoded:
    ids: tuple[tuple[int, ...], ...]
    truncated: NDArray[np.bool_]

    @property
    def lengths(self) -> NDArray[np.int64]:
        return np.array([len(i) for i in self.ids], dtype=np.int64)


@dataclass(frozen=True)
class PoolOutput:
    logits: NDArray[np.float32]  # [n, K], in pool order
    token_count: NDArray[np.int64]
    truncated: NDArray[np.bool_]
    batch: NDArray[np.int64]  # index of the batch each row ran in


# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20  # the largest value glibc documents for 64-bit systems
TRIM_THRESHOLD = 256 << 20


def tune_allocator() -> dict[str, Any]:
    """Keep freed activation buffers in the heap instead of handing them back to the kernel.

    With glibc's defaults every batch's multi-MB activations are unmapped or trimmed when freed
    and the next batch faults them in again, zero-filled (~10,000 page faults per forward pass
    of the full-size model). Raising the mmap and trim thresholds makes the allocator reuse those
    pages. Only where memory comes from changes; no number the model computes does."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc: leave the allocator alone
        return {"malloc": "default (no glibc mallopt)"}
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not ok:
        return {"malloc": "default (mallopt refused)"}
    return {"malloc": "glibc", "mmap_threshold": MMAP_THRESHOLD, "trim_threshold": TRIM_THRESHOLD}


def release_free_heap() -> None:
    """Hand the heap's free pages back to the kernel (glibc malloc_trim) once a pool is done, so
    that the next pool's activations do not stack on the previous pool's leftover free chunks."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


def set_deterministic(mode: bool) -> None:
    """torch.use_deterministic_algorithms(mode), minus its import of torch._inductor.

    The public call imports torch._inductor.config (and with it torch._dynamo, torch.distributed
    and sympy: ~80 MB of resident memory, a tenth of the job's peak) only to copy the flag into
    inductor's settings; this job never compiles. So ATen's flag, the one every eager operator
    consults, is set directly when torch has the setter and inductor is not loaded anyway."""
    import torch

    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None or "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(mode)
    else:
        setter(mode, warn_only=False)
    if torch.are_deterministic_algorithms_enabled() != mode:
        raise JobError("torch did not take the deterministic-algorithms setting; report this with "
                       "the torch version.")


def configure_torch(s: Settings) -> dict[str, Any]:
    """Apply threads, seed, determinism and allocator settings; return what torch reports back."""
    import torch

    allocator = tune_allocator()
    torch.set_num_threads(s.threads)
    with contextlib.suppress(RuntimeError):  # can only be set before the first parallel region
        torch.set_num_interop_threads(s.interop_threads)
    torch.manual_seed(s.seed)
    set_deterministic(s.deterministic)
    return {
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "seed": s.seed,
        "mkldnn_enabled": bool(torch.backends.mkldnn.enabled),
        "parallel_info": torch.__config__.parallel_info().strip().splitlines()[:6],
        "allocator": allocator,
    }


@contextlib.contextmanager
def model_directory(repo: ResolvedRepo) -> Iterator[Path]:
    """A directory holding (links to) exactly the checked model files, for from_pretrained."""
    with tempfile.TemporaryDirectory(prefix="calibration-model-") as tmp:
        for f in repo.files:
            link = Path(tmp) / f.path
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(f.local, link)
        yield Path(tmp)


def load_model(model_dir: Path, s: Settings) -> tuple[Any, Any]:
    """Tokenizer and classifier, float32, eval mode, the protocol's attention implementation.

    A DistilBERT sequence classifier with eager attention (the protocol's model) is loaded as a
    DistilBertClassifier straight from model.safetensors (memory-mapped, no copy) without importing
    transformers' modeling stack (transformers.modeling_utils alone pulls in torch.distributed,
    torch._dynamo and sympy: ~90 MB of resident memory). Anything else, or a file that does not
    hold the expected tensors, goes through AutoModelForSequenceClassification.from_pretrained."""
    from safetensors import SafetensorError
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = DistilBertClassifier.load(model_dir) if s.attn_implementation == "eager" else None
        if model is None:
            model = _load_transformers(model_dir, s)
    except (OSError, ValueError, SafetensorError) as exc:
        raise JobError(f"Cannot load the model from its checked files ({exc}); the files may not form a "
                       "DistilBERT-style sequence classifier.") from exc
    return tokenizer, model


def _load_transformers(model_dir: Path, s: Settings) -> Any:
    import torch
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(
        model_dir, attn_implementation=s.attn_implementation, dtype=torch.float32)
    model.eval()
    return model


def encode(tokenizer: Any, texts: Sequence[str], max_length: int) -> Encoded:
    """Token ids with special tokens, truncated to max_length; flags the rows that were cut."""
    full = tokenizer(list(texts), add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
    truncated = np.array([len(x) > max_length for x in full], dtype=bool)
    ids = [tuple(x) for x in full]
    if truncated.any():
        cut_rows = [i for i in range(len(texts)) if truncated[i]]
        cut = tokenizer([texts[i] for i in cut_rows], add_special_tokens=True, truncation=True,
                        max_length=max_length)["input_ids"]
        for i, x in zip(cut_rows, cut, strict=True):
            ids[i] = tuple(x)
    return Encoded(tuple(ids), truncated)


def batch_plan(lengths: NDArray[np.int64], keys: Sequence[str], batch_size: int) -> list[list[int]]:
    """Rows sorted by token count descending, ties by split key ascending, cut into batches."""
    order = sorted(range(len(keys)), key=lambda i: (-int(lengths[i]), keys[i]))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def padded_batch(flat: NDArray[np.int64], offsets: NDArray[np.int64], lengths: NDArray[np.int64],
                 rows: Sequence[int], pad_id: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(input_ids, attention_mask) [len(rows), longest] for `rows`: right-padded with pad_id,
    mask 1 on real tokens. `flat` holds every row's ids back to back, row i at offsets[i]."""
    lens = lengths[rows]
    width = int(lens.max())
    cols = np.arange(width, dtype=np.int64)
    mask = cols[None, :] < lens[:, None]
    src = np.minimum(offsets[rows][:, None] + cols[None, :], len(flat) - 1)
    ids = np.where(mask, flat[src], np.int64(pad_id))
    return ids, mask.astype(np.int64)


LAYER_NORM_EPS = 1e-12  # transformers' DistilBERT: every LayerNorm
_LAYER = ("attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin", "sa_layer_norm",
          "ffn.lin1", "ffn.lin2", "output_layer_norm")


@dataclass(frozen=True)
class _Layer:
    q: tuple[Any, Any]  # (weight, bias) of each linear layer / layer norm
    k: tuple[Any, Any]
    v: tuple[Any, Any]
    out: tuple[Any, Any]
    sa_norm: tuple[Any, Any]
    lin1: tuple[Any, Any]
    lin2: tuple[Any, Any]
    out_norm: tuple[Any, Any]


class DistilBertClassifier:
    """DistilBertForSequenceClassification's eval-mode forward with eager attention, on the
    checkpoint's own float32 tensors, computing only the real tokens outside attention.

    The same operations as transformers' implementation, in the same order, on the same values
    (F.embedding, F.linear, F.layer_norm with eps 1e-12, exact GELU, ReLU; dropout is the identity
    in eval mode), except that embeddings, linear layers, layer norms, GELU and residual adds run
    on the batch's real tokens packed into [tokens, dim] instead of the padded [B, longest, dim]:
    all of them work row by row. Attention keeps the protocol's padded layout: q, k and v are
    scattered into [B, heads, longest, head_dim] (padding rows zero), scores = (q @ k^T) * head_dim
    ** -0.5, plus the additive mask (0 on real keys, the dtype's lowest value on padding), softmax,
    @ v; the context rows of real tokens are gathered back. Padding keys get weight exactly 0
    either way, so no real token's value depends on what sits in the padding. tests/
    test_inference.py checks that the logits equal transformers' padded forward bit for bit."""

    def __init__(self, tensors: dict[str, Any], n_heads: int, word_rows: WordRows | None = None) -> None:
        def pair(name: str) -> tuple[Any, Any]:
            return tensors[f"{name}.weight"], tensors[f"{name}.bias"]

        self.word = tensors["distilbert.embeddings.word_embeddings.weight"]
        self.position = tensors["distilbert.embeddings.position_embeddings.weight"]
        self.emb_norm = pair("distilbert.embeddings.LayerNorm")
        self.n_layers = len({k.split(".")[3] for k in tensors if k.startswith("distilbert.transformer.layer.")})
        self.layers = [_Layer(*(pair(f"distilbert.transformer.layer.{i}.{n}") for n in _LAYER))
                       for i in range(self.n_layers)]
        self.pre_classifier = pair("pre_classifier")
        self.classifier = pair("classifier")
        self.vocab_size, self.dim = self.word.shape
        self.hidden_dim = self.layers[0].lin1[0].shape[0]
        self.n_heads = n_heads
        self.num_labels = self.classifier[0].shape[0]
        self.word_rows = word_rows
        self._check()

    def _check(self) -> None:
        d, h = self.dim, self.hidden_dim
        shapes = {"q": (d, d), "k": (d, d), "v": (d, d), "out": (d, d), "sa_norm": (d,), "lin1": (h, d),
                  "lin2": (d, h), "out_norm": (d,)}
        ok = d % self.n_heads == 0 and self.position.shape[1] == d and self.pre_classifier[0].shape == (d, d)
        ok = ok and self.classifier[0].shape[1] == d and all(
            tuple(getattr(layer, n)[0].shape) == shape for layer in self.layers for n, shape in shapes.items())
        if not ok:
            raise ValueError("the tensors of model.safetensors do not have DistilBERT's shapes")

    @classmethod
    def required(cls, n_layers: int) -> list[str]:
        names = ["distilbert.embeddings.LayerNorm", "pre_classifier", "classifier"]
        names += [f"distilbert.transformer.layer.{i}.{n}" for i in range(n_layers) for n in _LAYER]
        return ["distilbert.embeddings.word_embeddings.weight", "distilbert.embeddings.position_embeddings.weight",
                *(f"{n}.{p}" for n in names for p in ("weight", "bias"))]

    @classmethod
    def load(cls, model_dir: Path) -> DistilBertClassifier | None:
        """From config.json and model.safetensors (tensors memory-mapped, not copied), or None when
        they are not a float32 DistilBERT sequence classifier in transformers' tensor layout."""
        import json

        import torch
        from safetensors import SafetensorError, safe_open

        try:
            config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
            n_layers, n_heads = int(config["n_layers"]), int(config["n_heads"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        weights = model_dir / "model.safetensors"
        if (config.get("model_type") != "distilbert" or config.get("activation", "gelu") != "gelu"
                or config.get("sinusoidal_pos_embds") or not weights.is_file()):
            return None
        archs = config.get("architectures") or ["DistilBertForSequenceClassification"]
        if "DistilBertForSequenceClassification" not in archs:
            return None
        names = cls.required(n_layers)
        try:
            with safe_open(weights, framework="pt") as f:
                if not set(names) <= set(f.keys()):
                    return None
                tensors = {n: f.get_tensor(n) for n in names}
        except SafetensorError:
            return None  # from_pretrained will say what is wrong with the file
        if any(t.dtype != torch.float32 for t in tensors.values()):
            return None
        model = cls(tensors, n_heads)
        model.word_rows = WordRows.for_tensor(model.word)
        return model

    @classmethod
    def from_transformers(cls, model: Any) -> DistilBertClassifier:
        """The same arithmetic on the tensors of a loaded DistilBertForSequenceClassification."""
        tensors = {k: v.detach() for k, v in model.state_dict().items()}
        out = cls(tensors, int(model.config.n_heads))
        out.word_rows = WordRows.for_tensor(out.word)
        return out

    def __call__(self, ids: NDArray[np.int64], mask: NDArray[np.int64]) -> Any:
        """Logits [B, K] of one right-padded batch: ids, mask [B, longest]."""
        import torch
        import torch.nn.functional as F

        bsz, width = ids.shape
        sel_np = np.flatnonzero(mask.reshape(-1))
        sel = torch.from_numpy(sel_np)
        tok = ids.reshape(-1)[sel_np]
        pos = torch.from_numpy(sel_np % width)
        row_of = torch.from_numpy(sel_np // width)
        starts = np.zeros(bsz, dtype=np.int64)
        np.cumsum(mask.sum(axis=1)[:-1], out=starts[1:])
        d, heads = self.dim, self.n_heads
        head_dim = d // heads
        scaling = head_dim**-0.5

        words = F.embedding(torch.from_numpy(tok), self.word) if self.word_rows is None else self.word_rows(tok)
        x = F.layer_norm(words + F.embedding(pos, self.position), (d,), *self.emb_norm, LAYER_NORM_EPS)
        bias = torch.zeros((bsz, 1, 1, width), dtype=x.dtype)
        bias.masked_fill_(torch.from_numpy(mask == 0)[:, None, None, :], torch.finfo(x.dtype).min)
        qkv = x.new_zeros((3, bsz * width, d))  # padding rows stay zero for the whole batch
        for layer in self.layers:
            for j, lin in enumerate((layer.q, layer.k, layer.v)):
                qkv[j].index_copy_(0, sel, F.linear(x, *lin))
            q, k, v = (qkv[j].view(bsz, width, heads, head_dim).transpose(1, 2) for j in range(3))
            scores = torch.matmul(q, k.transpose(2, 3)) * scaling
            scores = scores + bias
            probs = F.softmax(scores, dim=-1)
            context = torch.matmul(probs, v).transpose(1, 2)[row_of, pos].reshape(-1, d)
            h = F.linear(context, *layer.out)
            h += x
            x = F.layer_norm(h, (d,), *layer.sa_norm, LAYER_NORM_EPS)
            h = F.linear(x, *layer.lin1)
            torch.ops.aten.gelu_(h)  # exact GELU in place: the same kernel, one [tokens, hidden] buffer fewer
            h = F.linear(h, *layer.lin2)
            h += x
            x = F.layer_norm(h, (d,), *layer.out_norm, LAYER_NORM_EPS)
        pooled = torch.relu(F.linear(x.index_select(0, torch.from_numpy(starts)), *self.pre_classifier))
        return F.linear(pooled, *self.classifier)


def _file_backing(t: Any) -> tuple[Path, int] | None:
    """(file, byte offset) when CPU tensor `t` is a private mapping of a file that this process
    has not written to: each of its pages is either not faulted in yet or still the file's own page
    (no copy-on-write copy, nothing swapped). None otherwise or where /proc cannot tell (not Linux)."""
    if t.device.type != "cpu" or not t.is_contiguous():
        return None
    start, nbytes = t.data_ptr(), t.numel() * t.element_size()
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.rstrip("\n").split(maxsplit=5)
                lo, hi = (int(a, 16) for a in fields[0].split("-"))
                if lo <= start and start + nbytes <= hi:
                    break
            else:
                return None
        if len(fields) < 6 or not fields[5].startswith("/"):
            return None
        path, offset, inode = Path(fields[5]), int(fields[2], 16) + start - lo, int(fields[4])
        st = path.stat()
        if st.st_ino != inode or st.st_size < offset + nbytes:
            return None  # replaced or deleted since it was mapped
        page = os.sysconf("SC_PAGE_SIZE")
        first, last = start // page, (start + nbytes - 1) // page
        with open("/proc/self/pagemap", "rb") as pm:
            pm.seek(first * 8)
            flags = np.frombuffer(pm.read((last - first + 1) * 8), dtype=np.uint64)
    except (OSError, ValueError, IndexError):
        return None
    one = np.uint64(1)
    present, swapped, file_page = ((flags >> np.uint64(b)) & one for b in (63, 62, 61))
    if len(flags) != last - first + 1 or ((present & (one - file_page)) | swapped).any():
        return None
    return path, offset


@dataclass(frozen=True)
class WordRows:
    """Rows of the word-embedding matrix read from the model file instead of through its mapping.

    The weights are memory-mapped from model.safetensors; an embedding lookup through the mapping
    faults in whole 64 KiB windows around every row it reads (the kernel's fault-around), which
    puts nearly all of the 94 MB matrix into the resident set for the few thousand distinct tokens
    of a pool. Reading each batch's rows with pread from the same file at the same offset gives the
    same float32 values (for_tensor checks that the mapping is of that very file and that no page
    of it has been written) and keeps ~3 KiB per token of the batch resident."""

    path: Path
    offset: int  # of row 0 in the file
    rows: int
    dim: int

    @classmethod
    def for_tensor(cls, weight: Any) -> WordRows | None:
        import torch

        if weight.dtype != torch.float32 or weight.dim() != 2:
            return None
        backing = _file_backing(weight)
        return None if backing is None else cls(backing[0], backing[1], *weight.shape)

    def __call__(self, token_ids: NDArray[np.int64]) -> Any:
        import torch

        if len(token_ids) and (token_ids.min() < 0 or token_ids.max() >= self.rows):
            raise JobError(f"A token id is outside the model's vocabulary of {self.rows}; the tokenizer "
                           "does not belong to this model.")
        out = np.empty((len(token_ids), self.dim), dtype=np.float32)
        size = self.dim * 4
        with open(self.path, "rb", buffering=0) as f:
            for j, i in enumerate(token_ids.tolist()):
                if os.preadv(f.fileno(), [memoryview(out[j]).cast("B")], self.offset + i * size) != size:
                    raise JobError(f"{self.path} ended before its word-embedding row {i}; the model file "
                                   "changed during the run.")
        return torch.from_numpy(out)


def batch_forward(model: Any) -> Callable[[NDArray[np.int64], NDArray[np.int64]], Any]:
    """What run_pool calls per batch: (input_ids, attention_mask) arrays -> logits tensor [B, K].
    A DistilBertClassifier as it is; a transformers DistilBertForSequenceClassification in eval mode
    with eager attention as a DistilBertClassifier on its tensors; any other model's own forward on
    the padded batch."""
    import torch

    if isinstance(model, DistilBertClassifier):
        return model
    if (type(model).__name__ == "DistilBertForSequenceClassification" and not model.training
            and getattr(model.config, "_attn_implementation", None) == "eager"):
        return DistilBertClassifier.from_transformers(model)

    def padded(ids: NDArray[np.int64], mask: NDArray[np.int64]) -> Any:
        return model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits

    return padded


def run_pool(model: Any, pad_id: int, enc: Encoded, keys: Sequence[str], s: Settings,
             progress: str | None = None) -> PoolOutput:
    """Logits for every row in pool order, computed batch by batch in the protocol's order.

    Each batch is right-padded to its longest row with an attention mask, as the protocol says;
    batches are assembled with array operations (no per-row tensors) and run by batch_forward."""
    import torch
    from tqdm import tqdm

    n = len(enc.ids)
    lengths = enc.lengths
    offsets = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    flat = np.fromiter(itertools.chain.from_iterable(enc.ids), dtype=np.int64, count=int(lengths.sum()))
    plan = batch_plan(lengths, keys, s.batch_size)
    forward = batch_forward(model)
    logits: NDArray[np.float32] | None = None
    batch_of = np.zeros(n, dtype=np.int64)
    bar = tqdm(total=n, desc=progress, unit="row", disable=progress is None, leave=False)
    with torch.inference_mode():
        for b, rows in enumerate(plan):
            ids, mask = padded_batch(flat, offsets, lengths, rows, pad_id)
            out = forward(ids, mask)
            if logits is None:
                logits = np.zeros((n, out.shape[1]), dtype=np.float32)
            logits[rows] = out.numpy()
            batch_of[rows] = b
            bar.update(len(rows))
    bar.close()
    del forward
    release_free_heap()
    assert logits is not None
    return PoolOutput(logits=logits, token_count=lengths, truncated=enc.truncated, batch=batch_of)
