"""A pool's strings past the split (job.dataset.Strings): the same values as the tuples they
replace, the same batch plan, and the same predictions bytes."""

from __future__ import annotations

import random

import numpy as np
import pytest

from job.batching import batch_plan
from job.dataset import Rows, Strings, take
from job.predictions import PoolOutput, predictions_bytes, predictions_table

VALUES = ("b", "a", "", "é", "\U0001f600 two words", "a", "Zz", "ÿ", "x" * 600)


def test_strings_read_as_the_tuple_they_replace() -> None:
    s = Strings(VALUES)
    assert len(s) == len(VALUES)
    assert [s[i] for i in range(len(VALUES))] == list(VALUES)
    assert [s[-i] for i in range(1, len(VALUES) + 1)] == [VALUES[-i] for i in range(1, len(VALUES) + 1)]
    assert s[2:5] == list(VALUES[2:5]) and s[::-2] == list(VALUES[::-2])
    assert list(s) == list(VALUES) and "é" in s and s.index("a") == 1 and s.count("a") == 2
    with pytest.raises(IndexError):
        s[len(VALUES)]
    with pytest.raises(IndexError):
        s[-len(VALUES) - 1]
    assert str(s.arrow().type) == "string"


def test_take_gives_the_values_at_the_positions_from_either_form() -> None:
    positions = [8, 0, 3, 3, 5]
    want = [VALUES[p] for p in positions]
    assert list(take(VALUES, positions)) == want
    assert list(take(Strings(VALUES), positions)) == want
    rows = Rows(ids=np.arange(len(VALUES), dtype=np.int64), texts=VALUES, labels=np.zeros(len(VALUES), np.int64),
                text_sha256=VALUES, pairs=VALUES)
    got = rows.take(positions)
    assert isinstance(got.texts, Strings) and list(got.texts) == want and list(got.pairs or []) == want
    assert got.ids.tolist() == positions


def test_the_batch_plan_of_strings_is_the_protocol_order_of_the_tuple() -> None:
    rng = random.Random(7)
    alphabet = ["a", "b", "é", "Z", "ÿ", "\U0001f600", "aa", ""]
    for _ in range(200):
        n = rng.randint(0, 120)
        keys = tuple(rng.choice(alphabet) + rng.choice(alphabet) for _ in range(n))  # ties included
        lengths = np.array([rng.randint(1, 5) for _ in range(n)], dtype=np.int64)
        size = rng.randint(1, 9)
        order = sorted(range(n), key=lambda i: (-int(lengths[i]), keys[i]))
        want = [order[i : i + size] for i in range(0, n, size)]
        assert batch_plan(lengths, keys, size) == want
        assert batch_plan(lengths, Strings(keys), size) == want


def test_predictions_from_strings_are_the_same_bytes() -> None:
    n = 40
    rng = np.random.default_rng(3)
    keys = tuple(f"{i:064x}" for i in rng.permutation(n))
    hashes = tuple(f"{i * 7:064x}" for i in range(n))
    out = PoolOutput(logits=rng.normal(size=(n, 3)).astype(np.float32), token_count=np.full(n, 9, np.int64),
                     truncated=np.zeros(n, bool), batch=np.arange(n, dtype=np.int64) // 8,
                     full_token_count=np.full(n, 9, np.int64))
    ids, labels = np.arange(n, dtype=np.int64), rng.integers(0, 3, n)
    from_tuples = predictions_bytes(predictions_table(ids, keys, hashes, labels, out))
    from_strings = predictions_bytes(predictions_table(ids, Strings(keys), take(Strings(hashes), range(n)),
                                                       labels, out))
    assert from_tuples == from_strings
