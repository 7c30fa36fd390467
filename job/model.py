"""Model loading: the tokenizer and the forward a run uses, from the checked model files.

A DistilBERT sequence classifier under eager attention (the protocol's model) runs the job's packed
forward (job.distilbert.DistilBertClassifier), loaded straight from model.safetensors, memory-mapped
and never copied, without importing transformers' modeling stack (transformers.modeling_utils alone
pulls in torch.distributed, torch._dynamo and sympy: ~80 MB of resident memory). Any other model or
attention implementation runs transformers' own forward (AutoModelForSequenceClassification): any
architecture with a sequence-classification head (BERT, RoBERTa, DeBERTa, ...), loaded in float32 with
the protocol's attention implementation and put in eval mode, each checked after loading."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from job.distilbert import SUPPORTED_ARCHITECTURE, DistilBertClassifier, Unsupported
from job.errors import JobError
from job.inference import Forward
from job.linear_kernels import LinearKernels
from job.resources import ResolvedRepo
from job.runtime import Settings

PACKED = "packed-distilbert"
TRANSFORMERS = "transformers"
FALLBACK = "fallback: "


@dataclass(frozen=True)
class ForwardChoice:
    """Which forward a run infers with, and why; data/environment.json's `forward_choice`.

    name: PACKED, the job's own DistilBERT forward (job.distilbert.DistilBertClassifier), which every
    run checks against transformers' (job.forward_check); or TRANSFORMERS, transformers' own forward
    of the loaded model. reason: for PACKED what made the model eligible, for TRANSFORMERS
    "fallback: " and why the packed forward does not apply."""

    name: str
    reason: str

    @property
    def packed(self) -> bool:
        return self.name == PACKED

    def record(self) -> dict[str, str]:
        return {"name": self.name, "reason": self.reason}

    def note(self) -> str | None:
        """The line a run prints when it falls back to transformers' forward; None for the packed one."""
        if self.packed:
            return None
        return (f"note: the model runs on transformers' own forward ({self.reason}); recorded in "
                "data/environment.json as forward_choice.")

    def announce(self) -> None:
        """Say on stderr when the run falls back to transformers' forward (nothing for the packed one)."""
        if (note := self.note()) is not None:
            print(note, file=sys.stderr)


@dataclass(frozen=True)
class Model:
    """What a run infers with: `forward`, loaded as `choice` says. `segments`: the model has segment
    embeddings (config type_vocab_size above 1, e.g. BERT), so its forward takes the tokenizer's
    token type ids, which tell the two texts of a pair apart."""

    tokenizer: Any
    forward: Forward
    choice: ForwardChoice
    segments: bool = False

    def __post_init__(self) -> None:
        if self.choice.packed != isinstance(self.forward, DistilBertClassifier):
            raise ValueError(f"forward {self.forward.name} does not match the choice {self.choice.name!r}")

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id or 0)

    @property
    def packed(self) -> DistilBertClassifier | None:
        """The packed forward when the choice is it (what job.forward_check checks), else None."""
        return self.forward if isinstance(self.forward, DistilBertClassifier) else None


class TransformersForward:
    """transformers' own forward of a loaded sequence classifier in eval mode, on the padded batch;
    with token type ids for a model with segment embeddings."""

    def __init__(self, model: Any, kernels: LinearKernels | None = None) -> None:
        self.model = model
        self.name = f"{type(model).__module__}.{type(model).__name__}"
        self.kernels = LinearKernels() if kernels is None else kernels  # run its nn.Linear layers (MKL's: None)

    def __call__(self, ids: NDArray[np.int64], mask: NDArray[np.int64], types: NDArray[np.int64] | None = None,
                 /) -> Any:
        import torch  # deferred: torch loads only where a model runs

        extra = {} if types is None else {"token_type_ids": torch.from_numpy(types)}
        with self.kernels.active():
            return self.model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), **extra).logits


@contextlib.contextmanager
def model_directory(repo: ResolvedRepo) -> Iterator[Path]:
    """A directory holding (links to) exactly the checked model files, for from_pretrained."""
    with tempfile.TemporaryDirectory(prefix="calibration-model-") as tmp:
        for f in repo.files:
            link = Path(tmp) / f.path
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(f.local, link)
        yield Path(tmp)


