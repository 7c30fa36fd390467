"""The error types of the bundle format; every message is one sentence: what is wrong, what to do."""

from __future__ import annotations


class BundleError(Exception):
    """A problem with a bundle, a key or an output path that the user can act on.

    The message is one sentence saying what is wrong (expected vs found where it helps) and what
    to do next. Command-line entry points catch this class only and print the message.
    """


class CanonicalJSONError(BundleError):
    """A JSON document is not canonical, not strict JSON, or holds a value JSON cannot carry."""


class SchemaViolation(BundleError):
    """A document does not follow its JSON Schema."""


class KeyFileError(BundleError):
    """A signing or public key file is missing, unreadable, locked or of the wrong type."""


class OutputExistsError(BundleError):
    """The output path already exists; nothing is ever overwritten."""


class EnvelopeError(BundleError):
    """A DSSE envelope is not of this format's shape (fields, payload type, base64, count).

    `field` names the part that is wrong ("payloadType", "signature 0", "payload", ...)."""

    def __init__(self, message: str, /, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class SignatureThresholdError(EnvelopeError):
    """Fewer distinct trusted keys signed an envelope than the threshold requires."""

    def __init__(self, message: str, /, *, verified: int, threshold: int) -> None:
        super().__init__(message, field="signatures")
        self.verified = verified
        self.threshold = threshold


class CrateError(BundleError):
    """A crate's graph states something the format never writes (bundle.crate_graph).

    `ident` is the @id of the entity at fault."""

    def __init__(self, message: str, /, *, ident: str) -> None:
        super().__init__(message)
        self.ident = ident
