"""Large splits in bounded memory: rows tokenised batch by batch give the batches of rows tokenised at
once, and the bootstrap drawn in blocks is the protocol's one matrix, in the job and in the verifier."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from job.batching import Tokenized, batch_plan, encode
from job.bootstrap import bootstrap_indices, indices_sha256, paired_bootstrap
from job.inference import run_pool
from job.runtime import Settings


class CountingTokenizer:
    """A tokenizer that records how many rows each call tokenised."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer, self.calls = tokenizer, []  # type: list[int]

    def __call__(self, texts: list[str], *args: Any, **kwargs: Any) -> Any:
        self.calls.append(len(texts))
        return self.tokenizer(texts, *args, **kwargs)


@pytest.fixture(scope="module")
def bert_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoTokenizer

    from tests.anymodel import _tokenizer

    root = tmp_path_factory.mktemp("bert-tokenizer")
    _tokenizer(root, "bert")
    return AutoTokenizer.from_pretrained(root)


def _rows(n: int) -> tuple[list[str], list[str]]:
    from tests.factory import WORDS

    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 12)))) for _ in range(n)]
    pairs = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 6)))) for _ in range(n)]
    texts[3] = " ".join(["good"] * 40)  # over max_length below: cut, and flagged
    return texts, pairs


@pytest.mark.parametrize("segments", [False, True])
def test_batches_tokenised_on_the_fly_are_those_of_rows_tokenised_at_once(bert_tokenizer, segments):
    texts, pairs = _rows(37)
    keys = [f"{i:03d}" for i in range(37)]
    held = encode(bert_tokenizer, texts, 24, pairs, segments=segments)
    streamed = Tokenized(bert_tokenizer, texts, 24, pairs, segments=segments, chunk=5)
    assert streamed.lengths.tolist() == held.lengths.tolist() and streamed.lengths.max() == 24
    assert streamed.truncated.tolist() == held.truncated.tolist() and streamed.truncated.sum() == 1
    for rows in batch_plan(held.lengths, keys, 8):
        a, b = held.batch(rows, 0), streamed.batch(rows, 0)
        assert a.ids.tolist() == b.ids.tolist() and a.mask.tolist() == b.mask.tolist()
        if segments:
            assert a.types is not None and b.types is not None and a.types.tolist() == b.types.tolist()
            assert set(np.unique(b.types[b.mask == 0])) <= {0} and b.types.max() == 1  # second text: segment 1
        else:
            assert a.types is None and b.types is None


def test_a_pool_is_never_tokenised_whole(bert_tokenizer):
    """Counting tokenises `chunk` rows at a time, inference one batch at a time (and cut rows again)."""
    import torch

    texts, pairs = _rows(50)
    tokenizer = CountingTokenizer(bert_tokenizer)
    tokens = Tokenized(tokenizer, texts, 24, pairs, chunk=16)
    assert max(tokenizer.calls) == 16

    class Ones:
        name = "ones"

        def __call__(self, ids: Any, mask: Any) -> Any:
            return torch.ones((len(ids), 2), dtype=torch.float32)

    tokenizer.calls.clear()
    s = Settings(threads=1, interop_threads=1, attn_implementation="eager", batch_size=4, max_length=24, seed=0,
                 deterministic=True)
    out = run_pool(Ones(), 0, tokens, [str(i) for i in range(50)], s)
    assert out.logits.shape == (50, 2) and max(tokenizer.calls) <= 4


def test_the_bootstrap_in_blocks_is_the_protocols_one_matrix():
    rng = np.random.default_rng(1)
    n = 301
    z = rng.normal(size=(n, 3)) * 3
    y = rng.integers(0, 3, size=n)
    whole = paired_bootstrap(z, y, 0.7, resamples=200, seed=11)
    blocks = paired_bootstrap(z, y, 0.7, resamples=200, seed=11, cells=7 * n + 5)  # 7 resamples a block
    assert whole.indices_sha256 == blocks.indices_sha256 == indices_sha256(bootstrap_indices(n, 200, 11))
    for m in ("nll", "brier", "ece"):
        assert blocks.differences[m].shape == (200,)
        np.testing.assert_allclose(blocks.differences[m], whole.differences[m], rtol=0, atol=1e-12)
        assert abs(blocks.lower[m] - whole.lower[m]) < 1e-12 and abs(blocks.upper[m] - whole.upper[m]) < 1e-12


def test_the_verifier_rebuilds_the_matrix_in_blocks(monkeypatch):
    from verify import bootstrap as vb

    rng = np.random.default_rng(2)
    n = 97
    z = rng.normal(size=(n, 2)) * 4
    y = rng.integers(0, 2, size=n)
    boot = paired_bootstrap(z, y, 0.5, resamples=150, seed=5)
    doc = {"seed": 5, "resamples": 150, "beta": 0.5, "indices_sha256": boot.indices_sha256,
           "interval": {"quantiles": [0.025, 0.975]},
           "differences": {m: {"point": boot.point[m], "lower": boot.lower[m], "upper": boot.upper[m],
                               "verdict": "no claim" if boot.lower[m] <= 0 <= boot.upper[m] else
                               ("decrease" if boot.upper[m] < 0 else "increase")} for m in ("nll", "brier", "ece")}}
    blocks: list[int] = []
    real = vb.resample_blocks

    def small(seed: int, resamples: int, rows: int) -> Any:
        for block in real(seed, resamples, rows, cells=10 * rows):
            blocks.append(len(block))
            yield block

    monkeypatch.setattr(vb, "resample_blocks", small)
    assert "recomputed" in vb.check_differences(doc, z, y)
    assert blocks == [10] * 15
    with pytest.raises(vb.Failed, match="indices_sha256"):
        vb.check_differences({**doc, "seed": 6}, z, y)


def test_the_verifier_bounds_the_draws_by_time_and_accepts_a_large_split():
    import json

    from bundle.errors import ProtocolOutOfBounds
    from bundle.limits import dimensions
    from tests.factory import REPO

    doc = json.loads((REPO / "provenance.json").read_text())
    doc["resources"]["dataset"]["rows"] = 50_000
    for pool, size in zip(doc["split"]["pools"], (256, 256, 49_488), strict=True):
        pool["size"] = size
    assert dimensions(doc).resamples == 2000  # 2,000 x 49,488 draws, drawn in blocks
    doc["bootstrap"]["resamples"] = 5000
    with pytest.raises(ProtocolOutOfBounds, match="resamples"):
        dimensions(doc)
