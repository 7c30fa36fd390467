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
from job.documents import read_checked
from job.errors import JobError
from job.hub import Fetch, hub_fetch

PINS_FILE = "first-use-pins.json"


@dataclass(frozen=True)
class ResolvedFile:
    path: str  # path inside the repository, e.g. "config.json"
    local: Path
    size: int
    sha256: str
    pinned_sha256: str | None
    pin: str  # "protocol" | "first-use" | "none"

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
            "source": self.source,
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


def check_file(label: str, local: Path, size: int | None, sha256: str | None) -> tuple[int, str]:
    """Size and sha256 of `local`, raising a JobError naming expected vs found on any mismatch."""
    if not local.is_file():
        raise JobError(f"{label} is missing: no file at {local}; fetch it with `python -m job prepare` "
                       "or fix the path in the resource lock.")
    found_size = local.stat().st_size
    if size is not None and found_size != size:
        raise JobError(f"{label} at {local} has {found_size} bytes, expected {size}; "
                       "it is not the pinned file: fetch it again or fix the lock.")
    digest = sha256_file(local)
    if sha256 is not None and digest != sha256:
        raise JobError(f"{label} at {local} has sha256 {digest}, expected {sha256}; "
                       "it is not the pinned file: fetch it again or fix the lock.")
    return found_size, digest


def _profile(protocol_res: dict[str, Any], model: ResolvedRepo, dataset: ResolvedRepo) -> tuple[str, tuple[str, ...]]:
    deviations: list[str] = []
    for role, repo in (("model", model), ("dataset", dataset)):
        pinned = protocol_res[role]
        if repo.repo_id != pinned["repo_id"] or repo.revision != pinned["revision"]:
            deviations.append(f"The {role} is {repo.repo_id}@{repo.revision}, not the pinned "
                              f"{pinned['repo_id']}@{pinned['revision']}.")
        have = {f.path: f for f in repo.files}
        for spec in pinned["files"]:
            got = have.get(spec["path"])
            if got is None:
                deviations.append(f"The {role} file {spec['path']} was not used.")
            elif spec["sha256"] is not None and got.sha256 != spec["sha256"]:
                deviations.append(f"The {role} file {spec['path']} has sha256 {got.sha256}, "
                                  f"not the pinned {spec['sha256']}.")
            elif spec["sha256"] is None and got.pin != "first-use" and repo.repo_id == pinned["repo_id"]:
                deviations.append(f"The {role} file {spec['path']} is unpinned in the protocol "
                                  "and was not pinned on first use.")
    return ("formal" if not deviations else "other"), tuple(deviations)


def load_lock(path: Path) -> dict[str, Any]:
    """Read and schema-check a local resource lock (`--resources FILE`)."""
    return read_checked(path, "resource-lock", "resource lock", "--resources")[1]


def resolve_local(lock_path: Path, protocol_res: dict[str, Any]) -> Resources:
    """Resources from a local lock: every file exists and matches the lock's size and sha256."""
    lock = load_lock(lock_path)
    base = lock_path.resolve().parent
    repos = {}
    for role in ("model", "dataset"):
        spec = lock[role]
        files = []
        for f in spec["files"]:
            local = (base / f["local_path"]).resolve()
            size, digest = check_file(f"{role} file {f['path']}", local, f["size"], f["sha256"])
            pinned = _protocol_pin(protocol_res, role, spec, f["path"])
            files.append(ResolvedFile(f["path"], local, size, digest,
                                      pinned_sha256=pinned or f["sha256"],
                                      pin="protocol" if pinned else "none"))
        repos[role] = ResolvedRepo(spec["repo_id"], spec["repo_type"], spec["revision"], "local", tuple(files))
    profile, deviations = _profile(protocol_res, repos["model"], repos["dataset"])
    ds = lock["dataset"]
    return Resources(repos["model"], repos["dataset"],
                     {"rows": ds["rows"], "columns": ds["columns"], "labels": ds["labels"]},
                     profile, deviations)


def _protocol_pin(protocol_res: dict[str, Any], role: str, spec: dict[str, Any], path: str) -> str | None:
    pinned = protocol_res[role]
    if spec["repo_id"] != pinned["repo_id"] or spec["revision"] != pinned["revision"]:
        return None
    for f in pinned["files"]:
        if f["path"] == path:
            return str(f["sha256"]) if f["sha256"] is not None else None
    return None


def _read_pins(cache: Path) -> dict[str, str]:
    try:
        return dict(json.loads((cache / PINS_FILE).read_text(encoding="utf-8")))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise JobError(f"The first-use pin file {cache / PINS_FILE} is unreadable ({exc}); "
                       "restore it from the observed-pins.json you saved, or delete it to pin again.") from exc


def _write_json_atomic(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def resolve_hub(protocol_res: dict[str, Any], cache: Path, fetch: Fetch = hub_fetch,
                pins_out: Path | None = None) -> Resources:
    """Resources from the hub cache at the pinned revisions, downloading what is missing.

    A file the protocol leaves unpinned is pinned on first use: its observed sha256 is stored in
    the cache, announced on stderr, and written to `pins_out` so the user can commit it.
    """
    pins = _read_pins(cache)
    new_pins: dict[str, str] = {}
    repos = {}
    for role in ("model", "dataset"):
        spec = protocol_res[role]
        files = []
        for f in spec["files"]:
            key = f"{spec['repo_id']}@{spec['revision']}/{f['path']}"
            pinned = f["sha256"] or pins.get(key)
            local = fetch(spec["repo_id"], spec["repo_type"], spec["revision"], f["path"], cache / "hub")
            try:
                size, digest = check_file(f"{role} file {f['path']} ({spec['repo_id']})", local, f["size"], pinned)
            except JobError:
                _evict(local)
                raise
            pin = "protocol" if f["sha256"] else "first-use"
            if pinned is None:
                new_pins[key] = digest
                pinned = digest
            files.append(ResolvedFile(f["path"], local, size, digest, pinned, pin))
        repos[role] = ResolvedRepo(spec["repo_id"], spec["repo_type"], spec["revision"], "hub", tuple(files))
    if new_pins:
        pins.update(new_pins)
        _write_json_atomic(cache / PINS_FILE, pins)
        if pins_out is not None:
            _write_json_atomic(pins_out, new_pins)
        for key, digest in new_pins.items():
            print(f"WARNING: {key} has no published sha256; PINNED ON FIRST USE to {digest}. "
                  f"Commit this value into provenance.json (also written to {pins_out or cache / PINS_FILE}).",
                  file=sys.stderr)
    profile, deviations = _profile(protocol_res, repos["model"], repos["dataset"])
    ds = protocol_res["dataset"]
    return Resources(repos["model"], repos["dataset"],
                     {"rows": ds["rows"], "columns": ds["columns"], "labels": ds["labels"]},
                     profile, deviations)


def _evict(local: Path) -> None:
    """Remove a cached file that failed its check, so the cache never holds a wrong file."""
    try:
        target = local.resolve()
        local.unlink(missing_ok=True)
        if target != local:
            target.unlink(missing_ok=True)
    except OSError:
        pass
