"""Verify a bundle given as a bag folder or a .tar.gz archive; the one entry point callers need."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from verify import extract
from verify.checks import verify_tree
from verify.context import Attestation, Trust
from verify.result import Check, Failed, exit_code
from verify.tree import read_tree


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


def verify_path(path: Path, trust: Trust | None = None, *,
                expected_protocol_sha256: str | None = None,
                attestations: tuple[Attestation, ...] = (),
                reproducers: tuple[Ed25519PublicKey, ...] = (),
                require_bit_identical: bool = False) -> Outcome:
    """Run every check on the bundle at `path`, and on each reproduction attestation given (counted
    only when signed by one of `reproducers`; only a bit-identical one when `require_bit_identical`).
    Raises InputError when it cannot be read at all."""
    trust = trust or Trust()
    start = time.perf_counter()
    path = Path(path)
    if extract.is_archive(path):
        with tempfile.TemporaryDirectory(prefix="verify-") as tmp:
            prelude: list[Check] = []
            tree = None
            try:
                detail = extract.extract_archive(path, Path(tmp))
                root = extract.find_bag_root(Path(tmp))
                tree = read_tree(root)
                prelude.append(Check("archive.safe", "archive extracts safely", "pass", detail))
            except Failed as exc:
                prelude.append(Check("archive.safe", "archive extracts safely", "fail", str(exc)))
            result = verify_tree(tree, trust, expected_protocol_sha256=expected_protocol_sha256,
                                 prelude=prelude, attestations=attestations, reproducers=reproducers,
                                 require_bit_identical=require_bit_identical)
        kind = "archive"
    else:
        prelude = []
        tree = None
        try:
            tree = read_tree(path)
        except Failed as exc:
            prelude.append(Check("bag.layout", "only tag files and data/, no links", "fail",
                                 str(exc)))
        result = verify_tree(tree, trust, expected_protocol_sha256=expected_protocol_sha256,
                             prelude=prelude, attestations=attestations, reproducers=reproducers,
                                 require_bit_identical=require_bit_identical)
        kind = "folder"
    return Outcome(str(path), kind, trust, result.checks, exit_code(result.checks),
                   time.perf_counter() - start, result.signer_fingerprint, result.notes,
                   result.assurance)