def load_model(model_dir: Path, s: Settings) -> Model:
    """Tokenizer and forward, float32, eval mode, the protocol's attention implementation: the packed
    forward when the protocol asks for eager attention and model.safetensors holds a float32
    DistilBERT sequence classifier in transformers' tensor layout (no segment embeddings),
    transformers' forward otherwise, fed token type ids when the model has segment embeddings.
    The Model's choice says which, and why."""
    from safetensors import SafetensorError  # deferred: safetensors loads only with the weights

    try:
        tokenizer = load_tokenizer(model_dir)
        if s.attn_implementation != "eager":
            why = f"the protocol asks for {s.attn_implementation!r} attention and the packed forward implements eager"
        else:
            try:
                packed = DistilBertClassifier.load(model_dir, LinearKernels(s.linear_kernels))
            except Unsupported as exc:
                why = str(exc)
            else:
                return Model(tokenizer, packed, ForwardChoice(PACKED, f"float32 {SUPPORTED_ARCHITECTURE} in "
                                                              "transformers' tensor layout, eager attention"))
        model = load_transformers(model_dir, s.attn_implementation)
        segments = int(getattr(model.config, "type_vocab_size", 0) or 0) > 1
        forward = TransformersForward(model, LinearKernels(s.linear_kernels))
        return Model(tokenizer, forward, ForwardChoice(TRANSFORMERS, FALLBACK + why), segments)
    except (OSError, ValueError, SafetensorError) as exc:
        raise JobError(f"Cannot load the model from its checked files ({exc}); the files may not form a "
                       "sequence classifier that transformers' AutoModelForSequenceClassification loads.") from exc


def load_tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer  # deferred: transformers loads only where a model is loaded
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    return AutoTokenizer.from_pretrained(model_dir)


def _import_losses_without_scipy() -> None:
    """Import transformers' loss modules as if scipy were absent, once per process.

    transformers' modeling imports its loss modules, whose object-detection losses import
    scipy.optimize at import time wherever scipy is installed. A sequence classifier never computes
    them, the runtime lock has no scipy, and in an environment that has it (the development lock)
    the import left the forward check's process 35 MB larger (367 against 332 MB resident after
    importing DistilBERT's modeling on an Intel Xeon), at the run's peak. The flag is restored at
    once: only the loss modules' import-time choice sees it."""
    if sys.modules.get("transformers.loss.loss_utils") is not None:
        return
    import transformers.utils  # deferred: transformers loads only where a model is loaded

    hf_utils: Any = transformers.utils  # the flag is not in its declared exports
    available = getattr(hf_utils, "is_scipy_available", None)
    if available is None:
        return  # another transformers: its modeling imports what it imports
    hf_utils.is_scipy_available = lambda: False
    try:
        import transformers.loss.loss_utils  # deferred: as above
    except ImportError:
        pass  # another transformers without these modules: nothing to keep from importing scipy
    finally:
        hf_utils.is_scipy_available = available


def load_transformers(model_dir: Path, attn_implementation: str, tensors: Mapping[str, Any] | None = None) -> Any:
    """transformers' AutoModelForSequenceClassification in float32 and eval mode (weights memory-mapped).

    With `tensors` (checkpoint name -> tensor, e.g. a DistilBertClassifier's), the model is built from
    config.json by from_pretrained on those tensors instead of reading model.safetensors again: its
    parameters are those very tensors, not a second mapping of the file that would count its pages
    twice. Every parameter must come from `tensors` (ValueError otherwise: none is left initialised
    at random)."""
    # deferred: torch and transformers load only where a model is loaded
    import torch
    import transformers
    from transformers.utils import logging as hf_logging

    _import_losses_without_scipy()

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    if tensors is None:
        model = transformers.AutoModelForSequenceClassification.from_pretrained(
            model_dir, attn_implementation=attn_implementation, dtype=torch.float32)
    else:
        config = transformers.AutoConfig.from_pretrained(model_dir)
        architecture: Any = transformers.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING[type(config)]
        model, info = architecture.from_pretrained(
            None, config=config, state_dict=dict(tensors), attn_implementation=attn_implementation,
            dtype=torch.float32, output_loading_info=True)
        unloaded = sorted({*info.get("missing_keys", ()), *(k for k, *_ in info.get("mismatched_keys", ()))})
        if unloaded:
            raise ValueError(f"{type(model).__name__} has parameters the given tensors do not provide: "
                             f"{', '.join(unloaded[:5])}")
    model.eval()
    # The protocol's guarantees, checked on the loaded module rather than assumed from the arguments:
    # a checkpoint may carry another dtype or an architecture may ignore the attention request.
    dtypes = sorted({str(p.dtype) for p in model.parameters()})
    attn = getattr(model.config, "_attn_implementation", attn_implementation)
    if dtypes != [str(torch.float32)] or attn != attn_implementation or model.training:
        raise ValueError(f"{type(model).__name__} loaded with parameters {dtypes}, attention {attn!r}, "
                         f"training {model.training}, not float32, {attn_implementation!r} and eval mode")
    return model
