"""DSSE: the PAE vector; envelopes signed here are read back by the verifier's reader (verify/)
and by securesystemslib; tampering is rejected; we accept securesystemslib's envelopes."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st

from bundle.canonical import dumps
from bundle.dsse import pae, sign_envelope
from bundle.keys import fingerprint
from bundle.layout import PAYLOAD_TYPE
from bundle.schemas import validate
from verify import signature
from verify.parsed import Envelope
from verify.result import Failed

KEY = Ed25519PrivateKey.generate()
PAYLOAD = b'{"_type":"https://in-toto.io/Statement/v1"}\n'


def verified_payload(envelope: dict[str, Any], public_key: Ed25519PublicKey) -> bytes:
    """The signed payload bytes, read by the verifier; Failed when anything is wrong."""
    parsed = signature.parse_envelope(dumps(envelope))
    signature.verify_signature(parsed, public_key, "the key")
    return parsed.payload


def test_pae_vector_from_the_spec() -> None:
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_counts_bytes_not_characters() -> None:
    assert pae("t\u00e9", b"") == b"DSSEv1 3 t\xc3\xa9 0 "


def test_round_trip_returns_the_exact_signed_bytes() -> None:
    envelope = sign_envelope(PAYLOAD, PAYLOAD_TYPE, KEY)
    validate(envelope, "envelope")
    assert envelope["signatures"][0]["keyid"] == fingerprint(KEY)
    assert verified_payload(envelope, KEY.public_key()) == PAYLOAD


def _flip(b64: str, index: int) -> str:
    raw = bytearray(base64.b64decode(b64))
    raw[index % len(raw)] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=0))
def test_any_flipped_payload_byte_is_rejected(index: int) -> None:
    envelope = sign_envelope(PAYLOAD, PAYLOAD_TYPE, KEY)
    envelope["payload"] = _flip(envelope["payload"], index)
    with pytest.raises(Failed, match="does not verify"):
        verified_payload(envelope, KEY.public_key())


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=0))
def test_any_flipped_signature_byte_is_rejected(index: int) -> None:
    envelope = sign_envelope(PAYLOAD, PAYLOAD_TYPE, KEY)
    envelope["signatures"][0]["sig"] = _flip(envelope["signatures"][0]["sig"], index)
    with pytest.raises(Failed, match="does not verify"):
        verified_payload(envelope, KEY.public_key())


def test_changed_payload_type_is_rejected() -> None:
    envelope = sign_envelope(PAYLOAD, PAYLOAD_TYPE, KEY)
    envelope["payloadType"] = "application/vnd.in-toto+jsonx"
    with pytest.raises(Failed, match=r"expected 'application/vnd.in-toto\+json'"):
        verified_payload(envelope, KEY.public_key())
    signed = signature.parse_envelope(dumps(sign_envelope(PAYLOAD, PAYLOAD_TYPE, KEY)))
    retyped = Envelope("application/vnd.in-toto+jsonx", signed.payload, signed.signatures)
    with pytest.raises(Failed, match="does not verify"):  # PAE binds the type
        signature.verify_signature(retyped, KEY.public_key(), "the key")


def test_other_key_is_rejected_naming_it() -> None:
    envelope = sign_envelope(PAYLOAD, PAYLOAD_TYPE, KEY)
    other = Ed25519PrivateKey.generate().public_key()
    with pytest.raises(Failed, match=f"does not verify .*fingerprint {fingerprint(other)[:16]}"):
        verified_payload(envelope, other)


def test_keyid_swapped_to_other_key_does_not_help() -> None:
    other = Ed25519PrivateKey.generate()
    envelope = sign_envelope(PAYLOAD, PAYLOAD_TYPE, KEY)
    envelope["signatures"][0]["keyid"] = fingerprint(other)
    with pytest.raises(Failed, match="does not verify"):
        verified_payload(envelope, other.public_key())


@pytest.mark.parametrize(
    "mutate",
    [
        lambda e: e.pop("signatures"),
        lambda e: e.update(extra=1),
        lambda e: e.update(signatures=[]),
        lambda e: e.update(payload="not base64!"),
        lambda e: e["signatures"][0].update(sig="%%%"),
        lambda e: e["signatures"][0].pop("keyid"),
    ],
)
def test_malformed_envelopes_are_rejected(mutate: Any) -> None:
    envelope = sign_envelope(PAYLOAD, PAYLOAD_TYPE, KEY)
    mutate(envelope)
    with pytest.raises(Failed):
        verified_payload(envelope, KEY.public_key())


def test_securesystemslib_verifies_our_envelope() -> None:
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]

    envelope = sign_envelope(PAYLOAD, PAYLOAD_TYPE, KEY)
    key = SSlibKey.from_crypto(KEY.public_key(), keyid=fingerprint(KEY))
    parsed = Envelope.from_dict(copy.deepcopy(envelope))  # from_dict mutates its argument
    assert parsed.pae() == pae(PAYLOAD_TYPE, PAYLOAD)
    accepted = parsed.verify([key], 1)
    assert list(accepted) == [fingerprint(KEY)]
    assert parsed.payload == PAYLOAD


def test_securesystemslib_rejects_tampered_envelope() -> None:
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]

    envelope = sign_envelope(PAYLOAD, PAYLOAD_TYPE, KEY)
    envelope["payload"] = _flip(envelope["payload"], 3)
    key = SSlibKey.from_crypto(KEY.public_key(), keyid=fingerprint(KEY))
    with pytest.raises(VerificationError):
        Envelope.from_dict(envelope).verify([key], 1)


def test_we_verify_an_envelope_signed_by_securesystemslib() -> None:
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner, SSlibKey  # type: ignore[attr-defined]

    public = SSlibKey.from_crypto(KEY.public_key(), keyid=fingerprint(KEY))
    envelope = Envelope(PAYLOAD, PAYLOAD_TYPE, {})
    envelope.sign(CryptoSigner(KEY, public))
    assert verified_payload(envelope.to_dict(), KEY.public_key()) == PAYLOAD
