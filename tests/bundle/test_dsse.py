"""DSSE: the PAE vector; `bundle.dsse.Envelope` reads back exactly what it writes, verifies with a
threshold of distinct keys, refuses every malformed envelope; securesystemslib reads ours and we
read securesystemslib's."""

from __future__ import annotations

import base64
import copy
import dataclasses
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st

from bundle.canonical import dumps
from bundle.dsse import MAX_SIGNATURES, Envelope, Signature, pae
from bundle.errors import EnvelopeError, SignatureThresholdError
from bundle.keys import fingerprint
from bundle.layout import PAYLOAD_TYPE
from bundle.schemas import validate

KEY = Ed25519PrivateKey.generate()
OTHER = Ed25519PrivateKey.generate()
PAYLOAD = b'{"_type":"https://in-toto.io/Statement/v1"}\n'


def signed(*keys: Ed25519PrivateKey) -> Envelope:
    envelope = Envelope(PAYLOAD, PAYLOAD_TYPE)
    for key in keys or (KEY,):
        envelope = envelope.sign(key)
    return envelope


def verified_payload(doc: dict[str, Any], public_key: Ed25519PublicKey) -> bytes:
    """The signed payload bytes, read through the JSON form; an EnvelopeError when anything is wrong."""
    envelope = Envelope.from_json(dumps(doc))
    envelope.verify([public_key], 1)
    return envelope.payload


def test_pae_vector_from_the_spec() -> None:
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_counts_bytes_not_characters() -> None:
    assert pae("t\u00e9", b"") == b"DSSEv1 3 t\xc3\xa9 0 "
    assert Envelope(b"abc", "t\u00e9").pae() == b"DSSEv1 3 t\xc3\xa9 3 abc"


def test_round_trip_returns_the_exact_signed_bytes() -> None:
    doc = signed().to_dict()
    validate(doc, "envelope")
    assert doc["signatures"][0]["keyid"] == fingerprint(KEY)
    assert verified_payload(doc, KEY.public_key()) == PAYLOAD
    assert Envelope.from_dict(doc).to_dict() == doc
    assert Envelope.from_json(signed().to_json()) == signed()  # Ed25519 signs deterministically


def test_sign_appends_and_keeps_what_was_there() -> None:
    one = signed()
    two = one.sign(OTHER)
    assert two.signatures[0] == one.signatures[0] and two.payload == one.payload
    assert [s.keyid for s in two.signatures] == [fingerprint(KEY), fingerprint(OTHER)]
    assert len(one.signatures) == 1  # frozen: signing returns a new envelope


def test_verify_counts_distinct_keys_against_the_threshold() -> None:
    both = signed(KEY, OTHER)
    keys = [KEY.public_key(), OTHER.public_key(), KEY.public_key()]
    assert set(both.verify(keys, 2)) == {fingerprint(KEY), fingerprint(OTHER)}
    with pytest.raises(SignatureThresholdError) as caught:
        signed().verify(keys, 2)  # the same key twice is one key
    assert (caught.value.verified, caught.value.threshold) == (1, 2)
    with pytest.raises(ValueError, match="at least 1"):
        both.verify(keys, 0)


def test_a_keyid_is_only_a_hint_and_may_repeat() -> None:
    both = signed(KEY, OTHER)
    same_keyid = tuple(Signature(fingerprint(KEY), s.sig) for s in both.signatures)
    repeated = Envelope.from_dict(dataclasses.replace(both, signatures=same_keyid).to_dict())
    assert repeated.signature_by(OTHER.public_key()) == 1
    assert set(repeated.verify([KEY.public_key(), OTHER.public_key()], 2)) == {
        fingerprint(KEY), fingerprint(OTHER)}


def _flip(b64: str, index: int) -> str:
    raw = bytearray(base64.b64decode(b64))
    raw[index % len(raw)] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=0))
def test_any_flipped_payload_byte_is_rejected(index: int) -> None:
    doc = signed().to_dict()
    doc["payload"] = _flip(doc["payload"], index)
    with pytest.raises(SignatureThresholdError):
        verified_payload(doc, KEY.public_key())


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=0))
def test_any_flipped_signature_byte_is_rejected(index: int) -> None:
    doc = signed().to_dict()
    doc["signatures"][0]["sig"] = _flip(doc["signatures"][0]["sig"], index)
    with pytest.raises(SignatureThresholdError):
        verified_payload(doc, KEY.public_key())


