"""Proof of the packed forward on the weights that run: its logits against transformers' own.

The job's packed DistilBERT forward is a re-implementation of transformers'
DistilBertForSequenceClassification with eager attention. Every run and smoke test checks it on the
model it actually loaded, against transformers' own forward, built by from_pretrained on the same
checkpoint tensors (word-embedding rows read afresh from the file; reference_forward), on two batches
of the pool's rows:

* A batch without padding: the first rows in the protocol's batch order, each cut to the shortest
  length among them, attention mask all ones. There the packed forward's [tokens, dim] matrices
  have exactly the rows of transformers' [batch, longest, dim] ones, so both run the same operations
  on the same shapes and values, and the float32 logits must be the same bits. This is what can be
  proven bit for bit: the packed forward is transformers' arithmetic on the loaded weights.
* The pool's first batch exactly as inference ran it (right-padded). Here the GEMMs differ in height
  (real tokens against batch * longest) and MKL's sgemm may round a row differently depending on the
  matrix height, even at one thread, so the logits may differ in the last bits. The largest absolute
  difference and ulps are recorded; only a gross disagreement (a wrong weight, a wrong layer) stops
  the run. The job's logits are the packed forward's: the protocol fixes the packed layout and the
  batches, just as transformers' own logits for a row depend on which rows share its batch."""

from __future__ import annotations

import itertools
import json
import mmap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from job.batching import Encoded, batch_plan, encode, padded_batch
from job.distilbert import WORD_EMBEDDINGS, WordRows
from job.errors import JobError
from job.inference import Forward
from job.linear_kernels import LinearKernels
from job.logit_compare import ulps_apart
from job.model import Model, TransformersForward, load_transformers, model_directory
from job.process import blocks_mapped_apart, release_free_memory
from job.resources import ResolvedRepo
from job.runtime import Settings

UNPADDED_ROWS = 8  # rows of the batch without padding (fewer when the pool is smaller)
PADDED_BOUND = 1e-4  # largest absolute logit difference on a padded batch before the run stops
_REPORT = "report it with the model and the torch and transformers versions"


