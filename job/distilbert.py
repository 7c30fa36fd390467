"""The job's packed DistilBERT forward and the reading of its weights from model.safetensors."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from job.errors import JobError
from job.linear_kernels import LinearKernels
from job.mapped_pages import file_backing

RECORDED_NAME = "job.inference.DistilBertClassifier"
"""What data/environment.json's torch.forward says for this forward: a fixed label, not an import
path (the class lived there when the label was first recorded); bundles of every version name the
same forward the same way."""
SUPPORTED_ARCHITECTURE = "DistilBertForSequenceClassification"
WORD_EMBEDDINGS = "distilbert.embeddings.word_embeddings.weight"
"""The word-embedding matrix's name in the checkpoint."""
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


class Unsupported(Exception):
    """The model files are not what the packed forward implements; str(): the reason, one clause."""


class DistilBertClassifier:
    """DistilBertForSequenceClassification's eval-mode forward with eager attention, on the
    checkpoint's own float32 tensors, computing only the real tokens outside attention.

    The same operations as transformers' implementation, in the same order, on the same values
    (F.embedding, F.linear, F.layer_norm with eps 1e-12, exact GELU, ReLU; dropout is the identity
    in eval mode), except that embeddings, linear layers, layer norms, GELU and residual adds run
    on the batch's real tokens packed into [tokens, dim] instead of the padded [B, longest, dim]:
    all of them work row by row. Attention keeps the protocol's padded layout: q, k and v are
    scattered into [B, longest, heads, head_dim] (padding rows zero) and read as transformers'
    [B, heads, longest, head_dim] views, scores = (q @ k^T) * head_dim
    ** -0.5, plus the additive mask (0 on real keys, the dtype's lowest value on padding), softmax,
    @ v; the context rows of real tokens are gathered back. Padding keys get weight exactly 0
    either way, so no real token's value depends on what sits in the padding.

    On a batch without padding both forwards hand every operation the same shapes and values, and
    the float32 logits equal transformers' bit for bit once transformers' head reads its [CLS] rows
    contiguous, as here (job.forward_check.reference_forward); every run checks that on its own
    rows (job.forward_check), tests/job/test_inference.py on several shapes at 1 and 2 threads. On a
    padded batch the linear layers here see [tokens, dim] matrices where transformers' see
    [B * longest, dim], and MKL's sgemm may round a row differently depending on the matrix
    height (even at one thread), so logits can differ from transformers' in their last bits
    (measured on the stand-in model: 2 of 39 batches at 2 and 4 threads, up to 1.5e-6). These
    logits are the job's by definition: the protocol fixes this layout and the batches."""

    name = RECORDED_NAME

    def __init__(self, tensors: dict[str, Any], n_heads: int, word_rows: WordRows | None = None,
                 kernels: LinearKernels | None = None) -> None:
        """On `tensors` by checkpoint name; the linear layers on `kernels` (job.linear_kernels; MKL's
        when None), which pack their weights."""
        def pair(name: str) -> tuple[Any, Any]:
            return tensors[f"{name}.weight"], tensors[f"{name}.bias"]

        self.kernels = LinearKernels() if kernels is None else kernels
        if self.kernels.hands_back_weights:
            # The plain weights' file pages are handed back once packed; a bias or layer norm read
            # from the same mapping at every layer would map the pages around it back in: whole
            # page-cache folios of the neighbouring weights where the file was last read by read(),
            # 76.6 MB of them after 20 batches of the full-size model (docs/PERFORMANCE.md). Copies
            # of these small tensors (about 250 KB for DistilBERT) hold the same bits.
            tensors = {n: t.clone() if t.dim() == 1 else t for n, t in tensors.items()}
        self.tensors = dict(tensors)  # by checkpoint name, for a reference forward on the same tensors
        self.word = tensors[WORD_EMBEDDINGS]
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
        for layer in self.layers:
            for lin in (layer.q, layer.k, layer.v, layer.out, layer.lin1, layer.lin2):
                self.kernels.pack(*lin)
        self.kernels.pack(*self.pre_classifier)
        self.kernels.pack(*self.classifier)

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
        return [WORD_EMBEDDINGS, "distilbert.embeddings.position_embeddings.weight",
                *(f"{n}.{p}" for n in names for p in ("weight", "bias"))]

    @classmethod
    def load(cls, model_dir: Path, kernels: LinearKernels | None = None) -> DistilBertClassifier:
        """From config.json and model.safetensors (tensors memory-mapped, not copied, except the
        one-dimensional ones where `kernels` hand the weights' pages back), the linear layers on
        `kernels`. Unsupported, with the reason, when they are not a float32 DistilBERT
        sequence classifier in transformers' tensor layout (job.model then runs transformers' own
        forward and records why)."""
        import torch  # deferred: torch loads only where a model runs
        from safetensors import SafetensorError, safe_open

        try:
            config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise Unsupported(f"config.json cannot be read as JSON ({type(exc).__name__})") from exc
        if not isinstance(config, dict) or config.get("model_type") != "distilbert":
            found = config.get("model_type") if isinstance(config, dict) else None
            raise Unsupported(f"config.json's model_type is {found!r}, not 'distilbert'")
        try:
            n_layers, n_heads = int(config["n_layers"]), int(config["n_heads"])
        except (ValueError, KeyError, TypeError) as exc:
            raise Unsupported(f"config.json has no DistilBERT n_layers and n_heads ({type(exc).__name__})") from exc
        weights = model_dir / "model.safetensors"
        if config.get("activation", "gelu") != "gelu" or config.get("sinusoidal_pos_embds"):
            raise Unsupported("config.json asks for a DistilBERT variant (activation other than gelu or "
                              "sinusoidal position embeddings) that the packed forward does not implement")
        archs = config.get("architectures") or [SUPPORTED_ARCHITECTURE]
        if SUPPORTED_ARCHITECTURE not in archs:
            raise Unsupported(f"config.json's architectures {archs} do not include {SUPPORTED_ARCHITECTURE}")
        if not weights.is_file():
            raise Unsupported("the model has no model.safetensors")
        names = cls.required(n_layers)
        try:
            with safe_open(weights, framework="pt") as f:
                missing = sorted(set(names) - set(f.keys()))
                if missing:
                    raise Unsupported(f"model.safetensors lacks {len(missing)} tensors of transformers' "
                                      f"DistilBERT layout, e.g. {missing[0]}")
                tensors = {n: f.get_tensor(n) for n in names}
        except SafetensorError as exc:  # from_pretrained then says what is wrong with the file
            raise Unsupported(f"safetensors cannot read model.safetensors ({exc})") from exc
        dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in tensors.values() if t.dtype != torch.float32})
        if dtypes:
            raise Unsupported(f"model.safetensors holds {', '.join(dtypes)} tensors, not only float32")
        model = cls(tensors, n_heads, kernels=kernels)
        model.word_rows = WordRows.for_tensor(model.word)
        return model

    @classmethod
    def from_transformers(cls, model: Any, kernels: LinearKernels | None = None) -> DistilBertClassifier:
        """The same arithmetic on the tensors of a loaded DistilBertForSequenceClassification."""
        tensors = {k: v.detach() for k, v in model.state_dict().items()}
        out = cls(tensors, int(model.config.n_heads), kernels=kernels)
        out.word_rows = WordRows.for_tensor(out.word)
        return out

    def __call__(self, ids: NDArray[np.int64], mask: NDArray[np.int64]) -> Any:
        """Logits [B, K] of one right-padded batch: ids, mask [B, longest]; the linear layers on the
        kernels `self.kernels` names."""
        with self.kernels.active():
            return self._logits(ids, mask)

    def _logits(self, ids: NDArray[np.int64], mask: NDArray[np.int64]) -> Any:
        import torch  # deferred: torch loads only where a model runs
        import torch.nn.functional as F

        bsz, width = ids.shape
        sel_np = np.flatnonzero(mask.reshape(-1))
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
        # q, k and v stored [B, longest, heads, head_dim], padding rows zero for the whole batch, and
        # reaching the batched products as transformers' own strided views [B, heads, longest,
        # head_dim]. The layout is part of the arithmetic: on some CPUs (seen on an AMD EPYC) MKL's
        # batched product rounds contiguous [B, heads, longest, head_dim] operands differently.
        qkv = x.new_zeros((3, bsz, width, heads, head_dim))
        for layer in self.layers:
            for j, lin in enumerate((layer.q, layer.k, layer.v)):
                qkv[j][row_of, pos] = F.linear(x, *lin).view(-1, heads, head_dim)
            q, k, v = (qkv[j].transpose(1, 2) for j in range(3))
            scores = torch.matmul(q, k.transpose(2, 3))
            scores.mul_(scaling)  # in place: the same products and sums as `* scaling` and `+ bias`
            scores.add_(bias)
            probs = F.softmax(scores, dim=-1)
            # Attention's buffers go as soon as they are used instead of when the next layer rebinds
            # their names: kept, they would live through the feed-forward block, where a forward peaks
            # (12 of 52 MB on the full-size model's largest batch). The operations are the same.
            del scores
            context = torch.matmul(probs, v).transpose(1, 2)[row_of, pos].reshape(-1, d)
            del probs
            h = F.linear(context, *layer.out)
            del context
            h += x
            x = F.layer_norm(h, (d,), *layer.sa_norm, LAYER_NORM_EPS)
            h = F.linear(x, *layer.lin1)
            torch.ops.aten.gelu_(h)  # exact GELU in place: the same kernel, one [tokens, hidden] buffer fewer
            h = F.linear(h, *layer.lin2)
            h += x
            x = F.layer_norm(h, (d,), *layer.out_norm, LAYER_NORM_EPS)
        pooled = torch.relu(F.linear(x.index_select(0, torch.from_numpy(starts)), *self.pre_classifier))
        return F.linear(pooled, *self.classifier)


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
        import torch  # deferred: torch loads only where a model runs

        if weight.dtype != torch.float32 or weight.dim() != 2:
            return None
        backing = file_backing(weight)
        return None if backing is None else cls(backing[0], backing[1], *weight.shape)

    def __call__(self, token_ids: NDArray[np.int64]) -> Any:
        import torch  # deferred: torch loads only where a model runs

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


