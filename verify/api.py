"""The verifier's public Python API: `verify_path` runs every check on a bundle given as a bag
folder or a .tar.gz archive and returns an `Outcome`: the verdict, the checks, and what the checks
read (the JSON documents, each pool's predictions, the DSSE envelope and the bag's files), so that
a caller uses the verifier's own parse of the bundle and never reads the format a second time.

Stable: the names in `__all__` (re-exported by `verify`) keep their meaning and signatures within
a major release of the verifier (verify.__version__); everything else in verify/ is internal."""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from bundle import layout
from bundle.dsse import Envelope
from bundle.errors import EnvelopeError
from verify import extract
from verify.checks import Verification, verify_tree
from verify.context import Attestation, Reading, Trust
from verify.parsed import PoolData
from verify.result import EXIT_FAILED, EXIT_OK, EXIT_UNTRUSTED, Check, Failed, exit_code
from verify.tree import BagTree, read_tree

__all__ = ["VERDICTS", "Outcome", "extract_bag", "verify_path"]

VERDICTS: Final = {EXIT_OK: "verified", EXIT_UNTRUSTED: "intact-signer-unknown", EXIT_FAILED: "failed"}
"""Exit code -> the verdict's name (the JSON report's `verdict`): every check passed under a
trusted key; every check passed but no trusted key was given; a check failed or could not run."""


@dataclass(frozen=True)
class Outcome:
    """What verify_path found. `checks` are in report order (verify/README.md lists them);
    `exit_code` and `verdict` follow from them alone. `documents`, `pools`, `envelope` and `files`
    are what the checks read, each only as far as the checks got: a caller may rely on them when
    the verdict is not "failed" (then every one was checked)."""

    bundle: str
    kind: str  # "folder" or "archive"
    trust: Trust
    checks: list[Check]
    exit_code: int
    seconds: float
    signer_fingerprint: str | None
    """The key that signed the bundle, when the signature verifies (trusted or not)."""
    notes: list[str]
    """What the bag holds outside the signed statement; never part of the verdict."""
    assurance: str = ""
    """What the checks establish, in words."""
    digests: Mapping[str, str] = field(default_factory=dict)
    """sha256 of what a verification summary names (verify.vsa), each when it could be read:
    `statement` (the envelope's payload) and `protocol` (data/protocol.json)."""
    envelope: Envelope | None = None
    """The DSSE envelope as the checks read it (None when it could not be read)."""
    documents: Mapping[str, Any] = field(default_factory=dict)
    """bag path (bundle.layout, "data/metrics.json") -> each JSON payload file, parsed and valid
    against the verifier's schema; and "predicate" -> the signed statement's predicate."""
    pools: Mapping[str, PoolData] = field(default_factory=dict)
    """pool name -> its predictions as the checks read them (columns, types and ranges checked)."""
    files: Mapping[str, bytes] = field(default_factory=dict)
    """bag path -> the bytes of every regular file of the bag as read (empty when it could not be read)."""
    read_failure: str | None = None
    """Why the input could not be read as a bag at all (archive.safe or bag.layout says so), or None."""

    @property
    def verdict(self) -> str:
        """VERDICTS[exit_code]: "verified", "intact-signer-unknown" or "failed"."""
        return VERDICTS[self.exit_code]

    def sha256(self, path: str) -> str:
        """sha256 of the bag's file at `path`, as read; KeyError when the bag has none."""
        return hashlib.sha256(self.files[path]).hexdigest()


def verify_path(path: Path, trust: Trust | None = None, *,
                expected_protocol_sha256: str | None = None,
                attestations: tuple[Attestation, ...] = (),
                reproducers: tuple[Ed25519PublicKey, ...] = (),
                require_bit_identical: bool = False,
                max_tolerance: float = layout.DEFAULT_LOGIT_TOLERANCE) -> Outcome:
    """Run every check on the bundle at `path` (a bag folder or a .tar.gz archive) under `trust`
    (default: no trusted key, so a bundle that passes every check is "intact-signer-unknown").

    expected_protocol_sha256: data/protocol.json must have this sha256 (protocol.pre-registered);
    attestations: reproduction attestations to check too, each counted only when signed by one of
    `reproducers` (only a bit-identical one when `require_bit_identical`); max_tolerance: a
    pre-registered logit tolerance above it fails reproduction.tolerance.
    Never raises for what the bundle holds (a bad bundle is a failed check); raises InputError when
    the input cannot be read at all (a folder without permission, for instance)."""
    trust = trust or Trust()
    start = time.perf_counter()
    path = Path(path)

    def check(tree: BagTree | None, reading: Reading) -> Verification:
        return verify_tree(tree, trust, reading=reading, expected_protocol_sha256=expected_protocol_sha256,
                           attestations=attestations, reproducers=reproducers,
                           require_bit_identical=require_bit_identical, max_tolerance=max_tolerance)

    if extract.is_archive(path):
        with tempfile.TemporaryDirectory(prefix="verify-") as tmp:
            tree, reading = _read_archive(path, Path(tmp))
            result = check(tree, reading)
        kind = "archive"
    else:
        tree, reading = _read_folder(path)
        result = check(tree, reading)
        kind = "folder"
    return Outcome(str(path), kind, trust, result.checks, exit_code(result.checks),
                   time.perf_counter() - start, result.signer_fingerprint, result.notes,
                   result.assurance, _digests(tree, result), envelope=result.envelope,
                   documents=result.documents, pools=result.pools,
                   files=tree.files if tree is not None else {},
                   read_failure=str(reading.failure) if reading.failure is not None else None)


def extract_bag(archive: Path, dest: Path) -> Path:
    """Extract the bundle archive at `archive` into the empty folder `dest` with the verifier's own
    strict reader (what archive.safe checks: no links, no paths outside `dest`, sizes within the
    format's caps) and return the bag's folder under `dest`. Raises Failed (a VerifyError) when the
    archive is not a safe bundle archive, InputError when it cannot be read. It verifies nothing
    else: pass the folder to verify_path."""
    extract.extract_archive(archive, dest)
    return extract.find_bag_root(dest)


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
