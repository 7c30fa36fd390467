"""Random byte flips anywhere in a signed bag: none may be accepted.

Verification runs in-process on the bag held in memory (one file's bytes replaced), so that
thousands of flips take seconds: a flip fails authentication, and every later check is skipped
unread; every run is a full one, so nothing crashes into a pass."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.verify.tamper import Keys, base, synthetic_bag, verify_keys  # noqa: F401
from verify import tree as bagtree
from verify.checks import Trust, verify_tree
from verify.result import EXIT_OK, EXIT_UNTRUSTED, exit_code

FLIPS = 1000


def flipped(tree: bagtree.BagTree, name: str, position: float,
            mask: int) -> bagtree.BagTree:
    """The tree with one byte of `name` XORed with mask; position: a fraction, or an index."""
    data = bytearray(tree.files[name])
    i = position if isinstance(position, int) else _index(bytes(data), position)
    data[i] ^= mask
    files = dict(tree.files)
    files[name] = bytes(data)
    return bagtree.BagTree(root=tree.root, files=files, dirs=list(tree.dirs))


def _run(tree: bagtree.BagTree, trust: Trust) -> int:
    return exit_code(verify_tree(tree, trust).checks)


@pytest.fixture
def loaded(base: tuple[Path, Keys]) -> tuple[bagtree.BagTree, list[str], Trust]:  # noqa: F811
    bag, keys = base
    tree = bagtree.read_tree(bag)
    trust = Trust(key=keys.real.public_key(), source="real.pem")
    assert _run(tree, trust) == EXIT_OK
    return tree, sorted(tree.files), trust


def test_random_byte_flips_are_rejected(loaded: tuple[bagtree.BagTree, list[str], Trust]) -> None:
    tree, names, trust = loaded

    @settings(max_examples=FLIPS, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(names), st.floats(0.0, 1.0, allow_nan=False), st.integers(1, 255))
    def check(name: str, position: float, mask: int) -> None:
        data = tree.files[name]
        assume(name != "tagmanifest-sha256.txt" or not _equivalent(data, _index(data, position), mask))
        code = _run(flipped(tree, name, position, mask), trust)
        assert code not in (EXIT_OK, EXIT_UNTRUSTED), (name, position, mask)

    check()


def test_flips_without_a_trusted_key_are_rejected(
        loaded: tuple[bagtree.BagTree, list[str], Trust]) -> None:
    """Without a pinned key a flip must still fail (exit 1), not merely lack a trusted signer."""
    tree, names, _ = loaded

    @settings(max_examples=200, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(names), st.floats(0.0, 1.0, allow_nan=False), st.integers(1, 255))
    def check(name: str, position: float, mask: int) -> None:
        data = tree.files[name]
        assume(name != "tagmanifest-sha256.txt" or not _equivalent(data, _index(data, position), mask))
        assert _run(flipped(tree, name, position, mask), Trust()) not in (
            EXIT_OK, EXIT_UNTRUSTED)

    check()


TAG_MASKS = (0x01, 0x20, 0x29, 0x80)
"""0x01 changes a hex digit, 0x20 a letter's case, 0x29 a space to a tab, 0x80 the byte's encoding."""


def _equivalent(data: bytes, i: int, mask: int) -> bool:
    """Whether flipping byte `i` of a tag manifest with `mask` leaves it saying the same: RFC 8493
    allows either hex case and any whitespace between digest and path."""
    was, now = chr(data[i]), chr(data[i] ^ mask)
    in_digest = i - (data.rfind(b"\n", 0, i) + 1) < 64
    return (in_digest and was in "abcdef" and now == was.upper()) or {was, now} == {" ", "\t"}


def _index(data: bytes, position: float) -> int:
    return min(int(position * len(data)), len(data) - 1)


def _tag_manifest_flips(tree: bagtree.BagTree, trust: Trust,
                        flips: Callable[[bytes], list[tuple[int, int]]]) -> None:
    """Flip bytes of the tag manifest, the one file no other file hashes, at the (index, mask)
    pairs `flips` picks. RFC 8493 allows either hex case and any whitespace between digest and
    path, so a flip to the other case of a hex digit or between space and tab must still verify;
    every other flip fails."""
    data = tree.files["tagmanifest-sha256.txt"]
    for i, mask in flips(data):
        same = _equivalent(data, i, mask)
        code = _run(flipped(tree, "tagmanifest-sha256.txt", i, mask), trust)
        assert (code in (EXIT_OK, EXIT_UNTRUSTED)) == same, (i, mask)


def _boundaries(data: bytes) -> list[tuple[int, int]]:
    """Each line's structural bytes under every mask: the digest's first and last character, the
    separator, the path's first and last character and the newline."""
    picks: list[tuple[int, int]] = []
    start = 0
    while start < len(data):
        end = data.index(b"\n", start)
        for i in sorted({start, start + 63, start + 64, start + 65, end - 1, end}):
            picks += [(i, mask) for mask in TAG_MASKS]
        start = end + 1
    return picks


