"""The kernels of a forward's linear layers, as the protocol's `inference.linear_kernels` names them.

- "mkl": torch's own float32 `F.linear` on x86 CPUs, MKL's sgemm. The field's absence means it, so
  every protocol written before the field existed keeps its arithmetic, its hash and its goldens.
- "onednn": oneDNN's inner product (`torch.ops.mkldnn._linear_pointwise`), which ran the full-size
  forward in 0.80 of MKL's time at 1 thread on an AMD EPYC, ahead of ONNX Runtime and OpenVINO
  (docs/PERFORMANCE.md, "The peers on a quiet AMD EPYC").

Other kernels round differently (up to 7.2e-7 on the full-size model's logits, no prediction
changed), so the choice is part of the arithmetic the protocol fixes, never a switch a run makes by
itself. It changes no other operation: embeddings, attention, layer norms and GELU stay torch's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from bundle.layout import DEFAULT_LINEAR_KERNELS, LINEAR_KERNELS
from job.errors import JobError

KERNELS = tuple(LINEAR_KERNELS)  # the format's names (bundle.layout), in the schema's order
DEFAULT = DEFAULT_LINEAR_KERNELS


def _onednn_linear(x: Any, weight: Any, bias: Any = None) -> Any:
    import torch  # deferred: torch loads only where a model runs

    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


@contextlib.contextmanager
def linear_kernels(name: str) -> Iterator[None]:
    """For the length of the block, every `torch.nn.functional.linear` runs on `name`'s kernels: the
    packed forward's linear layers and transformers' `nn.Linear`, which both look it up in that
    module at call time. JobError when this torch has no oneDNN."""
    if name == DEFAULT:
        yield
        return
    if name not in KERNELS:
        raise ValueError(f"unknown linear kernels {name!r}; the protocol schema allows {', '.join(KERNELS)}")
    import torch  # deferred: torch loads only where a model runs
    import torch.nn.functional as F

    if not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
        raise JobError("The protocol asks for oneDNN's linear kernels and this torch build has none; set "
                       "inference.linear_kernels to mkl or run with torch's x86-64 CPU build.")
    own = F.linear
    F.linear = _onednn_linear  # type: ignore[assignment]  # same call signature, other kernels
    try:
        yield
    finally:
        F.linear = own
