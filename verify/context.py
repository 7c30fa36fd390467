"""What a check reads: the bag, the trust anchor, and what earlier checks established.

Every check is a function of one Context. A check that parses a document stores it here on
success (a fact it provides, verify/facts.py); a later check that needs it asks through `need`,
`bag`, `doc`, `table` or `sha`, which raise Missing when the part it asks for was not established.
Each accessor serves one fact, and a check may ask only for the facts its table entry declares it
needs (`declared`): an undeclared read is a programming error, never a skip."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from bundle import layout
from bundle.dsse import Envelope
from verify.parsed import PoolData
from verify.result import Failed, InputError, Missing, VerifyError
from verify.tree import BagTree

__all__ = ["POOL_NAMES", "Attestation", "Context", "Reading", "Trust", "check_threshold"]

METRIC_TOL: Final = 1e-9
"""Recomputed probabilities, metrics and gradients must agree with the bundle within this."""
REFIT_REL_TOL: Final = 1e-6
"""The re-fitted temperature must agree with the bundle's within this relative difference."""

POOL_NAMES: Final = ("calibration", "audit")
"""The pools with predictions, in report order."""

T = TypeVar("T")


@dataclass
class Trust:
    """What the user trusts: public keys (`key`, then `more_keys`, each with where it came from),
    a fingerprint, or nothing; `threshold` distinct trusted keys must have signed."""

    key: Ed25519PublicKey | None = None
    fingerprint: str | None = None
    source: str = ""
    more_keys: tuple[tuple[Ed25519PublicKey, str], ...] = ()
    threshold: int = 1

    def keys(self) -> list[tuple[Ed25519PublicKey, str]]:
        """Every trusted key with its source, `key` first."""
        first = [(self.key, self.source)] if self.key is not None else []
        return first + list(self.more_keys)


@dataclass(frozen=True)
class Attestation:
    """A reproduction attestation given with --reproduction: where it came from and its exact bytes."""

    source: str
    data: bytes


@dataclass(frozen=True)
class Reading:
    """How the input was read before any check ran: from an archive or a folder, what the
    extraction reported, and the failure that left no bag to check (reported by archive.safe or
    bag.layout)."""

    archive: bool = False
    detail: str = ""
    failure: Failed | None = None


def check_threshold(threshold: int, key_sources: Sequence[str]) -> None:
    """The one rule for --threshold, for a bundle and a sweep alike: at least 1 and at most the
    number of distinct trusted keys given (`key_sources`: where each --trusted-key came from, a
    key given twice counting once), or 1 when none is given. InputError otherwise."""
    count = len(set(key_sources))
    if not 1 <= threshold <= max(count, 1):
        raise InputError(f"--threshold {threshold} cannot be met by {count} trusted key(s); pass a "
                         "threshold from 1 to the number of --trusted-key.")


class UndeclaredFact(VerifyError):
    """A check asked for a fact its table entry does not declare: the table is wrong."""


