import hashlib

import pytest

from job.errors import JobError
from job.split import make_pools, split_key


def test_split_key_is_sha256_of_prefix_and_decimal_idx():
    assert split_key("cycle7:", 0) == hashlib.sha256(b"cycle7:0").hexdigest()
    assert split_key("cycle7:", 871) == hashlib.sha256(b"cycle7:871").hexdigest()
    # hand-computed with `printf 'cycle7:12' | sha256sum`
    assert split_key("cycle7:", 12) == "11f025b409f94c6de6ca4979db578472bba76de76a16a9fc3c46aa294f93a231"


def test_pools_are_consecutive_runs_of_ascending_keys():
    ids = [5, 3, 9, 1, 7, 2]
    pools = make_pools("p:", ids, [("a", 2), ("b", 3), ("c", 1)])
    ordered = sorted(range(len(ids)), key=lambda pos: hashlib.sha256(f"p:{ids[pos]}".encode()).hexdigest())
    assert pools["a"].positions == tuple(ordered[:2])
    assert pools["b"].positions == tuple(ordered[2:5])
    assert pools["c"].positions == tuple(ordered[5:])
    everything = [p for pool in pools.values() for p in pool.positions]
    assert sorted(everything) == list(range(len(ids)))
    assert all(list(pool.keys) == sorted(pool.keys) for pool in pools.values())


def test_pool_sizes_must_add_up_to_the_dataset():
    with pytest.raises(JobError, match="add up to 5 but the dataset has 6 rows"):
        make_pools("p:", range(6), [("a", 2), ("b", 3)])