def unpadded_batch(enc: Encoded, keys: Sequence[str], rows: int = UNPADDED_ROWS
                   ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(input_ids, attention_mask) [min(rows, n), shortest]: the first rows in the protocol's batch
    order (longest first, ties by key), each cut to the shortest length among them; mask all ones."""
    lengths = enc.lengths
    chosen = batch_plan(lengths, keys, rows)[0]
    width = int(lengths[chosen].min())
    ids = np.array([enc.ids[i][:width] for i in chosen], dtype=np.int64)
    return ids, np.ones_like(ids)


def first_padded_batch(enc: Encoded, keys: Sequence[str], batch_size: int, pad_id: int
                       ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The pool's first batch exactly as inference runs it: protocol order, right-padded."""
    lengths = enc.lengths
    offsets = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    flat = np.fromiter(itertools.chain.from_iterable(enc.ids), dtype=np.int64, count=int(lengths.sum()))
    return padded_batch(flat, offsets, lengths, batch_plan(lengths, keys, batch_size)[0], pad_id)


def reference_forward(model_dir: Path, tensors: Mapping[str, Any] | None = None,
                      kernels: LinearKernels | None = None) -> TransformersForward:
    """transformers' eager forward of the model in `model_dir`, its classifier head reading the [CLS]
    rows from a contiguous copy; built on `tensors` (the packed forward's, by checkpoint name) when
    given, so that the check adds no second copy or mapping of the weights (job.model.load_transformers).
    What the check then proves: transformers' arithmetic, with each tensor in the layer its name
    gives, equals the packed forward, whose own assignment of tensors to layers and reading of word
    rows (WordRows) are thereby checked too, the word rows being read by another route
    (sparse_word_table).

    transformers hands pre_classifier the strided view hidden[:, 0] (row stride longest * dim); the
    packed forward gathers the same rows into a contiguous [B, dim] matrix. Same values and shapes,
    but with two or more threads MKL's sgemm rounds these two layouts differently (measured: up to
    4.8e-7 on the stand-in logits, at 2 and 4 threads, never at 1). The copy makes the layouts match
    and changes no value that enters the head; every other operation is transformers' own. Its
    linear layers run on `kernels` (job.linear_kernels), those of the forward it is checked against,
    and read the weights those kernels packed for it, found by the storage of each layer's own
    parameter: a tensor in the wrong layer of either forward still shows."""
    model = load_transformers(model_dir, "eager", tensors)
    model.pre_classifier.register_forward_pre_hook(lambda _module, args: (args[0].contiguous(), *args[1:]))
    return TransformersForward(model, kernels)


def sparse_word_table(model_file: Path, name: str, ids: Iterable[int]) -> Any:
    """A float32 tensor of the shape of the checkpoint's word-embedding matrix `name`, holding its rows
    `ids` and zeros elsewhere, for the reference forward's lookups.

    The rows are read by WordRows, but at the offset the file's safetensors header gives rather than
    the one WordRows.for_tensor finds through the memory map: another route to the packed forward's
    word rows. The zeros are untouched pages of an anonymous mapping, which take no memory until
    written. A lookup through the map instead faults in the page-cache folios around every row
    (about 1 MB each on this machine's kernel): most of the 94 MB matrix for the few hundred tokens
    of the check. A token outside `ids` would read a zero row and its logits would differ from the
    packed forward's, so the check fails; it never passes wrongly."""
    import torch  # deferred: torch loads only where a model runs

    with open(model_file, "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        entry = json.loads(f.read(header_len))[name]
    shape, (begin, end) = entry["shape"], entry["data_offsets"]
    if entry["dtype"] != "F32" or len(shape) != 2 or end - begin != shape[0] * shape[1] * 4:
        raise ValueError(f"{name} in {model_file.name} is not a float32 matrix")
    rows = sorted(set(ids))
    outside = [i for i in rows if not 0 <= i < shape[0]]
    if outside:
        raise ValueError(f"token id {outside[0]} is outside the vocabulary of {shape[0]}")
    # An anonymous mapping, not np.zeros: numpy asks for transparent huge pages on large arrays,
    # and each row written would then make a whole 2 MB page resident.
    table = np.frombuffer(mmap.mmap(-1, shape[0] * shape[1] * 4), dtype=np.float32).reshape(shape)
    table[rows] = WordRows(model_file, 8 + header_len + begin, *shape)(np.array(rows, dtype=np.int64)).numpy()
    return torch.from_numpy(table)


def _logits(forward: Forward, ids: NDArray[np.int64], mask: NDArray[np.int64]) -> NDArray[np.float32]:
    """One forward pass of the check, its buffers handed back before the next: the four passes
    (two forwards, two batches) differ in their allocation sizes, so glibc cannot reuse one pass's
    free chunks for the next and, untrimmed, their heaps stacked up (measured: about 45 MB of the
    full-size model's peak)."""
    import torch  # deferred: torch loads only where a model runs

    with torch.inference_mode(), blocks_mapped_apart():
        out = np.asarray(forward(ids, mask).numpy())
    release_free_memory()
    if out.dtype != np.float32 or out.ndim != 2 or out.shape[0] != len(ids):
        raise JobError(f"A forward gave logits of dtype {out.dtype} and shape {list(out.shape)} for {len(ids)} rows, "
                       f"expected float32 [{len(ids)}, K]; {_REPORT}.")
    return out


def compare_unpadded(forward: Forward, reference: Forward, ids: NDArray[np.int64],
                     mask: NDArray[np.int64]) -> dict[str, Any]:
    """Both forwards on a batch without padding; its record, or JobError unless the float32 logits
    are the same bits (shape and every byte)."""
    if not mask.all():
        raise ValueError("compare_unpadded needs a batch without padding")
    ours, theirs = _logits(forward, ids, mask), _logits(reference, ids, mask)
    if ours.shape != theirs.shape or ours.tobytes() != theirs.tobytes():
        rows = int((ours != theirs).any(axis=1).sum()) if ours.shape == theirs.shape else len(ids)
        raise JobError(f"The job's packed forward and transformers' eager forward gave different logits for {rows} "
                       f"of {len(ids)} calibration rows in a batch without padding, where they run the same "
                       f"operations on the same shapes, so the run stops without a bundle; {_REPORT}.")
    return {"rows": len(ids), "tokens_per_row": int(ids.shape[1]), "identical": True}


def compare_padded(forward: Forward, reference: Forward, ids: NDArray[np.int64], mask: NDArray[np.int64],
                   bound: float = PADDED_BOUND) -> dict[str, Any]:
    """Both forwards on one right-padded batch; its record (largest absolute difference and ulps),
    or JobError when some logit differs by more than `bound`."""
    ours, theirs = _logits(forward, ids, mask), _logits(reference, ids, mask)
    if ours.shape != theirs.shape:
        raise JobError(f"The job's packed forward gave logits of shape {list(ours.shape)} and transformers' eager "
                       f"forward {list(theirs.shape)} on the first calibration batch, so the run stops without a "
                       f"bundle; {_REPORT}.")
    diff = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    largest = float(diff.max()) if diff.size else 0.0
    if not largest <= bound:  # also stops on NaN
        raise JobError(f"The job's packed forward and transformers' eager forward gave logits up to {largest:.3g} "
                       f"apart (bound {bound:g}) on the first calibration batch, so a weight or layer differs and "
                       f"the run stops without a bundle; {_REPORT}.")
    return {"rows": len(ids), "longest": int(ids.shape[1]), "tokens": int(mask.sum()),
            "rows_differing": int((ours != theirs).any(axis=1).sum()), "max_abs_diff": largest,
            "max_ulps": int(ulps_apart(ours, theirs).max()) if diff.size else 0, "bound": bound}


def compare_forwards(forward: Forward, reference: Forward, enc: Encoded, keys: Sequence[str],
                     s: Settings, pad_id: int) -> dict[str, Any]:
    """The check on encoded rows `enc` (pool order, `keys`): bit-equal logits on the batch without
    padding, then the bounded comparison on the first padded batch. JobError when either fails."""
    unpadded, padded = checked_batches(enc, keys, s, pad_id)
    return {"forward": forward.name, "reference": reference.name,
            "unpadded": compare_unpadded(forward, reference, *unpadded),
            "padded": compare_padded(forward, reference, *padded)}


Batch = tuple[NDArray[np.int64], NDArray[np.int64]]  # (input_ids, attention_mask)


def checked_batches(enc: Encoded, keys: Sequence[str], s: Settings, pad_id: int) -> tuple[Batch, Batch]:
    """(ids, mask) of the two batches the check runs: unpadded_batch and first_padded_batch."""
    return unpadded_batch(enc, keys), first_padded_batch(enc, keys, s.batch_size, pad_id)


def check_packed_forward(model: Model, repo: ResolvedRepo, s: Settings, texts: Sequence[str],
                         keys: Sequence[str]) -> dict[str, Any] | None:
    """Compare the model's packed forward with transformers' eager forward of the same checked files
    on rows of the pool (`texts`, `keys` in pool order), as compare_forwards does; None when the
    model runs transformers' own forward (model.choice). Reads no RNG and leaves threads as they are."""
    packed = model.packed
    if packed is None:
        return None
    enc = encode(model.tokenizer, texts, s.max_length)
    # The reference reads its word rows afresh, and only those of the two checked batches: a table
    # for the whole pool's tokens made 8-16 MB more of it resident for nothing.
    used = {model.pad_id}.union(*(np.unique(ids).tolist() for ids, _ in checked_batches(enc, keys, s, model.pad_id)))
    try:
        with model_directory(repo) as model_dir:
            tensors = {**packed.tensors,
                       WORD_EMBEDDINGS: sparse_word_table(model_dir / "model.safetensors", WORD_EMBEDDINGS, used)}
            reference = reference_forward(model_dir, tensors, packed.kernels)
    except (OSError, ValueError) as exc:
        raise JobError(f"transformers cannot load the model to check the packed forward against ({exc}); "
                       "the files may not form a DistilBERT sequence classifier.") from exc
    return compare_forwards(packed, reference, enc, keys, s, model.pad_id)