@dataclass
class Context:
    """What the checks found so far; a later check reads what an earlier one established."""

    tree: BagTree | None
    trust: Trust
    expected_protocol_sha256: str | None = None
    info: dict[str, str] | None = None
    manifest: dict[str, str] | None = None
    envelope: Envelope | None = None
    statement: dict[str, Any] | None = None
    signer_fingerprint: str | None = None
    docs: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, PoolData] = field(default_factory=dict)
    crate_graph: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    """What the bag holds outside the signed statement (extra tag files and labels, ignored
    statement fields, untrusted signatures): reported, never trusted, never a failure."""
    attestations: tuple[Attestation, ...] = ()
    reproducers: tuple[Ed25519PublicKey, ...] = ()
    """The keys whose reproduction attestations count (--trusted-reproducer)."""
    reproductions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Attestation number -> what its checks established so far (signer, statement, verdict)."""
    require_bit_identical: bool = False
    max_tolerance: float = layout.DEFAULT_LOGIT_TOLERANCE
    """--max-tolerance: the largest pre-registered logit tolerance the reader accepts."""
    bounds: dict[str, Any] | None = None
    """What an equivalent reproduction can move, once metrics.reproduction-bounds derived it."""
    """--require-bit-identical: only a `bit-identical` reproduction passes, not an `equivalent` one."""
    reading: Reading = field(default_factory=Reading)
    declared: frozenset[str] | None = None
    """The facts the running check's entry needs (set by the runner); None: no check is running
    under a table, so every fact may be read."""

    def need(self, value: T | None, fact: str, what: str | None = None) -> T:
        """`value`, part of the declared `fact` (`what` in words); Missing when it is absent."""
        self.require(fact)
        if value is None:
            raise Missing(f"not run: {what or fact} could not be established (see above)",
                          fact=fact, item=what)
        return value

    def require(self, fact: str) -> None:
        """UndeclaredFact unless the running check's entry declares that it needs `fact`."""
        if self.declared is not None and fact not in self.declared:
            raise UndeclaredFact(f"the check reads {fact}, which its table entry does not declare")

    def bag(self) -> BagTree:
        """The bag read into memory."""
        return self.need(self.tree, "bag.files", "the bag")

    def doc(self, path: str) -> Any:
        """The parsed, schema-valid JSON file at `path` (or "predicate", the signed one)."""
        fact = "signature.predicate" if path == "predicate" else "payload.documents"
        self.require(fact)
        if path not in self.docs:
            raise Missing(f"not run: {path} is missing, unreadable or invalid (see above)",
                          fact=fact, item=path)
        return self.docs[path]

    def table(self, pool: str) -> PoolData:
        """The parsed predictions of `pool`."""
        self.require("payload.predictions")
        if pool not in self.tables:
            path = f"data/predictions/{pool}.parquet"
            raise Missing(f"not run: {path} could not be read (see above)",
                          fact="payload.predictions", item=path)
        return self.tables[pool]

    def sha(self, path: str) -> str:
        """sha256 of the file at `path` in the bag; Missing when it is missing."""
        tree = self.bag()
        if path not in tree.files:
            raise Missing(f"not run: {path} is missing", fact="bag.files", item=path)
        return tree.sha256(path)

    def payload_sha(self, path: str) -> str | None:
        """sha256 of the payload file at `path`, or None when the bag has no such payload file."""
        tree = self.tree
        if tree is None or path not in tree.files or not path.startswith("data/"):
            return None
        return tree.sha256(path)

    def study_inputs(self) -> dict[str, str]:
        """sha256 of the files a study record names, by the key it names them under."""
        return {"predictions": self.sha(layout.AUDIT_PREDICTIONS),
                "audit": self.sha(layout.AUDIT_PREDICTIONS),
                "calibration": self.sha(layout.CALIBRATION_PREDICTIONS),
                "temperature": self.sha(layout.TEMPERATURE_JSON),
                "metrics": self.sha(layout.METRICS_JSON)}

    def file(self, path: str) -> bytes:
        """The bytes of `path`; Failed when the bag lacks it."""
        tree = self.bag()
        if path not in tree.files:
            raise Failed(f"{path} is missing.")
        return tree.files[path]

    def wants_section(self, section: str) -> bool:
        """Whether the optional protocol section (bootstrap, stability) applies: the protocol
        asks for it or the bag holds its record."""
        protocol = self.docs.get(layout.PROTOCOL_JSON)
        path = layout.PROTOCOL_SECTION_PAYLOAD[section]
        return (protocol is not None and section in protocol) or (
            self.tree is not None and path in self.tree.files)

    def optional_doc(self, path: str) -> Any:
        """The parsed optional record when the bag holds it or the protocol requires it, else
        None."""
        section = next(s for s, p in layout.PROTOCOL_SECTION_PAYLOAD.items() if p == path)
        return self.doc(path) if self.wants_section(section) else None
