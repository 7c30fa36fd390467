"""The split re-derived from the ids: split_key = sha256(prefix + decimal idx), all rows in
ascending key, consecutive slices in the protocol's pool order and sizes."""

from __future__ import annotations

import hashlib
from typing import Any

from bundle import layout
from verify.context import Context
from verify.result import Failed


def split_key(prefix: str, idx: int) -> str:
    return hashlib.sha256(f"{prefix}{idx}".encode()).hexdigest()


def check_split_keys(pools: dict[str, Any], protocol: dict[str, Any]) -> str:
    prefix = protocol["split"]["prefix"]
    if pools["prefix"] != prefix:
        raise Failed(f"pools.json prefix is {pools['prefix']!r}, the protocol's is {prefix!r}.")
    count = 0
    for name, entries in pools["pools"].items():
        for i, entry in enumerate(entries):
            expected = split_key(prefix, entry["idx"])
            if entry["split_key"] != expected:
                raise Failed(f"pool {name!r} entry {i} (idx {entry['idx']}) has split_key "
                             f"{entry['split_key'][:16]}…, sha256({prefix!r} + "
                             f"'{entry['idx']}') is {expected[:16]}….")
            count += 1
    return f"{count} split keys equal sha256({prefix!r} + idx)"


def check_assignment(pools: dict[str, Any], protocol: dict[str, Any]) -> str:
    spec = [(p["name"], p["size"]) for p in protocol["split"]["pools"]]
    names = [name for name, _ in spec]
    if sorted(pools["pools"]) != sorted(names) or sorted(pools["sizes"]) != sorted(names):
        raise Failed(f"pools.json holds pools {sorted(pools['pools'])} and sizes "
                     f"{sorted(pools['sizes'])}, the protocol names {names}.")
    for name, size in spec:
        entries = pools["pools"][name]
        if pools["sizes"][name] != size or len(entries) != size:
            raise Failed(f"pool {name!r} holds {len(entries)} entries and says size "
                         f"{pools['sizes'][name]}, the protocol fixes {size}.")
        keys = [e["split_key"] for e in entries]
        if keys != sorted(keys):
            raise Failed(f"pool {name!r} is not in ascending split key order.")
    everything = [(e["split_key"], e["idx"], name) for name in names for e in pools["pools"][name]]
    idxs = [idx for _, idx, _ in everything]
    if len(set(idxs)) != len(idxs):
        seen: set[int] = set()
        dup = next(i for i in idxs if i in seen or seen.add(i))  # type: ignore[func-returns-value]
        owners = sorted({name for _, idx, name in everything if idx == dup})
        raise Failed(f"idx {dup} appears more than once (pools {owners}); pools must be "
                     "disjoint.")
    rows = protocol["resources"]["dataset"]["rows"]
    if len(everything) != rows:
        raise Failed(f"the pools hold {len(everything)} rows together, the dataset has {rows}.")
    everything.sort()
    start = 0
    for name, size in spec:
        derived = [idx for _, idx, _ in everything[start:start + size]]
        stored = [e["idx"] for e in pools["pools"][name]]
        if derived != stored:
            moved = sorted(set(stored) ^ set(derived))
            raise Failed(f"pool {name!r} differs from the split rule: idx {moved[:5]} "
                         f"{'are' if len(moved) > 1 else 'is'} in the wrong pool.")
        start += size
    sizes = ", ".join(f"{n} {s}" for n, s in spec)
    return f"pools re-derived from {rows} ids: {sizes}; disjoint, ascending key"


# -- the checks (verify/checks.py lists them in order) ---------------------------------------

def split_keys(ctx: Context) -> str:
    """Every split_key is sha256(prefix + idx) with the protocol's prefix."""
    return check_split_keys(ctx.doc(layout.POOLS_JSON), ctx.doc(layout.PROTOCOL_JSON))


def assignment(ctx: Context) -> str:
    """The pools re-derived by the split rule; sizes; disjoint; total = dataset rows."""
    return check_assignment(ctx.doc(layout.POOLS_JSON), ctx.doc(layout.PROTOCOL_JSON))
