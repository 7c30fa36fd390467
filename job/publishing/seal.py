"""BagIt 1.0 tag files for a bundle (FORMAT.md "Tag files"), written around a payload.

This is the writer only: the one reader of the format is verify/ (verify/README.md).

`seal` turns a staging directory that holds data/... into a complete bag: bagit.txt, bag-info.txt,
both payload manifests, and, when a key is given, the signed statement (provenance.intoto.json)
and signer.pub.pem; tagmanifest-sha256.txt is written last.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle import layout
from bundle.canonical import loads_strict
from bundle.digests import file_digests, sha256_file
from bundle.dsse import Envelope
from bundle.errors import BundleError
from bundle.keys import fingerprint, public_key_pem
from job.publishing.ledger import Written
from job.publishing.statement import build_statement, schemas_map, statement_bytes
from job.publishing.walk import walk_regular

__all__ = [
    "check_payload",
    "file_digests",
    "format_bag_info",
    "format_manifest",
    "payload_files",
    "seal",
    "sha256_file",
]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_BAD_NAME = re.compile(r"[\x00-\x1f\x7f%\\]")


def payload_files(bag: Path) -> list[str]:
    """Every payload file as a POSIX path "data/...", sorted; refuse links and special files."""
    bag = Path(bag)
    data = bag / layout.DATA_DIR
    if not data.is_dir() or data.is_symlink():
        raise BundleError(f"{bag} has no data/ directory; write the payload under data/ first.")
    found: list[str] = []
    for rel, _, is_dir in walk_regular(data, bag):
        if _BAD_NAME.search(rel):
            raise BundleError(
                f"{rel!r} has a control character, '%' or '\\' in its name; rename the file."
            )
        if not is_dir:
            found.append(rel)
    return sorted(found)


def format_manifest(digests: Mapping[str, str]) -> str:
    """Manifest text: one "<hex>  <path>" line per entry, sorted by path."""
    return "".join(f"{digests[path]}  {path}\n" for path in sorted(digests))


def format_bag_info(fields: list[tuple[str, str]]) -> str:
    """bag-info.txt text, one "Label: value" line per field, in the given order."""
    for label, value in fields:
        if "\n" in value or "\r" in value or ":" in label:
            raise BundleError(
                f"bag-info.txt field {label} must be a single line; remove line breaks from it."
            )
    return "".join(f"{label}: {value}\n" for label, value in fields)


def _write(bag: Path, name: str, data: bytes) -> None:
    fd = os.open(bag / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def check_payload(bag: Path, ledger: Mapping[str, Written], *, protocol_sha256: str, profile: str) -> list[str]:
    """Check the payload before it is sealed; return the payload paths.

    The files under data/ must be exactly those `ledger` lists (job.publishing.ledger.Ledger: each
    written once, JSON ones schema-checked as they were written, digests taken from the bytes
    written), each still of the size written; data/protocol.json must have been written with
    sha256 protocol_sha256; the payload must be exactly the files FORMAT.md lists for that
    protocol; resources.json's profile must equal `profile`.
    """
    bag = Path(bag)
    if not _HEX64.fullmatch(protocol_sha256):
        raise BundleError(
            f"protocol_sha256 {protocol_sha256!r} is not 64 lowercase hex digits; "
            "pass the sha256 of the protocol file."
        )
    if profile not in layout.PROFILES:
        raise BundleError(
            f"Profile {profile!r} is not one of {', '.join(layout.PROFILES)}; pass formal or other."
        )
    paths = payload_files(bag)
    unwritten = sorted(set(paths) - set(ledger))
    gone = sorted(set(ledger) - set(paths))
    if unwritten or gone:
        raise BundleError(
            f"data/ does not hold the files its ledger lists (not written through it: "
            f"{unwritten or 'none'}; missing: {gone or 'none'}); write every payload file through one Ledger."
        )
    resized = [path for path in paths if (bag / path).stat().st_size != ledger[path].size]
    if resized:
        raise BundleError(
            f"{resized[0]} changed size after it was written; something else writes into the "
            "staging directory, so stop it and write the payload again."
        )
    if layout.PROTOCOL_JSON not in paths:
        raise BundleError(
            f"{layout.PROTOCOL_JSON} is missing; copy the protocol file there byte for byte."
        )
    found = ledger[layout.PROTOCOL_JSON].sha256
    if found != protocol_sha256:
        raise BundleError(
            f"{layout.PROTOCOL_JSON} has sha256 {found} but the protocol's is "
            f"{protocol_sha256}; copy the protocol file byte for byte."
        )
    # Both small, and schema-valid as written: what the payload must hold, and the profile it states.
    protocol = loads_strict((bag / layout.PROTOCOL_JSON).read_bytes(), source=layout.PROTOCOL_JSON)
    expected = layout.expected_payload(protocol)
    missing = sorted(set(expected) - set(paths))
    extra = sorted(set(paths) - set(expected))
    if missing or extra:
        raise BundleError(
            f"The payload does not match FORMAT.md for this protocol (missing: "
            f"{missing or 'none'}; extra: {extra or 'none'}); write exactly the listed files."
        )
    resources = loads_strict((bag / layout.RESOURCES_JSON).read_bytes(), source=layout.RESOURCES_JSON)
    if resources["profile"] != profile:
        raise BundleError(
            f"{layout.RESOURCES_JSON} says profile {resources['profile']!r} but the bag is sealed as "
            f"{profile!r}; pass the profile resources.json records."
        )
    return paths


def seal(
    staging: Path,
    ledger: Mapping[str, Written],
    *,
    description: str,
    protocol_sha256: str,
    profile: str,
    predicate: Mapping[str, Any] | None = None,
    private_key: Ed25519PrivateKey | None = None,
    date: str,
) -> None:
    """Write every tag file around staging/data/ so that staging becomes a complete bag.

    `ledger`: the payload as written (job.publishing.ledger.Ledger over staging); the manifests, the
    Payload-Oxum and the statement's subjects are its digests and sizes, not a second reading.
    `date` is the Bagging-Date (job.publishing.dates.bagging_date() of the run, the date the
    payload's crate already names).

    With a private key, sign an in-toto Statement over all payload files; its predicate is
    `predicate` (bundle.predicate.restated_predicate of the records written) plus `schemas` and
    `signer_fingerprint`.
    """
    staging = Path(staging)
    stray = sorted(p.name for p in staging.iterdir() if p.name != layout.DATA_DIR)
    if stray:
        raise BundleError(
            f"{staging} already holds {', '.join(stray)} next to data/; seal a "
            "staging directory that holds only data/."
        )
    if private_key is not None and predicate is None:
        raise BundleError(
            "A signed bag needs the predicate it signs; pass bundle.predicate.restated_predicate(...) "
            "of the records written."
        )
    paths = check_payload(staging, ledger, protocol_sha256=protocol_sha256, profile=profile)
    format_bag_info([(layout.INFO_DESCRIPTION, description)])  # refuse line breaks early
    sha256 = {path: ledger[path].sha256 for path in paths}
    sha512 = {path: ledger[path].sha512 for path in paths}
    octets = sum(ledger[path].size for path in paths)

    info = [
        (layout.INFO_BAGGING_DATE, date),
        (layout.INFO_PAYLOAD_OXUM, f"{octets}.{len(paths)}"),
        (layout.INFO_DESCRIPTION, description),
        (layout.INFO_PROTOCOL_SHA256, protocol_sha256),
        (layout.INFO_PROFILE, profile),
    ]
    envelope: bytes | None = None
    if private_key is not None:
        signer = fingerprint(private_key)
        info.append((layout.INFO_SIGNER_FINGERPRINT, signer))
        full = dict(predicate or {})
        for key, expected in (("protocol_sha256", protocol_sha256), ("profile", profile)):
            if full.get(key) != expected:
                raise BundleError(
                    f"The predicate's {key} is {full.get(key)!r} but the bag's is "
                    f"{expected!r}; build the predicate from this payload."
                )
        full["schemas"] = schemas_map(paths)
        full["signer_fingerprint"] = signer
        statement = build_statement(sha256, full)
        envelope = Envelope(statement_bytes(statement), layout.PAYLOAD_TYPE).sign(private_key).to_json()

    tags = {
        layout.BAGIT_TXT: layout.BAGIT_TXT_CONTENT.encode("utf-8"),
        layout.BAG_INFO: format_bag_info(info).encode("utf-8"),
        layout.MANIFEST_SHA256: format_manifest(sha256).encode("utf-8"),
        layout.MANIFEST_SHA512: format_manifest(sha512).encode("utf-8"),
    }
    if private_key is not None and envelope is not None:
        tags[layout.PROVENANCE] = envelope
        tags[layout.SIGNER_PUB] = public_key_pem(private_key)
    for name, content in tags.items():
        _write(staging, name, content)
    tag_digests = {name: hashlib.sha256(content).hexdigest() for name, content in tags.items()}
    _write(staging, layout.TAGMANIFEST_SHA256, format_manifest(tag_digests).encode("utf-8"))
