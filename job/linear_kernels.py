"""The kernels of a forward's linear layers, as the protocol's `inference.linear_kernels` names them.

- "mkl": torch's own float32 `F.linear` on x86 CPUs, MKL's sgemm. The field's absence means it, so
  every protocol written before the field existed keeps its arithmetic, its hash and its goldens.
- "onednn": oneDNN's inner product (`torch.ops.mkldnn._linear_pointwise`), which ran the full-size
  forward in 0.83 of MKL's time at 1 thread and 0.74 at 2 on an AMD EPYC with AVX-512, ahead of
  ONNX Runtime (docs/PERFORMANCE.md, "oneDNN's weights packed once"), but in 1.01 and 0.93 on an
  AVX2-only one, behind it ("The peers on an AVX2-only AMD EPYC").

Other kernels round differently (up to 7.2e-7 on the full-size model's logits, no prediction
changed), so the choice is part of the arithmetic the protocol fixes, never a switch a run makes by
itself. It changes no other operation: embeddings, attention, layer norms and GELU stay torch's.

oneDNN's inner product runs faster on weights reordered into a blocked layout of its own
(`torch.ops.mkldnn._reorder_linear_weight`) than on the plain [out, in] matrix. LinearKernels.pack
reorders each weight once, at load (the full-size forward then took 0.93 of the plain weights' time
at 1 thread and 0.94-0.96 at 2 on the AMD EPYC, sums of per-batch times, interleaved). The
packed copies are a matter of speed only, never of arithmetic: on two rows or more they give the same
bits as the plain weight on every shape measured (tests/job/test_linear_kernels.py, natively and
under AVX2 limits), which pack also checks on a probe for every weight it packs; on a single row they
do not (another kernel), so one-row products read the plain weight."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from bundle.layout import DEFAULT_LINEAR_KERNELS, LINEAR_KERNELS
from job.errors import JobError
from job.mapped_pages import release_file_pages

KERNELS = tuple(LINEAR_KERNELS)  # the format's names (bundle.layout), in the schema's order
DEFAULT = DEFAULT_LINEAR_KERNELS
PROBE_ROWS = 16  # rows of the input on which pack compares a packed weight's products with the plain one's

_Storage = tuple[int, tuple[int, ...], tuple[int, ...]]  # (data pointer, shape, strides) of a plain tensor


def _storage(t: Any) -> _Storage:
    return t.data_ptr(), tuple(t.shape), tuple(t.stride())


def _reorder(weight: Any) -> Any:
    import torch  # deferred: torch loads only where a model runs

    return torch.ops.mkldnn._reorder_linear_weight(weight)


def _onednn_linear(x: Any, weight: Any, bias: Any = None) -> Any:
    import torch  # deferred: torch loads only where a model runs

    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class LinearKernels:
    """The kernels that run one model's linear layers, by the protocol's name, and its weights packed
    for them. ValueError for a name the schema does not allow; JobError when the name is onednn and
    this torch has no oneDNN."""

    def __init__(self, name: str = DEFAULT) -> None:
        if name not in KERNELS:
            raise ValueError(f"unknown linear kernels {name!r}; the protocol schema allows {', '.join(KERNELS)}")
        if name != DEFAULT:
            import torch  # deferred: torch loads only where a model runs

            if not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
                raise JobError("The protocol asks for oneDNN's linear kernels and this torch build has none; set "
                               "inference.linear_kernels to mkl or run with torch's x86-64 CPU build.")
        self.name = name
        # plain weight's storage -> (the plain weight, held so that its storage stays its own; packed)
        self._packed: dict[_Storage, tuple[Any, Any]] = {}
        # active(): how many blocks are open, on any thread, and torch's own F.linear while any is
        self._lock = threading.Lock()
        self._open = 0
        self._own: Any = None

    @property
    def hands_back_weights(self) -> bool:
        """Whether these kernels hand back the model file's pages of each weight they pack (onednn;
        mkl packs none), so that a model on them should read nothing else from that mapping at
        every layer."""
        return self.name != DEFAULT

    def pack(self, weight: Any, bias: Any = None) -> bool:
        """Prepare `weight` [out, in] (with `bias`) for the linear layers; True when it was packed.
        For onednn: reordered once into oneDNN's layout and remembered by the plain tensor's storage,
        so that every F.linear on a tensor of that storage, within `active`, reads the packed copy:
        the packed forward's and transformers' reference of job.forward_check, whose parameters are
        the same tensors. Not packed when the two layouts' products on a probe differ in any bit,
        nor ever for mkl. Where the weight is a clean mapping of the model file, its pages are
        handed back once packed (job.mapped_pages): packing read them, and only one-row products
        read them again, so beside the packed copies at most one weight's file pages are resident."""
        if self.name == DEFAULT:
            return False
        import torch  # deferred: torch loads only where a model runs

        packed = _reorder(weight)
        probe = torch.linspace(-1.0, 1.0, PROBE_ROWS * weight.shape[1]).reshape(PROBE_ROWS, -1)
        if not torch.equal(_onednn_linear(probe, packed, bias), _onednn_linear(probe, weight, bias)):
            return False
        self._packed[_storage(weight)] = (weight, packed)
        release_file_pages(weight)
        return True

    def packed_weights(self) -> list[Any]:
        """The plain weights that pack packed: only one-row products still read them."""
        return [plain for plain, _ in self._packed.values()]

    def _linear(self, x: Any, weight: Any, bias: Any = None) -> Any:
        if x.numel() > x.shape[-1]:  # two rows or more: the packed copy's bits are the plain weight's
            weight = self._packed.get(_storage(weight), (None, weight))[1]
        return _onednn_linear(x, weight, bias)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """For the length of the block, every `torch.nn.functional.linear` runs on these kernels: the
        packed forward's linear layers and transformers' `nn.Linear`, which both look it up in that
        module at call time. Blocks may overlap on several threads (forwards of concurrent
        batches): the kernels stay in place until the last open block ends."""
        if self.name == DEFAULT:
            yield
            return
        import torch.nn.functional as F  # deferred: torch loads only where a model runs

        with self._lock:
            if self._open == 0:
                self._own = F.linear
                F.linear = self._linear  # type: ignore[assignment]  # same call signature, other kernels
            self._open += 1
        try:
            yield
        finally:
            with self._lock:
                self._open -= 1
                if self._open == 0:
                    F.linear = self._own
                    self._own = None
