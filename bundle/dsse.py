"""DSSE v1 envelopes signed with Ed25519 (https://github.com/secure-systems-lab/dsse).

`Envelope` is the one reading and writing of the format's envelopes (a bundle's
provenance.intoto.json, reproduction attestations, a sweep's plan and index), shaped like
securesystemslib's `dsse.Envelope`: `from_dict`/`from_json`, `to_dict`/`to_json`, `pae`, `sign`,
`verify(keys, threshold)`. The writer, cosign, `reproduce` and the verifier all go through it, so
the signed bytes are decoded, and the signature checked, one way. It is a definition (a frozen
value and pure functions of it): the verifier may import it (tests/verify/test_structure.py).

Unlike securesystemslib, a keyid is only a hint and may repeat: every signature is tried against
every key, so two signatures naming one keyid are read as they are, never refused or merged.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from bundle import layout
from bundle.canonical import dumps, loads_strict
from bundle.errors import CanonicalJSONError, EnvelopeError, SignatureThresholdError
from bundle.keys import fingerprint

MAX_SIGNATURES: Final = 100
"""An envelope with more signatures than this is refused before any is tried."""
ED25519_SIGNATURE_BYTES: Final = 64


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(value: Any, what: str) -> bytes:
    """Standard base64 as this format writes it; anything else raises EnvelopeError. Only the
    canonical spelling is read (zero padding bits), so `to_dict` gives back the very strings."""
    if not isinstance(value, str):
        raise EnvelopeError(f"the envelope's {what} is not a string.", field=what)
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EnvelopeError(f"the envelope's {what} is not valid base64 ({exc}).",
                            field=what) from exc
    if _b64(raw) != value:
        raise EnvelopeError(f"the envelope's {what} is not canonical base64 (its padding bits are "
                            "not zero).", field=what)
    return raw


@dataclass(frozen=True)
class Signature:
    """One DSSE signature, base64-decoded; `keyid` is only a hint of which key made it."""

    keyid: str
    sig: bytes


@dataclass(frozen=True)
class Envelope:
    """A DSSE envelope, payload and signatures base64-decoded, signatures in envelope order."""

    payload: bytes
    payload_type: str
    signatures: tuple[Signature, ...] = ()

    @classmethod
    def from_dict(cls, data: Any, source: str = layout.PROVENANCE,
                  payload_type: str = layout.PAYLOAD_TYPE) -> Envelope:
        """The envelope's exact shape (DSSE v1 as FORMAT.md writes it): exactly payload,
        payloadType and signatures; the expected payload type; 1 to MAX_SIGNATURES signatures,
        each exactly a keyid string and a sig; canonical base64. EnvelopeError (one sentence,
        naming `source`) otherwise."""
        if not isinstance(data, dict) or set(data) != {"payload", "payloadType", "signatures"}:
            keys = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise EnvelopeError(f"{source} has {keys}, expected a DSSE envelope with exactly "
                                "payload, payloadType and signatures.", field="envelope")
        if data["payloadType"] != payload_type:
            raise EnvelopeError(f"payloadType is {data['payloadType']!r}, expected "
                                f"{payload_type!r}.", field="payloadType")
        sigs = data["signatures"]
        if not isinstance(sigs, list) or not 1 <= len(sigs) <= MAX_SIGNATURES:
            count = len(sigs) if isinstance(sigs, list) else "not a list"
            raise EnvelopeError(f"the envelope has {count} signatures, expected 1 to "
                                f"{MAX_SIGNATURES}.", field="signatures")
        parsed = []
        for i, sig in enumerate(sigs):
            if (not isinstance(sig, dict) or set(sig) != {"keyid", "sig"}
                    or not isinstance(sig["keyid"], str)):
                raise EnvelopeError(f"the envelope's signature {i} must hold exactly a keyid "
                                    "string and a sig.", field=f"signatures[{i}]")
            parsed.append(Signature(sig["keyid"], _unb64(sig["sig"], f"signature {i}")))
        return cls(_unb64(data["payload"], "payload"), data["payloadType"], tuple(parsed))

    @classmethod
    def from_json(cls, data: bytes, source: str = layout.PROVENANCE,
                  payload_type: str = layout.PAYLOAD_TYPE) -> Envelope:
        """`from_dict` of strict JSON (no duplicate keys, bounded size and depth)."""
        try:
            doc = loads_strict(data, source=source)
        except CanonicalJSONError as exc:
            raise EnvelopeError(str(exc), field="json") from exc
        return cls.from_dict(doc, source, payload_type)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; `Envelope.from_dict(d).to_dict() == d` for every envelope it reads."""
        return {
            "payload": _b64(self.payload),
            "payloadType": self.payload_type,
            "signatures": [{"keyid": s.keyid, "sig": _b64(s.sig)} for s in self.signatures],
        }

    def to_json(self, source: str = layout.PROVENANCE) -> bytes:
        """The canonical JSON bytes the format writes (bundle.canonical.dumps)."""
        return dumps(self.to_dict(), source=source)

    def pae(self) -> bytes:
        """The bytes every signature covers: PAE(payloadType, payload)."""
        return pae(self.payload_type, self.payload)

    def sign(self, private_key: Ed25519PrivateKey) -> Envelope:
        """A new envelope with one more signature, by `private_key`, keyid its fingerprint; the
        payload and the signatures already there stay as they are."""
        added = Signature(fingerprint(private_key), private_key.sign(self.pae()))
        return Envelope(self.payload, self.payload_type, (*self.signatures, added))

    def signature_by(self, key: Ed25519PublicKey) -> int | None:
        """The index of the first signature that verifies under `key`, or None. The keyid is only
        a hint: signatures naming the key's fingerprint are tried first, then every other one."""
        fp = fingerprint(key)
        message = self.pae()
        order = sorted(range(len(self.signatures)), key=lambda i: self.signatures[i].keyid != fp)
        for i in order:
            sig = self.signatures[i].sig
            if len(sig) != ED25519_SIGNATURE_BYTES:
                continue
            try:
                key.verify(sig, message)
            except InvalidSignature:
                continue
            return i
        return None

    def verify(self, keys: Iterable[Ed25519PublicKey], threshold: int) -> dict[str, Ed25519PublicKey]:
        """fingerprint -> key of every distinct key in `keys` that made a signature here.

        Raises SignatureThresholdError when fewer than `threshold` distinct keys did (its details
        say how many verified and how many were required); ValueError for a threshold below 1."""
        if threshold < 1:
            raise ValueError(f"threshold must be at least 1, not {threshold}")
        distinct: Mapping[str, Ed25519PublicKey] = {fingerprint(k): k for k in keys}
        signed = {fp: k for fp, k in distinct.items() if self.signature_by(k) is not None}
        if len(signed) < threshold:
            raise SignatureThresholdError(
                f"{len(signed)} of the {threshold} required keys signed the envelope; it was "
                "changed after signing or a required signature is missing.",
                verified=len(signed), threshold=threshold)
        return signed
