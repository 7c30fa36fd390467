"""The named facts a verification establishes, and which of them it has established so far.

A check table entry (verify/checks.py) declares the facts it `needs` and the facts it
`provides`. A fact is provided once an entry that provides it passes; an entry that fails, or
is skipped, withholds what it would have provided, and remembers the failed check at the root.
An entry is skipped, never run, when a fact it needs is absent, and its reason names the fact and
that failed check: this is the one way a check is skipped.

Three kinds of facts: those the entries provide; those the verification starts with (what the
user gave on the command line and what this verifier can do: INPUTS); and two the runner keeps
(RUNNER: whether authentication, or anything at all, has failed so far)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from verify.result import Missing

AUTHENTICATED: Final = "bundle.authenticated"
CLEAN: Final = "verdict.clean"

FACTS: Final[dict[str, str]] = {
    # provided by entries
    "bag.files": "the bag could not be read",
    "bag.manifest": "manifest-sha256.txt does not match the payload",
    "bag.info": "bag-info.txt could not be read",
    "signature.envelope": "the DSSE envelope could not be read",
    "signature.statement": "no valid signature yields the signed statement",
    "signature.predicate": "the signed statement is not valid against the verifier's schema",
    "payload.documents": "no JSON record of the payload is valid",
    "payload.predictions": "no predictions table could be read",
    "crate.graph": "ro-crate-metadata.json could not be read as a graph",
    "reproduction.statements": "no reproduction attestation is signed by a trusted reproducer",
    # what the verification starts with
    "input.trust": "the trust anchor is not known",
    "input.pre-registered-protocol": "no pre-registered protocol was given",
    "verifier.renderer": "this verifier cannot render the bundle's views",
    # kept by the runner
    AUTHENTICATED: "the bundle is not authenticated",
    CLEAN: "the verdict is already a rejection; drawn again only for a bundle whose other checks "
           "all pass",
}
"""Every fact by name, with the words for its absence (the start of a skipped check's reason)."""

INPUTS: Final = frozenset({"input.trust", "input.pre-registered-protocol", "verifier.renderer"})
"""Provided before the first check: what was given and what this verifier is; a part of one that
is absent (no trusted key, another renderer) is reported by the check that reads it."""
RUNNER: Final = frozenset({AUTHENTICATED, CLEAN})
"""Provided at the start and withheld by the runner: AUTHENTICATED at the first failed
authentication check, CLEAN at the first failed check."""


@dataclass
class Facts:
    """Which facts are established so far, and for those withheld, the failed check at the root."""

    provided: set[str] = field(default_factory=lambda: set(INPUTS | RUNNER))
    withheld: dict[str, str] = field(default_factory=dict)

    def provide(self, names: tuple[str, ...]) -> None:
        self.provided.update(names)

    def withhold(self, names: tuple[str, ...], root: str | None) -> None:
        """Mark `names` as not established because of the failed check `root` (None: unknown);
        a fact another entry established stays established (an expansion's other instances)."""
        for name in names:
            if name not in self.provided and root is not None:
                self.withheld.setdefault(name, root)

    def revoke(self, name: str, root: str) -> None:
        """Withdraw a fact the runner keeps (RUNNER) at the failure of `root`."""
        self.provided.discard(name)
        self.withheld.setdefault(name, root)

    def absent(self, needs: tuple[str, ...]) -> Missing | None:
        """The first of `needs` not established, as the Missing that skips its check, or None."""
        for name in needs:
            if name in self.provided:
                continue
            root = self.withheld.get(name)
            return Missing(f"skipped: {FACTS[name]}" + (f" ({root} failed)" if root else ""),
                           fact=name)
        return None
