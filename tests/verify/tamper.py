"""Tools for the verifier's tests: the attacker's re-seal (rewrite manifests, tag manifest and
signature with a key the attacker holds), small file edits, the bases every tamper class runs on
(the synthetic bundle of tests/synthetic.py and the job's tiny bundle), and hostile bundles."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle import layout
from bundle.canonical import dumps, loads_strict
from bundle.dsse import Envelope
from bundle.keys import fingerprint, public_key_pem
from job.publishing.seal import file_digests, format_bag_info, format_manifest
from tests.synthetic import make_bundle, sha256
from tests.verify.tarcraft import ATTACKS

# -- the attacker ----------------------------------------------------------------------------

TAG_OUTPUTS = (layout.BAG_INFO, layout.MANIFEST_SHA256, layout.MANIFEST_SHA512,
               layout.PROVENANCE, layout.SIGNER_PUB, layout.TAGMANIFEST_SHA256)


def _payload(bag: Path) -> list[str]:
    return sorted(p.relative_to(bag).as_posix() for p in (bag / "data").rglob("*") if p.is_file())


def signed_predicate(bag: Path) -> dict[str, Any]:
    return loads_strict(Envelope.from_json((bag / layout.PROVENANCE).read_bytes()).payload)["predicate"]  # type: ignore[no-any-return]


def reseal(bag: Path, key: Ed25519PrivateKey | None, *,
           predicate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
           restate: bool = True, report: bool = True, crate: bool = True) -> None:
    """Rewrite bag-info, both manifests, the tag manifest and (with a key) the signature so that
    every hash and the signature match the payload as it now is: what an attacker does.

    The predicate is the old one with the temperature and audit headline restated from the
    payload (restate) and then passed through `predicate`; no schema is checked, so that a
    payload that breaks its schema can still be signed. The attacker also regenerates report.md
    from the records (report) and restates the crate's file hashes and signer (crate), so that
    the check a tamper aims at is not merely shadowed by a stale derived file."""
    if report:
        refresh_report(bag)
    if crate:
        refresh_crate(bag, fingerprint(key) if key is not None else None)
    old = signed_predicate(bag) if (bag / layout.PROVENANCE).exists() else None
    info = dict(line.split(": ", 1) for line in (bag / layout.BAG_INFO).read_text().splitlines())
    for name in TAG_OUTPUTS:
        (bag / name).unlink(missing_ok=True)
    paths = _payload(bag)
    sha256s, sha512s = {}, {}
    octets = 0
    for p in paths:
        sha256s[p], sha512s[p] = file_digests(bag / p)
        octets += (bag / p).stat().st_size
    info[layout.INFO_PAYLOAD_OXUM] = f"{octets}.{len(paths)}"
    tags = [layout.BAGIT_TXT, layout.BAG_INFO, layout.MANIFEST_SHA256, layout.MANIFEST_SHA512]
    if key is not None:
        info[layout.INFO_SIGNER_FINGERPRINT] = fingerprint(key)
        pred = dict(old or {})
        if restate:
            _restate(bag, pred)
        pred["signer_fingerprint"] = fingerprint(key)
        if predicate is not None:
            pred = predicate(pred)
        statement = {"_type": layout.STATEMENT_TYPE,
                     "subject": [{"name": p, "digest": {"sha256": sha256s[p]}} for p in paths],
                     "predicateType": layout.PREDICATE_TYPE, "predicate": pred}
        env = Envelope(dumps(statement), layout.PAYLOAD_TYPE).sign(key).to_dict()
        (bag / layout.PROVENANCE).write_bytes(dumps(env))
        (bag / layout.SIGNER_PUB).write_bytes(public_key_pem(key))
        tags += [layout.PROVENANCE, layout.SIGNER_PUB]
    else:
        info.pop(layout.INFO_SIGNER_FINGERPRINT, None)
    order = [label for label in layout.BAG_INFO_LABELS if label in info]
    (bag / layout.BAG_INFO).write_text(format_bag_info([(k, info[k]) for k in order]))
    (bag / layout.MANIFEST_SHA256).write_text(format_manifest(sha256s))
    (bag / layout.MANIFEST_SHA512).write_text(format_manifest(sha512s))
    (bag / layout.TAGMANIFEST_SHA256).write_text(format_manifest(
        {t: file_digests(bag / t)[0] for t in tags}))


def refresh_report(bag: Path) -> None:
    """report.md regenerated from the records as they now are (kept when they cannot be read)."""
    from scripts.payload_report import report_markdown

    with contextlib.suppress(Exception):
        (bag / layout.REPORT_MD).write_bytes(report_markdown(bag / "data").encode("utf-8"))


def refresh_crate(bag: Path, signer: str | None) -> None:
    """The crate's sha256 and contentSize of every file restated, and its signer set to `signer`."""
    from job.rocrate import FINGERPRINT_PROPERTY

    path = bag / layout.RO_CRATE_JSON
    with contextlib.suppress(Exception):
        doc = loads_strict(path.read_bytes())
        for entity in doc["@graph"]:
            target = bag / "data" / entity["@id"]
            if "sha256" in entity and entity.get("@type") == "File" and target.is_file():
                raw = target.read_bytes()
                entity["sha256"], entity["contentSize"] = sha256(raw), str(len(raw))
            if entity.get("propertyID") == FINGERPRINT_PROPERTY and signer is not None:
                entity["value"] = signer
        path.write_bytes(dumps(doc))


