"""Resolve the model and dataset files, check every one by size and sha256, and say how they
relate to the protocol's pins (profile "formal" or "other")."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundle.digests import sha256_file
from bundle.limits import DOCUMENT_BYTES
from bundle.userfile import read_user_file
from job.errors import JobError, PinMismatch
from job.hub import Fetch, LfsLookup, hub_fetch, hub_lfs_sha256, offline
from job.protocol import RepoPin, ResourcesSpec
from job.publishing.publish import write_atomic
from job.user_documents import read_checked

PINS_FILE = "first-use-pins.json"
LFS_PINS_FILE = "hub-lfs-pins.json"
"""Cache files of pins the protocol lacks, "<repo_id>@<revision>/<path>" -> sha256: observed on first
use, or published by the hub for an LFS file (so a verified cache is reused without asking the hub)."""


@dataclass(frozen=True)
class ResolvedFile:
    path: str  # path inside the repository, e.g. "config.json"
    local: Path
    size: int
    sha256: str
    pinned_sha256: str | None
    pin: str  # "protocol" | "hub-lfs" | "first-use" | "none"

    @property
    def matches_pin(self) -> bool:
        return self.pinned_sha256 == self.sha256


@dataclass(frozen=True)
class ResolvedRepo:
    repo_id: str
    repo_type: str
    revision: str
    source: str  # "hub" | "local"
    files: tuple[ResolvedFile, ...]

    def local(self, path: str) -> Path:
        for f in self.files:
            if f.path == path:
                return f.local
        raise JobError(f"{self.repo_id} has no file {path!r} in the resource list; add it to the lock.")

    def record(self) -> dict[str, Any]:
        return {
            "repo_id": self.repo_id, "repo_type": self.repo_type, "revision": self.revision,
            "source": self.source, "revision_checked_by_hub": self.source == "hub",
            "files": [
                {"path": f.path, "size": f.size, "sha256": f.sha256, "pinned_sha256": f.pinned_sha256,
                 "pin": f.pin, "matches_pin": f.matches_pin}
                for f in self.files
            ],
        }


@dataclass(frozen=True)
class Resources:
    model: ResolvedRepo
    dataset: ResolvedRepo
    dataset_spec: dict[str, Any]  # rows, columns, labels
    profile: str  # "formal" | "other"
    deviations: tuple[str, ...]

    def record(self) -> dict[str, Any]:
        return {"profile": self.profile, "deviations": list(self.deviations),
                "model": self.model.record(), "dataset": self.dataset.record()}


def check_resources(recorded: dict[str, Any], resources: Resources) -> None:
    """Every file a recorded run used (`recorded`: its resources.json), with the sha256 it records, and
    no other file: what a reproduction and every worker of a sharded run check before any inference.

    Raises JobError naming the file and both hashes."""
    for role, repo in (("model", resources.model), ("dataset", resources.dataset)):
        want = {f["path"]: f["sha256"] for f in recorded[role]["files"]}
        have = {f.path: f.sha256 for f in repo.files}
        for path, sha in want.items():
            if path not in have:
                raise JobError(f"The bundle's {role} file {path} is not among the resources given; add it "
                               "to the lock (--resources) or the cache.")
            if have[path] != sha:
                raise JobError(f"The {role} file {path} has sha256 {have[path]}, but the bundle records "
                               f"{sha}; reproduce with the very files the bundle used (nothing was run).")
        extra = sorted(set(have) - set(want))
        if extra:
            raise JobError(f"The {role} files {extra} were not used by the bundle; give exactly the files "
                           "its resources.json lists.")


def check_file(label: str, local: Path, size: int | None, sha256: str | None,
               pin_source: str = "the pinned file") -> tuple[int, str]:
    """Size and sha256 of `local`, raising a JobError naming expected vs found on any mismatch.

    `pin_source` says where `sha256` comes from, for the message."""
    if not local.is_file():
        raise JobError(f"{label} is missing: no file at {local}; fetch it with `python -m job prepare` "
                       "or fix the path in the resource lock.", path=str(local), reason="missing")
    found_size = local.stat().st_size
    if size is not None and found_size != size:
        raise PinMismatch(f"{label} at {local} has {found_size} bytes, expected {size}; "
                          "it is not the pinned file: fetch it again or fix the lock.",
                          path=str(local), field="size", expected=size, found=found_size)
    digest = sha256_file(local)
    if sha256 is not None and digest != sha256:
        raise PinMismatch(f"{label} at {local} has sha256 {digest}, expected {sha256} ({pin_source}); "
                          "it is not the pinned file: fetch it again or fix the lock.",
                          path=str(local), field="sha256", expected=sha256, found=digest)
    return found_size, digest


def _profile(pins: ResourcesSpec, model: ResolvedRepo, dataset: ResolvedRepo) -> tuple[str, tuple[str, ...]]:
    deviations: list[str] = []
    for role, repo in (("model", model), ("dataset", dataset)):
        pinned = pins.role(role)
        if repo.repo_id != pinned.repo_id or repo.revision != pinned.revision:
            deviations.append(f"The {role} is {repo.repo_id}@{repo.revision}, not the pinned "
                              f"{pinned.repo_id}@{pinned.revision}.")
        have = {f.path: f for f in repo.files}
        for spec in pinned.files:
            got = have.get(spec.path)
            if got is None:
                deviations.append(f"The {role} file {spec.path} was not used.")
            elif spec.sha256 is not None and got.sha256 != spec.sha256:
                deviations.append(f"The {role} file {spec.path} has sha256 {got.sha256}, "
                                  f"not the pinned {spec.sha256}.")
            elif (spec.sha256 is None and got.pin not in ("hub-lfs", "first-use")
                  and repo.repo_id == pinned.repo_id):
                deviations.append(f"The {role} file {spec.path} is unpinned in the protocol "
                                  "and was pinned neither by the hub's LFS sha256 nor on first use.")
    return ("formal" if not deviations else "other"), tuple(deviations)


def load_lock(path: Path) -> dict[str, Any]:
    """Read and schema-check a local resource lock (`--resources FILE`)."""
    return read_checked(path, "resource-lock", "resource lock", "--resources")[1]


def resolve_local(lock_path: Path, pins: ResourcesSpec) -> Resources:
    """Resources from a local lock: every file exists and matches the lock's size and sha256.

    The source is "local": the revision is the one the lock or the protocol states, never confirmed
    by a hub (the report and the crate say so)."""
    lock = load_lock(lock_path)
    base = lock_path.resolve().parent
    repos = {}
    for role in ("model", "dataset"):
        # A lock that names no repository or revision holds the protocol's, as its author states them.
        pinned = pins.role(role)
        spec = {"repo_id": pinned.repo_id, "revision": pinned.revision, **lock[role]}
        files = []
        for f in _used_files(spec, pinned):
            local = (base / f["local_path"]).resolve()
            size, digest = check_file(f"{role} file {f['path']}", local, f["size"], f["sha256"])
            protocol_pin = _protocol_pin(pinned, spec, f["path"])
            files.append(ResolvedFile(f["path"], local, size, digest,
                                      pinned_sha256=protocol_pin or f["sha256"],
                                      pin="protocol" if protocol_pin else "none"))
        repos[role] = ResolvedRepo(spec["repo_id"], spec["repo_type"], spec["revision"], "local", tuple(files))
    profile, deviations = _profile(pins, repos["model"], repos["dataset"])
    ds = lock["dataset"]
    return Resources(repos["model"], repos["dataset"],
                     {"rows": ds["rows"], "columns": ds["columns"], "labels": ds["labels"]},
                     profile, deviations)


def _used_files(spec: dict[str, Any], pinned: RepoPin) -> list[dict[str, Any]]:
    """The lock's files the run reads: for the protocol's repository and revision, the files the
    protocol lists (a lock may hold more, e.g. every file of a model folder); otherwise all of them."""
    if spec["repo_id"] != pinned.repo_id or spec["revision"] != pinned.revision:
        return list(spec["files"])
    listed = {f.path for f in pinned.files}
    return [f for f in spec["files"] if f["path"] in listed]


def _protocol_pin(pinned: RepoPin, spec: dict[str, Any], path: str) -> str | None:
    """The sha256 the protocol pins for the lock's file `path`, or None (another repository or
    revision, an unlisted file, or a file pinned by size only)."""
    if spec["repo_id"] != pinned.repo_id or spec["revision"] != pinned.revision:
        return None
    for f in pinned.files:
        if f.path == path:
            return f.sha256
    return None


def _read_pins(path: Path) -> dict[str, str]:
    if not os.path.lexists(path):
        return {}
    raw = read_user_file(path, "pin file", DOCUMENT_BYTES, JobError)
    try:
        return dict(json.loads(raw.decode("utf-8")))
    except (ValueError, TypeError) as exc:
        raise JobError(f"The pin file {path} is unreadable ({exc}); "
                       "restore it from the observed-pins.json you saved, or delete it to pin again.") from exc


def _write_json_atomic(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8"), replace=True)


def resolve_hub(pins: ResourcesSpec, cache: Path, fetch: Fetch = hub_fetch,
                pins_out: Path | None = None, lfs: LfsLookup = hub_lfs_sha256) -> Resources:
    """Resources from the hub cache at the pinned revisions, downloading what is missing.

    A file the protocol leaves unpinned is pinned by the sha256 the hub publishes for it when it
    is an LFS file (pin "hub-lfs"; asked once, at the pinned revision, then kept in the cache), and
    otherwise on first use (pin "first-use"). Every file must match its pin; a file that does not is
    evicted from the cache. New pins are stored in the cache, announced on stderr, and written to
    `pins_out` so the user can commit them into the protocol.
    """
    first_use = _read_pins(cache / PINS_FILE)
    hub_lfs = _read_pins(cache / LFS_PINS_FILE)
    new_first_use: dict[str, str] = {}
    new_hub_lfs: dict[str, str] = {}
    repos = {}
    for role in ("model", "dataset"):
        spec = pins.role(role)
        prefix = f"{spec.repo_id}@{spec.revision}/"
        unknown = [f.path for f in spec.files if f.sha256 is None and prefix + f.path not in hub_lfs]
        if unknown and not offline():
            published = lfs(spec.repo_id, spec.repo_type, spec.revision, unknown)
            new_hub_lfs.update({prefix + path: digest for path, digest in sorted(published.items())})
            hub_lfs.update(new_hub_lfs)
        files = []
        for f in spec.files:
            key = prefix + f.path
            pinned: str | None
            if f.sha256 is not None:
                pin, pinned, source = "protocol", f.sha256, "the protocol's pin"
            elif key in hub_lfs:
                pin, pinned, source = "hub-lfs", hub_lfs[key], "the hub's published LFS sha256"
            else:
                pin, pinned, source = "first-use", first_use.get(key), "the sha256 pinned on first use"
            local = fetch(spec.repo_id, spec.repo_type, spec.revision, f.path, cache / "hub")
            try:
                size, digest = check_file(f"{role} file {f.path} ({spec.repo_id})", local, f.size, pinned, source)
            except JobError:
                _evict(local)
                raise
            if pinned is None:
                new_first_use[key] = digest
                pinned = digest
            files.append(ResolvedFile(f.path, local, size, digest, pinned, pin))
        repos[role] = ResolvedRepo(spec.repo_id, spec.repo_type, spec.revision, "hub", tuple(files))
    _store_pins(cache, pins_out, new_first_use, new_hub_lfs, first_use, hub_lfs)
    profile, deviations = _profile(pins, repos["model"], repos["dataset"])
    return Resources(repos["model"], repos["dataset"], pins.dataset.shape(), profile, deviations)


def _store_pins(cache: Path, pins_out: Path | None, new_first_use: dict[str, str], new_hub_lfs: dict[str, str],
                first_use: dict[str, str], hub_lfs: dict[str, str]) -> None:
    """Keep new pins in the cache, write them all to `pins_out`, and say so on stderr."""
    if new_hub_lfs:
        _write_json_atomic(cache / LFS_PINS_FILE, hub_lfs)
    if new_first_use:
        first_use.update(new_first_use)
        _write_json_atomic(cache / PINS_FILE, first_use)
    if not (new_first_use or new_hub_lfs):
        return
    if pins_out is not None:
        _write_json_atomic(pins_out, {**new_hub_lfs, **new_first_use})
    where = pins_out or cache
    for key, digest in new_hub_lfs.items():
        print(f"{key} is pinned to {digest}, the sha256 the hub publishes for this LFS file; "
              f"commit it into provenance.json (also written to {where}).", file=sys.stderr)
    for key, digest in new_first_use.items():
        print(f"WARNING: {key} has no published sha256; PINNED ON FIRST USE to {digest}. "
              f"Commit this value into provenance.json (also written to {where}).",
              file=sys.stderr)


def _evict(local: Path) -> None:
    """Remove a cached file that failed its check, so the cache never holds a wrong file."""
    try:
        target = local.resolve()
        local.unlink(missing_ok=True)
        if target != local:
            target.unlink(missing_ok=True)
    except OSError:
        pass
