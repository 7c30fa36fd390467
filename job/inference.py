"""Deterministic CPU inference: tokenise, batch in the protocol's order, return float32 logits."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
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


def configure_torch(s: Settings) -> dict[str, Any]:
    """Apply threads, seed and determinism; return what torch reports back."""
    import torch

    torch.set_num_threads(s.threads)
    with contextlib.suppress(RuntimeError):  # can only be set before the first parallel region
        torch.set_num_interop_threads(s.interop_threads)
    torch.manual_seed(s.seed)
    torch.use_deterministic_algorithms(s.deterministic)
    return {
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "seed": s.seed,
        "mkldnn_enabled": bool(torch.backends.mkldnn.enabled),
        "parallel_info": torch.__config__.parallel_info().strip().splitlines()[:6],
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
    """Tokenizer and classifier in eval mode, float32, the protocol's attention implementation."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForSequenceClassification.from_pretrained(
            model_dir, attn_implementation=s.attn_implementation, dtype=torch.float32
        )
    except (OSError, ValueError) as exc:
        raise JobError(f"Cannot load the model from its checked files ({exc}); the files may not form a "
                       "DistilBERT-style sequence classifier.") from exc
    model.eval()
    return tokenizer, model


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


def run_pool(model: Any, pad_id: int, enc: Encoded, keys: Sequence[str], s: Settings,
             progress: str | None = None) -> PoolOutput:
    """Logits for every row in pool order, computed batch by batch in the protocol's order."""
    import torch
    from tqdm import tqdm

    n = len(enc.ids)
    lengths = enc.lengths
    plan = batch_plan(lengths, keys, s.batch_size)
    logits: NDArray[np.float32] | None = None
    batch_of = np.zeros(n, dtype=np.int64)
    bar = tqdm(total=n, desc=progress, unit="row", disable=progress is None, leave=False)
    with torch.inference_mode():
        for b, rows in enumerate(plan):
            width = int(lengths[rows].max())
            ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for r, i in enumerate(rows):
                ids[r, : lengths[i]] = torch.tensor(enc.ids[i], dtype=torch.long)
                mask[r, : lengths[i]] = 1
            out = model(input_ids=ids, attention_mask=mask).logits.numpy()
            if logits is None:
                logits = np.zeros((n, out.shape[1]), dtype=np.float32)
            logits[rows] = out
            batch_of[rows] = b
            bar.update(len(rows))
    bar.close()
    assert logits is not None
    return PoolOutput(logits=logits, token_count=lengths, truncated=enc.truncated, batch=batch_of)