def test_changed_payload_type_is_rejected() -> None:
    doc = signed().to_dict()
    doc["payloadType"] = "application/vnd.in-toto+jsonx"
    with pytest.raises(EnvelopeError, match=r"expected 'application/vnd.in-toto\+json'"):
        verified_payload(doc, KEY.public_key())
    retyped = dataclasses.replace(signed(), payload_type="application/vnd.in-toto+jsonx")
    assert retyped.signature_by(KEY.public_key()) is None  # PAE binds the type


def test_other_key_is_rejected() -> None:
    with pytest.raises(SignatureThresholdError, match="0 of the 1 required"):
        verified_payload(signed().to_dict(), OTHER.public_key())


def test_keyid_swapped_to_other_key_does_not_help() -> None:
    doc = signed().to_dict()
    doc["signatures"][0]["keyid"] = fingerprint(OTHER)
    with pytest.raises(SignatureThresholdError):
        verified_payload(doc, OTHER.public_key())


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda e: e.pop("signatures"), "envelope"),
        (lambda e: e.update(extra=1), "envelope"),
        (lambda e: e.update(signatures=[]), "signatures"),
        (lambda e: e.update(signatures=e["signatures"] * (MAX_SIGNATURES + 1)), "signatures"),
        (lambda e: e.update(payload="not base64!"), "payload"),
        (lambda e: e.update(payload="QR=="), "payload"),  # non-zero padding bits: not canonical
        (lambda e: e.update(payload=7), "payload"),
        (lambda e: e["signatures"][0].update(sig="%%%"), "signature 0"),
        (lambda e: e["signatures"][0].pop("keyid"), "signatures[0]"),
        (lambda e: e["signatures"][0].update(keyid=1), "signatures[0]"),
        (lambda e: e["signatures"][0].update(extra=""), "signatures[0]"),
    ],
)
def test_malformed_envelopes_are_refused_naming_the_part(mutate: Any, field: str) -> None:
    doc = signed().to_dict()
    mutate(doc)
    with pytest.raises(EnvelopeError) as caught:
        Envelope.from_dict(doc, source="att.json")
    assert caught.value.field == field
    assert "\n" not in str(caught.value)


def test_json_that_is_not_strict_is_refused() -> None:
    with pytest.raises(EnvelopeError, match="duplicate") as caught:
        Envelope.from_json(b'{"payload": "", "payload": ""}', source="att.json")
    assert caught.value.field == "json"


def test_securesystemslib_verifies_our_envelope() -> None:
    from securesystemslib.dsse import Envelope as SslibEnvelope
    from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]

    key = SSlibKey.from_crypto(KEY.public_key(), keyid=fingerprint(KEY))
    parsed = SslibEnvelope.from_dict(copy.deepcopy(signed().to_dict()))  # from_dict mutates its argument
    assert parsed.pae() == signed().pae() == pae(PAYLOAD_TYPE, PAYLOAD)
    accepted = parsed.verify([key], 1)
    assert list(accepted) == [fingerprint(KEY)]
    assert parsed.payload == PAYLOAD


def test_securesystemslib_rejects_tampered_envelope() -> None:
    from securesystemslib.dsse import Envelope as SslibEnvelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]

    doc = signed().to_dict()
    doc["payload"] = _flip(doc["payload"], 3)
    key = SSlibKey.from_crypto(KEY.public_key(), keyid=fingerprint(KEY))
    with pytest.raises(VerificationError):
        SslibEnvelope.from_dict(doc).verify([key], 1)


def test_we_verify_an_envelope_signed_by_securesystemslib() -> None:
    from securesystemslib.dsse import Envelope as SslibEnvelope
    from securesystemslib.signer import CryptoSigner, SSlibKey  # type: ignore[attr-defined]

    public = SSlibKey.from_crypto(KEY.public_key(), keyid=fingerprint(KEY))
    envelope = SslibEnvelope(PAYLOAD, PAYLOAD_TYPE, {})
    envelope.sign(CryptoSigner(KEY, public))
    assert verified_payload(envelope.to_dict(), KEY.public_key()) == PAYLOAD
    assert Envelope.from_dict(envelope.to_dict()) == signed()
