"""The bundles of three worlds, signed with one fixed key, and a byte-for-byte comparison of two sets.

    python -m tests.bundle_diff make OUT [--repo TREE] [--worlds DIR] [--only tiny,tiny-bert3,standin,large]
    python -m tests.bundle_diff compare BEFORE AFTER

`make` writes OUT/signing-key.pem (Ed25519, created once and then reused, so that every set is
signed with the same key) and one bundle per world, OUT/<world>/, each made by `python -m job run`
of the source tree TREE (default: this repository) in a child process:
- tiny: the test suite's tiny world (tests/factory.py: a generated 2-layer DistilBERT, 48 rows)
  and a 3-class BERT world on JSON lines (tests/anymodel.py), as `tiny` and `tiny-bert3`;
- standin: the stand-in classifier and SST-2 validation (job/locks/standin.json, as `make standin-run`);
- large: a generated 50,000-row split with the generated tiny classifier (scripts/generated_split.py,
  as scripts/bench_large.py).
The worlds' inputs are generated once into --worlds (default OUT/../bundle-diff-worlds) and reused,
so that two sets read the same files at the same paths.

`compare` lists every file of the two sets that differs. A difference confined to timings and the
source tree's commit (data/environment.json's `timings_s`, `stage_times`, `peak_rss_mb` and
`git_commit`, the commit where report.md and the crate repeat it, and what depends on those bytes:
the crate's digest of environment.json, the manifests, bag-info.txt's Payload-Oxum, the statement's
subject digests and the envelope's signature) is reported as such; any other difference is reported
with its first differing line, and the exit status is 1.

To compare this tree with the bundles of another (BEFORE, made with `make BEFORE --repo OTHER`),
sign with the same key and read the same generated inputs:
    mkdir -p AFTER && cp BEFORE/signing-key*.pem AFTER/
    python -m tests.bundle_diff make AFTER --worlds WORLDS
    python -m tests.bundle_diff compare BEFORE AFTER
(`make` reuses a key it finds in OUT and keeps a world's bundle that is already there.)
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WORLDS = ("tiny", "tiny-bert3", "standin", "large")
VOLATILE_KEYS = frozenset({"timings_s", "stage_times", "peak_rss_mb", "git_commit"})
"""environment.json's fields that differ from run to run (timings, peak memory) or name the source
tree's commit, which differs between the two trees by construction."""
ENVIRONMENT = "data/environment.json"
CRATE = "data/ro-crate-metadata.json"


