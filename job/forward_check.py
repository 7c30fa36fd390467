"""Proof of the packed forward on the weights that run: its logits against transformers' own.

The job's packed DistilBERT forward is a re-implementation; a run trusts its logits only because
they equal, bit for bit, those of transformers' DistilBertForSequenceClassification with eager
attention. Every run and smoke test re-establishes that on the model it actually loaded: the first
rows of its calibration pool go, as one right-padded batch, through both forwards, and the run
stops unless the float32 logits are identical.

The batch compared is the pool's first batch exactly as inference ran it (the protocol's order and
padding): the packed and padded forwards hand their linear layers matrices of different heights,
and with more than one thread the GEMM's summation order can depend on that height, so the same
rows in another batch are a different computation."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from job.batching import batch_plan, encode, padded_batch
from job.errors import JobError
from job.inference import Forward
from job.model import Model, TransformersForward, load_transformers, model_directory
from job.resources import ResolvedRepo
from job.runtime import Settings, release_free_heap


def compare_forwards(forward: Forward, reference: Forward, ids: Any, mask: Any) -> dict[str, Any]:
    """Both forwards on one padded batch; the comparison record, or JobError unless the logits are
    the same float32 bits (dtype, shape and every byte)."""
    import torch

    with torch.inference_mode():
        ours = np.asarray(forward(ids, mask).numpy())
        theirs = np.asarray(reference(ids, mask).numpy())
    same = ours.dtype == theirs.dtype == np.float32 and ours.shape == theirs.shape
    if not (same and ours.tobytes() == theirs.tobytes()):
        rows = (int((ours != theirs).any(axis=1).sum()) if ours.shape == theirs.shape else len(ids))
        raise JobError(f"The job's packed forward and transformers' eager forward gave different logits for "
                       f"{rows} of {len(ids)} calibration rows of this model, so the run stops without a bundle; "
                       "report it with the model and the torch and transformers versions.")
    return {"rows": len(ids), "identical": True, "forward": forward.name, "reference": reference.name}


def check_packed_forward(model: Model, repo: ResolvedRepo, s: Settings, texts: Sequence[str],
                         keys: Sequence[str]) -> dict[str, Any] | None:
    """Compare model.forward with transformers' eager forward of the same checked files on the first
    batch of the pool (`texts`, `keys` in pool order) in the protocol's order and padding; None when
    model.forward is transformers' own. Reads no RNG and leaves threads as they are."""
    if not model.packed:
        return None
    enc = encode(model.tokenizer, texts, s.max_length)
    lengths = enc.lengths
    offsets = np.concatenate([[0], np.cumsum(lengths[:-1])]).astype(np.int64)
    flat = np.fromiter(itertools.chain.from_iterable(enc.ids), dtype=np.int64, count=int(lengths.sum()))
    rows = batch_plan(lengths, keys, s.batch_size)[0]
    ids, mask = padded_batch(flat, offsets, lengths, rows, model.pad_id)
    try:
        with model_directory(repo) as model_dir:
            reference = TransformersForward(load_transformers(model_dir, "eager"))
    except (OSError, ValueError) as exc:
        raise JobError(f"transformers cannot load the model to check the packed forward against ({exc}); "
                       "the files may not form a DistilBERT sequence classifier.") from exc
    try:
        return compare_forwards(model.forward, reference, ids, mask)
    finally:
        del reference
        release_free_heap()
