"""What one check reports, how a check says it failed, and the exit codes of the verifier."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Status = Literal["pass", "fail", "skip"]

EXIT_OK: Final = 0
"""Every check passed and the signer is the trusted key."""
EXIT_FAILED: Final = 1
"""At least one check failed."""
EXIT_UNREADABLE: Final = 2
"""Usage error, or the input could not be read at all."""
EXIT_UNTRUSTED: Final = 3
"""Every check passed, but no trusted key was given: integrity holds, the signer is not established."""

SIGNER_CHECK: Final = "signature.signer-trusted"


@dataclass(frozen=True)
class Check:
    """One line of the report: a stable id, a short title, the status and why."""

    id: str
    title: str
    status: Status
    detail: str

    @property
    def ok(self) -> bool:
        return self.status == "pass"


class Failed(Exception):
    """Raised by a check function: the check failed; the message says what and why."""


class Skipped(Exception):
    """Raised by a check function: it could not run because something it needs failed earlier."""


class InputError(Exception):
    """The command line or the input cannot be used at all (exit code 2)."""


def exit_code(checks: list[Check]) -> int:
    """0 all pass with a trusted signer, 1 anything failed, 3 all pass but the signer is unknown."""
    if any(c.status == "fail" for c in checks):
        return EXIT_FAILED
    skipped = [c for c in checks if c.status == "skip"]
    if not skipped:
        return EXIT_OK
    if [c.id for c in skipped] == [SIGNER_CHECK]:
        return EXIT_UNTRUSTED
    return EXIT_FAILED  # a check that could not run is never a pass
