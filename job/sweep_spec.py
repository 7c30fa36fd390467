"""A sweep file (schemas/sweep.schema.json) expanded into its members, before anything runs.

The members are the cross product of the axes (models, datasets, prefixes, pool_sizes, in that
order). Each member's protocol is the base protocol with the varied fields replaced, written as
canonical JSON, so that its sha256 is fixed by the sweep file and the base protocol alone. A
member's name joins the labels of the axes the sweep varies; names are unique or the sweep is
refused. Expansion is pure: the same files give the same members, byte for byte."""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundle import layout
from bundle.canonical import dumps
from job.errors import JobError
from job.protocol import pool_size_problem
from job.user_documents import read_checked

DEFAULT_MAX_RETRIES = 3
"""How often a member whose worker or node died is run again, unless the sweep says otherwise."""
MAX_MEMBERS = layout.SWEEP_MAX_MEMBERS
"""A sweep expands to at most this many members; more is refused before anything is written."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Member:
    """One planned run: its name, its canonical protocol, and the resources it runs with."""

    name: str
    protocol: bytes  # canonical JSON; its sha256 is the member's identity
    protocol_sha256: str
    lock: dict[str, Any] | None  # the member's resource lock (local paths absolute); None: hub cache
    pins: dict[str, Any]  # what the plan records of its resources (sweep-plan/v1 `resources`)

    @property
    def num_cpus(self) -> int:
        return int(self.pins["num_cpus"])

    @property
    def max_retries(self) -> int:
        return int(self.pins["max_retries"])


@dataclass(frozen=True)
class Sweep:
    raw: bytes  # the sweep file's exact bytes
    sha256: str
    name: str
    members: tuple[Member, ...]


@dataclass(frozen=True)
class _Choice:
    """One value of one axis: its label (None for an axis the sweep does not vary) and what it sets."""

    label: str | None
    value: Any = None
    lock: Path | None = None


def _label(text: str) -> str:
    return _UNSAFE.sub("-", text).strip("-.") or "x"


def _sizes_label(sizes: dict[str, int], order: list[str]) -> str:
    """A readable label for one choice of pool sizes: each pool's name and size, in cutting order
    (pools the base protocol lacks last, by name), e.g. explore8-calibration20-audit20."""
    names = [n for n in order if n in sizes] + sorted(n for n in sizes if n not in order)
    return _label("-".join(f"{n}{sizes[n]}" for n in names))


def absolute_lock(path: Path) -> dict[str, Any]:
    """The lock at `path`, schema-checked, with every local_path made absolute (it is read elsewhere)."""
    _raw, lock = read_checked(path, "resource-lock", "resource lock", "the sweep file's lock")
    base = path.resolve().parent
    for role in ("model", "dataset"):
        for f in lock[role]["files"]:
            f["local_path"] = str((base / f["local_path"]).resolve())
    return lock


def _resource_axis(entries: list[dict[str, Any]] | None, here: Path) -> list[_Choice]:
    if entries is None:
        return [_Choice(None)]
    return [_Choice(str(e["label"]), e.get("resources"), here / e["lock"] if "lock" in e else None)
            for e in entries]


def _repo_pins(section: dict[str, Any], pinned: dict[str, Any]) -> dict[str, Any]:
    """The plan's record of one repository: `section`'s files (the lock's, or the protocol's), under
    the repository and revision it states; a lock that states none (`job lock` without --model and
    --model-revision) holds the protocol's (`pinned`), as job.resources reads it."""
    return {"repo_id": section.get("repo_id", pinned["repo_id"]),
            "revision": section.get("revision", pinned["revision"]),
            "files": [{"path": f["path"], "sha256": f["sha256"]} for f in section["files"]]}


def _member_protocol(base: dict[str, Any], model: _Choice, dataset: _Choice, prefix: _Choice,
                     sizes: _Choice, threads: int) -> dict[str, Any]:
    doc = copy.deepcopy(base)
    if model.value is not None:
        doc["resources"]["model"] = copy.deepcopy(model.value)
    if dataset.value is not None:
        doc["resources"]["dataset"] = copy.deepcopy(dataset.value)
    if prefix.value is not None:
        doc["split"]["prefix"] = prefix.value
    if sizes.value is not None:
        names = [p["name"] for p in doc["split"]["pools"]]
        if sorted(sizes.value) != sorted(names):
            raise JobError(f"The sweep's pool sizes {sorted(sizes.value)} do not name exactly the base "
                           f"protocol's pools {names}; give a size for each of them.")
        for pool in doc["split"]["pools"]:
            pool["size"] = int(sizes.value[pool["name"]])
            problem = pool_size_problem(pool["name"], pool["size"])
            if problem is not None:
                raise JobError(f"The sweep's pool sizes {sizes.label}: the {problem}; give it more rows.")
    doc["inference"]["torch_threads"] = threads
    return doc


