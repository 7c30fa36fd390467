"""Sweep fixtures on the tiny generated world: sweep files, a bad lock, and a sweep directory
built member by member in this process (the driver's own publish and index steps, without Ray),
for the verifier's tests. The Ray tests run the real `python -m job sweep`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization

from job.publishing.signing_keys import load_private_key


def write_sweep(path: Path, world: tuple[Path, Path], *, prefixes: list[str], name: str = "tiny",
                models: list[dict[str, Any]] | None = None, threads: int = 1, max_retries: int | None = None) -> Path:
    """A sweep file at `path` over the tiny world's protocol and lock (absolute paths)."""
    protocol, lock = world
    doc: dict[str, Any] = {"name": name, "protocol": str(protocol), "lock": str(lock), "prefixes": prefixes,
                           "member": {"threads": threads}}
    if models is not None:
        doc["models"] = models
    if max_retries is not None:
        doc["member"]["max_retries"] = max_retries
    path.write_text(json.dumps(doc, indent=2))
    return path


def write_bad_lock(path: Path, lock: Path) -> Path:
    """A copy of `lock` whose model weights' sha256 is wrong: a member using it fails on its input."""
    doc = json.loads(lock.read_text())
    base = lock.resolve().parent
    for role in ("model", "dataset"):
        for f in doc[role]["files"]:
            f["local_path"] = str((base / f["local_path"]).resolve())
    weights = next(f for f in doc["model"]["files"] if f["path"].endswith(".safetensors"))
    weights["sha256"] = "0" * 64
    path.write_text(json.dumps(doc, indent=2))
    return path


def build_sweep_dir(sweep_file: Path, out: Path, key_path: Path) -> list[dict[str, Any]]:
    """Run every member of the sweep in this process and publish it, then sign the index: the
    sweep directory the driver writes, without Ray. Returns the index rows."""
    from job.sweep_dir import open_sweep_dir, publish_member, write_index
    from job.sweep_member import MemberTask, build_member
    from job.sweep_spec import load_sweep

    sweep = load_sweep(sweep_file)
    key = load_private_key(key_path)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    out.mkdir(parents=True, exist_ok=True)
    plan_sha256 = open_sweep_dir(out, sweep, key)
    rows = []
    for m in sweep.members:
        outcome = build_member(MemberTask(m.name, m.protocol, m.lock, pem))
        if outcome.archive is not None:
            rows.append(publish_member(out, m, outcome.archive, key))
        else:
            rows.append({"name": m.name, "status": "failed", "error": outcome.error})
    write_index(out, plan_sha256, rows, key)
    return rows