def _first_middle_last(data: bytes) -> list[tuple[int, int]]:
    """_boundaries of the first, a middle and the last line only."""
    lines = data.splitlines(keepends=True)
    starts = [sum(len(line) for line in lines[:k]) for k in range(len(lines))]
    chosen = {starts[0], starts[len(lines) // 2], starts[-1]}
    return [(i, mask) for i, mask in _boundaries(data)
            if max(s for s in starts if s <= i) in chosen]


def test_the_tag_manifest_structure_flipped(loaded: tuple[bagtree.BagTree, list[str], Trust]) -> None:
    """The bytes where a parser could go wrong, on the first, a middle and the last line, under
    every mask (every line: the slow test below; every byte: the slowest)."""
    tree, _, trust = loaded
    _tag_manifest_flips(tree, trust, _first_middle_last)


@pytest.mark.slow
def test_the_tag_manifest_structure_flipped_on_every_line(
        loaded: tuple[bagtree.BagTree, list[str], Trust]) -> None:
    tree, _, trust = loaded
    _tag_manifest_flips(tree, trust, _boundaries)


@pytest.mark.slow
def test_every_byte_of_the_tag_manifest(loaded: tuple[bagtree.BagTree, list[str], Trust]) -> None:
    """Every byte of the tag manifest under every mask."""
    tree, _, trust = loaded
    _tag_manifest_flips(tree, trust, lambda data: [(i, m) for i in range(len(data)) for m in TAG_MASKS])


RECORDS = ("temperature.json", "trajectory.json", "metrics.json", "bootstrap.json",
           "stability.json", "pools.json", "stages.json")


def _leaves(doc: object, path: tuple[object, ...] = ()) -> list[tuple[tuple[object, ...], object]]:
    if isinstance(doc, dict):
        return [leaf for k, v in doc.items() for leaf in _leaves(v, (*path, k))]
    if isinstance(doc, list):
        return [leaf for i, v in enumerate(doc) for leaf in _leaves(v, (*path, i))]
    return [(path, doc)]


def _changed(value: object) -> object:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * (1 + 1e-6) + 1e-8
    if isinstance(value, str):
        return value[:-1] + ("0" if value[-1:] != "0" else "1")
    return 0.5  # null


def _key_holder_changes(base: tuple[Path, Keys], tmp_path: Path, per_record: int) -> None:  # noqa: F811
    """Change one value anywhere in the records (not environment.json, which is reported, not
    checked), `per_record` values of each record drawn at random, restate the predicate and re-seal
    with the real key: the recomputation or a cross-check must still reject every one."""
    import random

    from bundle.canonical import loads_strict
    from tests.verify.tamper import copy_bag, edit_json, reseal
    from verify.api import verify_path

    bag, keys = base
    trust = Trust(key=keys.real.public_key(), source="real.pem")
    rng = random.Random(0)
    picks = []
    for name in RECORDS:
        if (bag / "data" / name).exists():
            leaves = _leaves(loads_strict((bag / "data" / name).read_bytes()))
            picks += [(name, leaf) for leaf in rng.sample(leaves, min(per_record, len(leaves)))]
    for i, (name, (path, value)) in enumerate(picks):
        work = copy_bag(bag, tmp_path / f"b{i}")

        def change(doc: object, path: tuple[object, ...] = path, value: object = value) -> None:
            node = doc
            for part in path[:-1]:
                node = node[part]  # type: ignore[index]
            node[path[-1]] = _changed(value)  # type: ignore[index]

        edit_json(work, f"data/{name}", change)
        reseal(work, keys.real)
        outcome = verify_path(work, trust)
        assert outcome.exit_code not in (EXIT_OK, EXIT_UNTRUSTED), (name, path, value)


def test_any_recorded_value_changed_by_the_key_holder_is_rejected(
        base: tuple[Path, Keys], tmp_path: Path) -> None:  # noqa: F811
    """Two values of each record (eight: the slow test below)."""
    _key_holder_changes(base, tmp_path, per_record=2)


@pytest.mark.slow
def test_eight_values_of_each_record_changed_by_the_key_holder_are_rejected(
        base: tuple[Path, Keys], tmp_path: Path) -> None:  # noqa: F811
    _key_holder_changes(base, tmp_path, per_record=8)
