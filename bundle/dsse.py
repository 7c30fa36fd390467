"""DSSE v1 envelopes signed with Ed25519 (https://github.com/secure-systems-lab/dsse).

The signature covers PAE(payloadType, payload). Verification returns the exact payload bytes
that were signed; callers parse those bytes and never a re-serialization.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from bundle.errors import SignatureError
from bundle.keys import fingerprint


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise SignatureError(
            f"The envelope's {what} is not a base64 string; the file is damaged, "
            "so re-create the bundle."
        )
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise SignatureError(
            f"The envelope's {what} is not valid standard base64; the file is "
            "damaged, so re-create the bundle."
        ) from exc


def sign_envelope(
    payload: bytes, payload_type: str, private_key: Ed25519PrivateKey
) -> dict[str, Any]:
    """A DSSE envelope with one Ed25519 signature whose keyid is the key's fingerprint."""
    signature = private_key.sign(pae(payload_type, payload))
    return {
        "payload": _b64(payload),
        "payloadType": payload_type,
        "signatures": [{"keyid": fingerprint(private_key), "sig": _b64(signature)}],
    }


def envelope_payload(envelope: Any) -> tuple[str, bytes]:
    """(payloadType, payload bytes) of a structurally valid envelope, without checking signatures."""
    if not isinstance(envelope, dict) or set(envelope) != {"payload", "payloadType", "signatures"}:
        found = sorted(envelope) if isinstance(envelope, dict) else type(envelope).__name__
        raise SignatureError(
            f"The envelope must have exactly payload, payloadType and signatures "
            f"but has {found}; re-create the bundle."
        )
    payload_type = envelope["payloadType"]
    if not isinstance(payload_type, str):
        raise SignatureError("The envelope's payloadType is not a string; re-create the bundle.")
    return payload_type, _unb64(envelope["payload"], "payload")


def verify_envelope(
    envelope: Any, public_key: Ed25519PublicKey, *, payload_type: str | None = None
) -> bytes:
    """Return the signed payload bytes if a signature by `public_key` verifies; else SignatureError.

    Only signatures whose keyid is the key's fingerprint are tried. When `payload_type` is given
    the envelope must declare exactly that type.
    """
    found_type, payload = envelope_payload(envelope)
    if payload_type is not None and found_type != payload_type:
        raise SignatureError(
            f"The envelope's payloadType is {found_type!r}, expected "
            f"{payload_type!r}; this is not a bundle provenance envelope."
        )
    signatures = envelope["signatures"]
    if not isinstance(signatures, list) or not signatures:
        raise SignatureError("The envelope has no signatures; sign the bundle with a key.")
    expected = fingerprint(public_key)
    keyids = []
    for entry in signatures:
        if not isinstance(entry, dict) or not isinstance(entry.get("keyid"), str):
            raise SignatureError("An envelope signature has no keyid string; re-create the bundle.")
        keyids.append(entry["keyid"])
        if entry["keyid"] != expected:
            continue
        signature = _unb64(entry.get("sig"), "signature")
        try:
            public_key.verify(signature, pae(found_type, payload))
        except InvalidSignature:
            raise SignatureError(
                f"The signature by key {expected} does not verify: the statement "
                "was changed after signing; do not trust this bundle."
            ) from None
        return payload
    raise SignatureError(
        f"The envelope is signed by {', '.join(keyids)}, not by the expected key "
        f"{expected}; pass the signer's public key or do not trust the bundle."
    )