def fixed_key(out: Path) -> Path:
    """OUT/signing-key.pem (PKCS#8, unencrypted) and its public half; an existing key is kept."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = out / "signing-key.pem"
    if not private.exists():
        key = Ed25519PrivateKey.generate()
        private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
        private.chmod(0o600)
        (out / "signing-key.pub.pem").write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return private


def world_inputs(worlds: Path, name: str) -> tuple[Path | None, Path]:
    """(protocol or None for the repository's, resource lock) of a world, generated on first use."""
    sys.path.insert(0, str(REPO))
    root = worlds / name
    done = root / "inputs.json"
    if done.exists():
        paths = json.loads(done.read_text())
        return (Path(paths["protocol"]) if paths["protocol"] else None), Path(paths["lock"])
    root.mkdir(parents=True, exist_ok=True)
    protocol: Path | None
    if name == "tiny":
        from tests.factory import make_world

        protocol, lock = make_world(root)
    elif name == "tiny-bert3":
        from tests.anymodel import make_any_world

        protocol, lock = make_any_world(root, arch="bert", k=3, fmt="jsonl", paired=False, sizes=(8, 20, 20))
    elif name == "standin":
        protocol, lock = None, REPO / "job" / "locks" / "standin.json"
    else:
        from scripts.generated_split import make_data, make_lock, make_model, make_protocol

        rows = 50_000
        model = make_model(root / "model")
        data = make_data(root / "data" / "validation.parquet", rows)
        protocol = make_protocol(root / "protocol.json", rows)
        lock = make_lock(root / "lock.json", model, data, rows, ["negative", "positive"])
    done.write_text(json.dumps({"protocol": str(protocol) if protocol else None, "lock": str(lock)}))
    return protocol, lock


def make(out: Path, repo: Path, worlds: Path, only: list[str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    key = fixed_key(out)
    env = dict(os.environ, PYTHONPATH=str(repo))
    for name in only:
        protocol, lock = world_inputs(worlds, name)
        bundle = out / name
        if bundle.exists():
            print(f"{name}: {bundle} exists, kept")
            continue
        cmd = [sys.executable, "-m", "job", "run", "--resources", str(lock), "--out", str(bundle),
               "--signing-key", str(key), "--no-progress"]
        if protocol is not None:
            cmd[4:4] = ["--protocol", str(protocol)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, check=False)
        (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
        print(f"{name}: exit {proc.returncode} in {time.perf_counter() - t0:.0f} s -> {bundle}")
        if proc.returncode != 0:
            print(proc.stderr[-2000:], file=sys.stderr)
            return 1
    return 0


def _without_volatile(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _without_volatile(v) for k, v in doc.items() if k not in VOLATILE_KEYS}
    if isinstance(doc, list):
        return [_without_volatile(v) for v in doc]
    return doc


def _commit(root: Path) -> str | None:
    try:
        value = json.loads((root / ENVIRONMENT).read_bytes()).get("git_commit")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, str) and value else None


def _statement(envelope: bytes) -> dict[str, Any]:
    return json.loads(base64.b64decode(json.loads(envelope)["payload"]))


def _same_apart_from_timings(rel: str, a: bytes, b: bytes, volatile: set[str]) -> bool:
    """Whether a and b differ only by timings, the commit (already replaced by a placeholder) and
    what follows from the bytes of the files in `volatile`."""
    name = rel.rsplit("/", 1)[-1]
    if rel == ENVIRONMENT:
        return bool(_without_volatile(json.loads(a)) == _without_volatile(json.loads(b)))
    if rel == CRATE:
        def masked(data: bytes) -> Any:
            doc = json.loads(data)
            for entity in doc.get("@graph", []):
                if entity.get("@id") in {v.removeprefix("data/") for v in volatile}:
                    entity.pop("sha256", None)
                    entity.pop("contentSize", None)
            return doc
        return bool(masked(a) == masked(b))
    if name.startswith(("manifest-", "tagmanifest-")):
        def rest(data: bytes) -> list[str]:
            return [line for line in data.decode().splitlines() if line.split(maxsplit=1)[-1] not in volatile]
        return rest(a) == rest(b)
    if name == "bag-info.txt":
        def keep(data: bytes) -> list[str]:
            return [line for line in data.decode().splitlines() if not line.startswith("Payload-Oxum")]
        return keep(a) == keep(b)
    if name.endswith((".intoto.json", ".dsse.json")):
        sa, sb = _statement(a), _statement(b)
        for st in (sa, sb):
            st["subject"] = [x for x in st.get("subject", []) if x.get("name") not in volatile]
        return bool(sa == sb)
    return False


def _tag_file_last(rel: str) -> tuple[int, str]:
    """data/ first (environment.json, then the rest, the crate last), then the tag files, the
    manifests before the tag manifests and the envelope: each may differ only through the ones before."""
    order = 0 if rel == ENVIRONMENT else 2 if rel == CRATE else 1 if rel.startswith("data/") else \
        3 if rel.startswith("manifest-") or rel == "bag-info.txt" else 4
    return order, rel


def compare(before: Path, after: Path) -> int:
    bad = 0
    worlds = sorted({p.name for p in before.iterdir() if p.is_dir()} & {p.name for p in after.iterdir() if p.is_dir()})
    for world in worlds:
        a_root, b_root = before / world, after / world
        files = sorted({str(p.relative_to(a_root)) for p in a_root.rglob("*") if p.is_file()}
                       | {str(p.relative_to(b_root)) for p in b_root.rglob("*") if p.is_file()}, key=_tag_file_last)
        commits = [(c.encode(), b"<commit>") for c in (_commit(a_root), _commit(b_root)) if c]
        same, timing, other = 0, [], []
        volatile: set[str] = set()
        for rel in files:
            a, b = a_root / rel, b_root / rel
            if not a.is_file() or not b.is_file():
                other.append(f"{rel}: only in {'after' if b.is_file() else 'before'}")
                continue
            da, db = a.read_bytes(), b.read_bytes()
            if da == db:
                same += 1
                continue
            na, nb = da, db
            for commit, placeholder in commits:
                na, nb = na.replace(commit, placeholder), nb.replace(commit, placeholder)
            if na == nb or _same_apart_from_timings(rel, na, nb, volatile):
                timing.append(rel)
                volatile.add(rel)
            else:
                la, lb = da.decode(errors="replace").splitlines(), db.decode(errors="replace").splitlines()
                first = next((i for i, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y), min(len(la), len(lb)))
                other.append(f"{rel}: line {first + 1}: {la[first][:160] if first < len(la) else '<end>'!r} -> "
                             f"{lb[first][:160] if first < len(lb) else '<end>'!r}")
        print(f"{world}: {len(files)} files, {same} identical, {len(timing)} differ only in timings and the commit"
              f"{' (' + ', '.join(timing) + ')' if timing else ''}, {len(other)} differ otherwise")
        for line in other:
            print(f"  DIFFERS {line}")
        bad += len(other)
    print("no difference apart from timings and the commit" if not bad else f"{bad} file(s) differ")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    mk = sub.add_parser("make", help="write the worlds' bundles signed with OUT/signing-key.pem")
    mk.add_argument("out", type=Path)
    mk.add_argument("--repo", type=Path, default=REPO, help="the source tree whose job makes the bundles")
    mk.add_argument("--worlds", type=Path, help="generated inputs (default OUT/../bundle-diff-worlds)")
    mk.add_argument("--only", default=",".join(WORLDS), help=f"comma-separated subset of {','.join(WORLDS)}")
    cmp = sub.add_parser("compare", help="byte-for-byte comparison of two sets, timings apart")
    cmp.add_argument("before", type=Path)
    cmp.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.command == "make":
        out = args.out.resolve()
        worlds = (args.worlds or out.parent / "bundle-diff-worlds").resolve()
        return make(out, args.repo.resolve(), worlds, [w for w in args.only.split(",") if w])
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