def _member_lock(model: _Choice, dataset: _Choice, default: Path | None,
                 cache: dict[Path, dict[str, Any]]) -> dict[str, Any]:
    def part(choice: _Choice, role: str) -> dict[str, Any]:
        path = choice.lock or default
        if path is None:
            raise JobError(f"The sweep names resource locks, but its {role} {choice.label!r} has none and "
                           "the sweep has no top-level lock; give every member a lock, or none.")
        if path not in cache:
            cache[path] = absolute_lock(path)
        return copy.deepcopy(cache[path][role])

    return {"model": part(model, "model"), "dataset": part(dataset, "dataset")}


def expand(raw: bytes, doc: dict[str, Any], here: Path, base: dict[str, Any]) -> Sweep:
    """The sweep whose file bytes are `raw` (parsed, schema-valid: `doc`), with paths relative to
    `here` and the base protocol `base` parsed; raise JobError for a sweep that cannot be planned."""
    models = _resource_axis(doc.get("models"), here)
    datasets = _resource_axis(doc.get("datasets"), here)
    prefixes = ([_Choice(_label(p), p) for p in doc["prefixes"]] if "prefixes" in doc else [_Choice(None)])
    order = [p["name"] for p in base["split"]["pools"]]
    sizes = ([_Choice(_sizes_label(s, order), s) for s in doc["pool_sizes"]]
             if "pool_sizes" in doc else [_Choice(None)])
    count = len(models) * len(datasets) * len(prefixes) * len(sizes)
    if count > MAX_MEMBERS:
        raise JobError(f"The sweep expands to {count} members, more than the {MAX_MEMBERS} a sweep may "
                       "hold; split it into several sweeps.")
    default_lock = here / doc["lock"] if "lock" in doc else None
    local = default_lock is not None or any(c.lock is not None for c in (*models, *datasets))
    threads = int(doc["member"]["threads"])
    retries = int(doc["member"].get("max_retries", DEFAULT_MAX_RETRIES))
    locks: dict[Path, dict[str, Any]] = {}
    members: list[Member] = []
    seen: dict[str, int] = {}
    for m in models:
        for d in datasets:
            for p in prefixes:
                for s in sizes:
                    labels = [c.label for c in (m, d, p, s) if c.label is not None]
                    name = "-".join(labels) if labels else str(doc["name"])
                    if name in seen:
                        raise JobError(f"Two members of the sweep are both named {name!r}; give the axis "
                                       "values labels that tell them apart.")
                    seen[name] = len(members)
                    protocol_doc = _member_protocol(base, m, d, p, s, threads)
                    lock = _member_lock(m, d, default_lock, locks) if local else None
                    source = lock if lock is not None else protocol_doc["resources"]
                    protocol = dumps(protocol_doc, source="The member protocol")
                    members.append(Member(
                        name=name, protocol=protocol, protocol_sha256=hashlib.sha256(protocol).hexdigest(),
                        lock=lock,
                        pins={"num_cpus": threads, "max_retries": retries,
                              "source": "lock" if lock is not None else "hub",
                              "model": _repo_pins(source["model"], protocol_doc["resources"]["model"]),
                              "dataset": _repo_pins(source["dataset"], protocol_doc["resources"]["dataset"])}))
    return Sweep(raw=raw, sha256=hashlib.sha256(raw).hexdigest(), name=str(doc["name"]), members=tuple(members))


def load_sweep(path: Path) -> Sweep:
    """Read and schema-check the sweep file and its base protocol, and expand the members."""
    raw, doc = read_checked(path, "sweep", "sweep file", "SWEEP.json")
    here = path.resolve().parent
    _base_raw, base = read_checked(here / doc["protocol"], "protocol", "sweep's base protocol",
                                  "the sweep file's protocol")
    return expand(raw, doc, here, base)
