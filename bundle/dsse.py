"""DSSE v1 envelopes signed with Ed25519 (https://github.com/secure-systems-lab/dsse).

The signature covers PAE(payloadType, payload). This module signs; verify/signature.py reads
and verifies, with PAE from here.
"""

from __future__ import annotations

import base64
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle.keys import fingerprint


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


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