def _restate(bag: Path, pred: dict[str, Any]) -> None:
    with contextlib.suppress(Exception):  # a payload broken on purpose keeps the old claims
        t = loads_strict((bag / layout.TEMPERATURE_JSON).read_bytes())
        m = loads_strict((bag / layout.METRICS_JSON).read_bytes())
        pred["temperature"] = {"temperature": t["temperature"], "beta": t["beta"],
                               "boundary": t["boundary"],
                               "sha256": sha256((bag / layout.TEMPERATURE_JSON).read_bytes())}
        audit = m["pools"]["audit"]
        pred["audit"] = {"n": audit["raw"]["n"],
                         **{w: {k: audit[w][k] for k in ("accuracy", "nll", "brier", "ece", "mce")}
                            for w in ("raw", "calibrated")}}
        pred["protocol_sha256"] = sha256((bag / layout.PROTOCOL_JSON).read_bytes())


def copy_bag(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def edit_json(bag: Path, rel: str, fn: Callable[[Any], Any | None]) -> None:
    """Apply fn to the parsed document (in place or by returning a new one); write it canonical."""
    path = bag / rel
    doc = loads_strict(path.read_bytes())
    new = fn(doc)
    path.write_bytes(dumps(doc if new is None else new))


def update_stage_hashes(bag: Path) -> None:
    """Make every stage record name the files as they now are (an attacker covering tracks)."""
    data = bag / "data"

    def fix(doc: Any) -> None:
        for stage in doc["stages"]:
            for role in ("consumed", "produced"):
                for rel in stage[role]:
                    stage[role][rel] = sha256((data / rel).read_bytes())

    edit_json(bag, layout.STAGES_JSON, fix)


# -- fixtures (import them into a test module by name) ----------------------------------------

@dataclass(frozen=True)
class Keys:
    real: Ed25519PrivateKey
    other: Ed25519PrivateKey


@pytest.fixture(scope="session")
def verify_keys() -> Keys:
    return Keys(Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate())


@pytest.fixture(scope="session")
def synthetic_bag(tmp_path_factory: pytest.TempPathFactory, verify_keys: Keys) -> Path:
    return make_bundle(tmp_path_factory.mktemp("synthetic") / "bag", verify_keys.real)


@pytest.fixture(params=["synthetic", "job"])
def base(request: pytest.FixtureRequest, verify_keys: Keys) -> tuple[Path, Keys]:
    """(read-only bag, keys whose .real signed it)."""
    if request.param == "synthetic":
        return request.getfixturevalue("synthetic_bag"), verify_keys
    from job.publishing.signing_keys import load_private_key

    bag = request.getfixturevalue("tiny_bundle")
    key_dir = request.getfixturevalue("signing_key_dir")
    return bag, Keys(load_private_key(key_dir / "signing-key.pem"), verify_keys.other)


# -- hostile bundles: bounded time and memory (test_hostile.py, bench_hostile.py) ---

def _archive(bag: Path, out: Path, extra: Callable[[Any], None] | None = None) -> Path:
    """`bag` as a .tar.gz; `extra(tar)` may add members after the bag's."""
    import tarfile

    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:  # what `job archive` writes
        info.mode = 0o755 if info.isdir() else 0o644
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(out, "w:gz", compresslevel=1, format=tarfile.USTAR_FORMAT) as tar:
        tar.add(bag, arcname=bag.name, filter=normalise)
        if extra is not None:
            extra(tar)
    return out


def _write_member(tar: Any, name: str, data: bytes) -> None:
    import io
    import tarfile

    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _empty_objects(size: int) -> bytes:
    return b"[" + b"{}," * max(size // 3 - 1, 0) + b"{}]"


def hostile_pools(bag: Path, keys: Keys, scale: float) -> Path:
    """pools.json of [{},{},...] (16 MB at scale 1), every hash and the signature recomputed."""
    (bag / layout.POOLS_JSON).write_bytes(_empty_objects(int(16e6 * scale)))
    reseal(bag, keys.real, report=False, crate=False)
    return bag


def hostile_pools_archive(bag: Path, keys: Keys, scale: float) -> Path:
    """The same inside a .tar.gz that expands to 255 MB at scale 1."""
    (bag / layout.POOLS_JSON).write_bytes(_empty_objects(int(255e6 * scale)))
    reseal(bag, keys.real, report=False, crate=False)
    archive = _archive(bag, bag.parent / "bundle.tar.gz")
    shutil.rmtree(bag)
    return archive


def hostile_bootstrap(bag: Path, keys: Keys, scale: float) -> Path:
    """bootstrap.json asking for 1,000,000 resamples."""
    def edit(doc: dict[str, Any]) -> None:
        doc["resamples"] = max(int(1e6 * scale), 10_000)

    edit_json(bag, layout.BOOTSTRAP_JSON, edit)
    reseal(bag, keys.real)
    return bag


def hostile_trajectory(bag: Path, keys: Keys, scale: float) -> Path:
    """trajectory.json of 1,000,000 steps."""
    def edit(doc: dict[str, Any]) -> None:
        step = doc["steps"][0] if doc["steps"] else {"step": 1, "lo": 0.05, "hi": 20.0,
                                                     "mid": 10.025, "g": 0.0}
        doc["steps"] = [dict(step, step=i + 1) for i in range(max(int(1e6 * scale), 2_000))]

    edit_json(bag, layout.TRAJECTORY_JSON, edit)
    reseal(bag, keys.real, report=False, crate=False)
    return bag


def hostile_parquet_rows(bag: Path, keys: Keys, scale: float) -> Path:
    """audit predictions of 20,000,000 identical rows (a few hundred kilobytes of zstd)."""
    path = bag / layout.AUDIT_PREDICTIONS
    table = pq.read_table(path)
    chunk = table.take(pa.array(np.zeros(100_000, dtype=np.int64)))  # the first row, 100,000 times
    rows = max(int(2e7 * scale), 200_000)
    with pq.ParquetWriter(path, table.schema, compression="zstd", use_dictionary=False,
                          write_statistics=False) as writer:
        for _ in range(rows // 100_000):
            writer.write_table(chunk)
    reseal(bag, keys.real, report=False, crate=False)
    return bag


def hostile_report_images(bag: Path, keys: Keys, scale: float) -> Path:
    """report.md with `![` repeated 500,000 times."""
    with open(bag / layout.REPORT_MD, "ab") as fh:
        fh.write(b"![" * max(int(5e5 * scale), 50_000))
    reseal(bag, keys.real, report=False)
    return bag


def hostile_protocol_resamples(bag: Path, keys: Keys, scale: float) -> Path:
    """A protocol asking for 10^9 bootstrap resamples, every record restated to name it."""
    data = (bag / layout.PROTOCOL_JSON).read_bytes()
    doc = json.loads(data)
    doc["bootstrap"]["resamples"] = 1_000_000_000
    new = json.dumps(doc).encode()
    (bag / layout.PROTOCOL_JSON).write_bytes(new)
    old_sha, new_sha = sha256(data), sha256(new)
    for rel in layout.PAYLOAD_SCHEMAS:
        if rel != layout.PROTOCOL_JSON and (bag / rel).exists():
            (bag / rel).write_bytes((bag / rel).read_bytes().replace(old_sha.encode(),
                                                                     new_sha.encode()))
    set_info = (bag / layout.BAG_INFO).read_text().replace(old_sha, new_sha)
    (bag / layout.BAG_INFO).write_text(set_info)
    reseal(bag, keys.real, predicate=lambda p: dict(p, protocol_sha256=new_sha))
    return bag


def hostile_trailing_member(bag: Path, keys: Keys, scale: float) -> Path:
    """A .tar.gz with a second, altered data/report.md after the end-of-archive marker: what
    `tar -xzif` extracts."""
    import io
    import tarfile

    archive = _archive(bag, bag.parent / "bundle.tar.gz")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        _write_member(tar, f"{bag.name}/{layout.REPORT_MD}", b"# All is well\n")
    import gzip

    plain = gzip.decompress(archive.read_bytes()) + raw.getvalue()
    archive.write_bytes(gzip.compress(plain, compresslevel=1))
    shutil.rmtree(bag)
    return archive


def hostile_formal_extra_file(bag: Path, keys: Keys, scale: float) -> Path:
    """Profile formal with an extra model file that no protocol entry pins."""
    def edit(doc: dict[str, Any]) -> None:
        doc["profile"], doc["deviations"] = "formal", []
        doc["model"]["files"].append({"path": "extra.bin", "size": 1, "sha256": "0" * 64,
                                      "pinned_sha256": None, "pin": "none",
                                      "matches_pin": False})

    return _formal(bag, keys, edit)


def hostile_formal_pin_none(bag: Path, keys: Keys, scale: float) -> Path:
    """Profile formal with every file recorded as pin `none` (the job would call it other)."""
    def edit(doc: dict[str, Any]) -> None:
        doc["profile"], doc["deviations"] = "formal", []
        for kind in ("model", "dataset"):
            for f in doc[kind]["files"]:
                f["pin"] = "none"

    return _formal(bag, keys, edit)


def _formal(bag: Path, keys: Keys, edit: Callable[[Any], None]) -> Path:
    edit_json(bag, layout.RESOURCES_JSON, edit)
    lines = (bag / layout.BAG_INFO).read_text().replace("Profile: other", "Profile: formal")
    (bag / layout.BAG_INFO).write_text(lines)
    update_stage_hashes(bag)
    reseal(bag, keys.real, predicate=lambda p: dict(p, profile="formal"))
    return bag


def hostile_stage_times(bag: Path, keys: Keys, scale: float) -> Path:
    """environment.json times the audit inference before the fit."""
    def edit(doc: dict[str, Any]) -> None:
        t = "2024-05-07T10:00:0{}+00:00"
        doc["stage_times"] = [{"stage": name, "start": t.format(i), "end": t.format(i)}
                              for i, name in enumerate(["split", "calibration-inference",
                                                        "audit-inference", "fit", "metrics"])]

    edit_json(bag, layout.ENVIRONMENT_JSON, edit)
    reseal(bag, keys.real)
    return bag


def hostile_audit_digest_renamed(bag: Path, keys: Keys, scale: float) -> Path:
    """The fit stage consumed the audit predictions' digest under another name."""
    audit = sha256((bag / layout.AUDIT_PREDICTIONS).read_bytes())

    def edit(doc: dict[str, Any]) -> None:
        for stage in doc["stages"]:
            if stage["name"] == "fit":
                stage["consumed"]["predictions/holdout.parquet"] = audit

    edit_json(bag, layout.STAGES_JSON, edit)
    reseal(bag, keys.real)
    return bag


def _archive_attack(name: str) -> Callable[[Path, Keys, float], Path]:
    """The named attack of tests/verify/tarcraft.py on the bag's genuine `job archive`."""
    def build(bag: Path, keys: Keys, scale: float) -> Path:
        from job.publishing.archive import archive

        genuine = archive(bag, bag.parent / f"{bag.name}.tar.gz")
        out = ATTACKS[name](genuine, bag.parent / f"{name}.tar.gz", scale)
        genuine.unlink()
        shutil.rmtree(bag)
        return out
    build.__doc__ = f"The archive attack {name!r} (tests/verify/tarcraft.py)."
    return build


HOSTILE: dict[str, Callable[[Path, Keys, float], Path]] = {
    "pools-empty-objects": hostile_pools,
    "pools-archive-bomb": hostile_pools_archive,
    "bootstrap-resamples": hostile_bootstrap,
    "trajectory-steps": hostile_trajectory,
    "parquet-identical-rows": hostile_parquet_rows,
    "report-image-brackets": hostile_report_images,
    "protocol-resamples": hostile_protocol_resamples,
    "archive-trailing-member": hostile_trailing_member,
    "formal-extra-file": hostile_formal_extra_file,
    "formal-pin-none": hostile_formal_pin_none,
    "stage-times-audit-first": hostile_stage_times,
    "audit-digest-renamed": hostile_audit_digest_renamed,
    **{name: _archive_attack(name) for name in ATTACKS},
}
"""Hostile bundles, each built from a genuine bag (copied first) by an attacker who holds the
signing key, so that only the bounds and the cross-checks stand between it and a verdict; the
float scales the sizes (1: the sizes measured against the unbounded verifier)."""
