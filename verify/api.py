"""Verify a bundle given as a bag folder or a .tar.gz archive; the one entry point callers need."""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from bundle import layout
from bundle.dsse import Envelope
from bundle.errors import EnvelopeError
from verify import extract
from verify.checks import Verification, verify_tree
from verify.context import Attestation, Reading, Trust
from verify.result import Check, Failed, exit_code
from verify.tree import BagTree, read_tree


@dataclass(frozen=True)
class Outcome:
    bundle: str
    kind: str  # "folder" or "archive"
    trust: Trust
    checks: list[Check]
    exit_code: int
    seconds: float
    signer_fingerprint: str | None
    notes: list[str]
    """What the bag holds outside the signed statement; never part of the verdict."""
    assurance: str = ""
    digests: Mapping[str, str] = field(default_factory=dict)
    """sha256 of what a verification summary names (verify.vsa), each when it could be read:
    `statement` (the envelope's payload) and `protocol` (data/protocol.json)."""


def verify_path(path: Path, trust: Trust | None = None, *,
                expected_protocol_sha256: str | None = None,
                attestations: tuple[Attestation, ...] = (),
                reproducers: tuple[Ed25519PublicKey, ...] = (),
                require_bit_identical: bool = False,
                max_tolerance: float = layout.DEFAULT_LOGIT_TOLERANCE) -> Outcome:
    """Run every check on the bundle at `path`, and on each reproduction attestation given (counted
    only when signed by one of `reproducers`; only a bit-identical one when `require_bit_identical`);
    a pre-registered logit tolerance above `max_tolerance` fails reproduction.tolerance.
    Raises InputError when it cannot be read at all."""
    trust = trust or Trust()
    start = time.perf_counter()
    path = Path(path)
    digests: dict[str, str] = {}

    def run(tree: BagTree | None, reading: Reading) -> Verification:
        result = verify_tree(tree, trust, reading=reading,
                             expected_protocol_sha256=expected_protocol_sha256,
                             attestations=attestations, reproducers=reproducers,
                             require_bit_identical=require_bit_identical, max_tolerance=max_tolerance)
        digests.update(_digests(tree, result))
        return result

    if extract.is_archive(path):
        with tempfile.TemporaryDirectory(prefix="verify-") as tmp:
            result = run(*_read_archive(path, Path(tmp)))
        kind = "archive"
    else:
        result = run(*_read_folder(path))
        kind = "folder"
    return Outcome(str(path), kind, trust, result.checks, exit_code(result.checks),
                   time.perf_counter() - start, result.signer_fingerprint, result.notes,
                   result.assurance, digests)


def _digests(tree: BagTree | None, result: Verification) -> dict[str, str]:
    """Outcome.digests of the bag read and the envelope the checks parsed. A bag rejected before its
    envelope was read still names its statement when the envelope parses: the digest only names
    what a FAILED summary is about, nothing is trusted from it."""
    found = {}
    files = tree.files if tree is not None else {}
    envelope = result.envelope
    if envelope is None and layout.PROVENANCE in files:
        try:
            envelope = Envelope.from_json(files[layout.PROVENANCE])
        except EnvelopeError:
            envelope = None
    if envelope is not None:
        found["statement"] = hashlib.sha256(envelope.payload).hexdigest()
    if layout.PROTOCOL_JSON in files:
        found["protocol"] = hashlib.sha256(files[layout.PROTOCOL_JSON]).hexdigest()
    return found


def _read_archive(path: Path, dest: Path) -> tuple[BagTree | None, Reading]:
    """The bag in the archive at `path`, extracted under `dest`, and how that went (archive.safe
    reports it)."""
    try:
        detail = extract.extract_archive(path, dest)
        return read_tree(extract.find_bag_root(dest)), Reading(archive=True, detail=detail)
    except Failed as exc:
        return None, Reading(archive=True, failure=exc)


def _read_folder(path: Path) -> tuple[BagTree | None, Reading]:
    """The bag folder at `path` read into memory, and how that went (bag.layout reports it)."""
    try:
        return read_tree(path), Reading()
    except Failed as exc:
        return None, Reading(failure=exc)
