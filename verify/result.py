"""What one check reports, how a check says it failed or could not run, and the exit codes of the
verifier.

Every error the verifier raises derives from VerifyError: one sentence for people (`str(e)`), and
`details`, the same facts as named JSON scalars for programs (the `--json` report carries them for
each failed check)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Literal

from bundle.errors import DetailedError

Status = Literal["pass", "fail", "skip"]
Scalar = str | int | float | bool | None

EXIT_OK: Final = 0
"""Every check passed and the signer is the trusted key."""
EXIT_FAILED: Final = 1
"""At least one check failed."""
EXIT_UNREADABLE: Final = 2
"""Usage error, or the input could not be read at all."""
EXIT_UNTRUSTED: Final = 3
"""Every check passed, but no trusted key was given: integrity holds, the signer is not established."""

SIGNER_CHECK: Final = "signature.signer-trusted"

_NO_DETAILS: Mapping[str, Scalar] = MappingProxyType({})


@dataclass(frozen=True)
class Check:
    """One line of the report: a stable id, a short title, the status and why; `details` are the
    failure's named facts (empty unless the check failed with some)."""

    id: str
    title: str
    status: Status
    detail: str
    details: Mapping[str, Scalar] = field(default_factory=lambda: _NO_DETAILS, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "pass"


class VerifyError(DetailedError):
    """The root of the verifier's errors: a one-sentence message and its facts as JSON scalars
    (bundle.errors.DetailedError, the shape every package's error root shares)."""


class Failed(VerifyError):
    """Raised by a check function: the check failed; the message says what and why."""


class DigestMismatch(Failed):
    """A file's digest is not the one recorded for it."""

    def __init__(self, message: str, /, *, path: str, algorithm: str, expected: str,
                 found: str) -> None:
        super().__init__(message, path=path, algorithm=algorithm, expected=expected, found=found)


class SchemaCheckFailed(Failed):
    """A check failed because a JSON document breaks the verifier's schema at `pointer` (RFC 6901) for
    `reason` (the writer's refusal of a document it is about to write is bundle.errors.SchemaViolation)."""

    def __init__(self, message: str, /, *, file: str, pointer: str, reason: str) -> None:
        super().__init__(message, file=file, pointer=pointer, reason=reason)


class ValueMismatch(Failed):
    """A recorded value differs from the one recomputed or required: `field` of `file`."""

    def __init__(self, message: str, /, *, file: str, field: str, expected: Scalar,
                 found: Scalar) -> None:
        super().__init__(message, file=file, field=field, expected=expected, found=found)


class SignatureInvalid(Failed):
    """No signature of the envelope verifies over the statement for the reason given."""

    def __init__(self, message: str, /, *, reason: str, keyid: str | None = None) -> None:
        super().__init__(message, reason=reason, keyid=keyid)


class UnsafeArchive(Failed):
    """An archive member that cannot be extracted safely: `member` and why."""

    def __init__(self, message: str, /, *, member: str, reason: str) -> None:
        super().__init__(message, member=member, reason=reason)


class Missing(VerifyError):
    """A check could not run: the fact it needs (verify.facts) was not established. The one way
    a check is skipped; `fact` names it, `item` the part of it that is absent, if any."""

    def __init__(self, message: str, /, *, fact: str, item: str | None = None) -> None:
        super().__init__(message, fact=fact, item=item)
        self.fact = fact
        self.item = item


class InputError(VerifyError):
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
