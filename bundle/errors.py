"""The error types of the bundle format; every message is one sentence: what is wrong, what to do.

One root, BundleError; each error also carries `details`, the facts of the failure as JSON scalars
(a path, a JSON pointer, a reason code), so a program reading the failure gets fields, not prose.
The specific errors take their facts as typed keyword fields and pass them on as details, as
bagit's `ChecksumMismatch(path, algorithm, expected, found)` does."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

Detail = str | int | float | bool | None
"""A detail's value: a JSON scalar."""
CanonicalReason = Literal["key-not-str", "not-finite", "not-json-type", "not-unicode", "too-long", "not-utf8",
                          "byte-order-mark", "invalid-json", "not-strict", "too-deep", "not-canonical"]
"""Why a document is not the format's JSON (CanonicalJSONError.details["reason"])."""


def _rebuild(cls: type[DetailedError], message: str, details: dict[str, Detail]) -> DetailedError:
    """Unpickle any subclass without calling its constructor (whose fields may be keyword-only);
    a Ray worker's error crosses processes this way."""
    exc = cls.__new__(cls)
    DetailedError.__init__(exc, message, **details)
    return exc


class DetailedError(Exception):
    """What every package's error root is made of (BundleError here, job.errors.JobError,
    verify.result.VerifyError): a one-sentence message and `details`, its facts as JSON scalars."""

    details: Mapping[str, Detail]

    def __init__(self, message: str, /, **details: Detail) -> None:
        super().__init__(message)
        self.details = MappingProxyType(dict(details))

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), str(self), dict(self.details))


class BundleError(DetailedError):
    """A problem with a bundle, a key or an output path that the user can act on.

    `str(e)` is one sentence saying what is wrong (expected vs found where it helps) and what to do
    next; `e.details` holds the same facts as fields. Command-line entry points catch this class
    only and print the message.
    """


class CanonicalJSONError(BundleError):
    """A JSON document is not canonical, not strict JSON, or holds a value JSON cannot carry.

    `source` names the document (None: not named by the caller); `reason` is a CanonicalReason;
    `at` is the JSON path of the offending value where one is known."""

    def __init__(self, message: str, /, *, source: str | None, reason: CanonicalReason,
                 at: str | None = None) -> None:
        super().__init__(message, source=source, reason=reason, at=at)


class SchemaViolation(BundleError):
    """A document does not follow its JSON Schema: `document` names it, `schema` is the schema's
    name, `pointer` the JSON Pointer (RFC 6901) of the failing value, `reason` the validator's words."""

    def __init__(self, message: str, /, *, document: str, schema: str, pointer: str, reason: str) -> None:
        super().__init__(message, document=document, schema=schema, pointer=pointer, reason=reason)


class ProtocolOutOfBounds(BundleError):
    """A protocol asks for more than the format bounds (rows, classes, steps, resamples; see
    bundle.limits); the job refuses to run it and a verifier reports it as a failed check."""


class KeyFileError(BundleError):
    """A signing or public key file is missing, unreadable, locked or of the wrong type: `path` is
    the file, `reason` a short code (e.g. "missing", "encrypted", "wrong-type")."""

    def __init__(self, message: str, /, *, path: str, reason: str) -> None:
        super().__init__(message, path=path, reason=reason)


class OutputExistsError(BundleError):
    """The output path already exists; nothing is ever overwritten."""

    def __init__(self, message: str, /, *, path: str) -> None:
        super().__init__(message, path=path)


class EnvelopeError(BundleError):
    """A DSSE envelope is not of this format's shape (fields, payload type, base64, count).

    `field` names the part that is wrong ("payloadType", "signature 0", "payload", ...)."""

    def __init__(self, message: str, /, *, field: str, **more: Detail) -> None:
        super().__init__(message, field=field, **more)
        self.field = field


class SignatureThresholdError(EnvelopeError):
    """Fewer distinct trusted keys signed an envelope than the threshold requires."""

    def __init__(self, message: str, /, *, verified: int, threshold: int) -> None:
        super().__init__(message, field="signatures", verified=verified, threshold=threshold)
        self.verified = verified
        self.threshold = threshold


class CrateError(BundleError):
    """A crate's graph states something the format never writes (bundle.crate_graph).

    `ident` is the @id of the entity at fault."""

    def __init__(self, message: str, /, *, ident: str) -> None:
        super().__init__(message, ident=ident)
        self.ident = ident
