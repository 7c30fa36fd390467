"""The one error root a user of the job sees, with the bundle format's shape (bundle/errors.py):
a one-sentence message, and `details`, the facts of the failure as JSON scalars."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from bundle.errors import Detail


def _rebuild(cls: type[JobError], message: str, details: dict[str, Detail]) -> JobError:
    """Unpickle any subclass (a Ray worker's error crosses processes) without its constructor."""
    exc = cls.__new__(cls)
    JobError.__init__(exc, message, **details)
    return exc


class JobError(Exception):
    """A problem the user can act on; the message is one sentence: what is wrong and what to do."""

    details: Mapping[str, Detail]

    def __init__(self, message: str, /, **details: Detail) -> None:
        super().__init__(message)
        self.details = MappingProxyType(dict(details))

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), str(self), dict(self.details))


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
