"""The one error root a user of the job sees, with the bundle format's shape (bundle/errors.py):
a one-sentence message, and `details`, the facts of the failure as JSON scalars."""

from __future__ import annotations

from bundle.errors import DetailedError


class JobError(DetailedError):
    """A problem the user can act on; the message is one sentence: what is wrong and what to do."""


class PinMismatch(JobError):
    """A resource file is not the pinned one: `path` is the local file, `field` "size" or "sha256",
    `expected` the pin, `found` what the file has (bagit's ChecksumMismatch, for resources)."""

    def __init__(self, message: str, /, *, path: str, field: str, expected: str | int, found: str | int) -> None:
        super().__init__(message, path=path, field=field, expected=expected, found=found)


class ProtocolBeyondLimits(JobError):
    """The protocol asks for more than the format's limits allow (verify.limits): `reason` says
    which size and by how much."""

    def __init__(self, message: str, /, *, reason: str) -> None:
        super().__init__(message, reason=reason)
