"""DSSE envelope, Ed25519 signature, in-toto Statement subjects, and the trusted signer.

The envelope is checked in a fixed order: payload type, signature over the exact signed bytes,
then the statement parsed from those bytes (never re-serialized before verification)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from bundle import layout
from bundle.canonical import loads_strict
from bundle.errors import CanonicalJSONError
from verify.result import Failed, InputError


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def fingerprint(key: Ed25519PublicKey) -> str:
    """sha256 hex of the raw 32-byte Ed25519 public key (the envelope's keyid)."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def load_public_key_pem(data: bytes, source: str) -> Ed25519PublicKey:
    """An Ed25519 SubjectPublicKeyInfo PEM; raise Failed otherwise."""
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise Failed(f"{source} is not a PEM public key ({exc}).") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise Failed(f"{source} holds a {type(key).__name__}, expected an Ed25519 public key.")
    return key


def load_trusted_key(path: str) -> Ed25519PublicKey:
    try:
        with open(path, "rb") as fh:
            data = fh.read(64 * 1024)
    except OSError as exc:
        raise InputError(f"the trusted key {path} cannot be read ({exc.strerror}); pass the "
                         "signer's public key PEM.") from exc
    try:
        return load_public_key_pem(data, f"the trusted key {path}")
    except Failed as exc:
        raise InputError(f"{exc} Pass the signer's Ed25519 public key PEM.") from exc


def parse_fingerprint(text: str) -> str:
    value = text.strip().lower().replace(":", "")
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise InputError(f"--trusted-fingerprint {text!r} is not 64 hex digits (the sha256 of "
                         "the raw Ed25519 public key).")
    return value


@dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    keyid: str
    sig: bytes


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise Failed(f"the envelope's {what} is not a string.")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise Failed(f"the envelope's {what} is not valid base64 ({exc}).") from exc


def parse_envelope(data: bytes) -> Envelope:
    try:
        env = loads_strict(data, source=layout.PROVENANCE)
    except CanonicalJSONError as exc:
        raise Failed(str(exc)) from exc
    if not isinstance(env, dict) or set(env) != {"payload", "payloadType", "signatures"}:
        keys = sorted(env) if isinstance(env, dict) else type(env).__name__
        raise Failed(f"{layout.PROVENANCE} has {keys}, expected a DSSE envelope with exactly "
                     "payload, payloadType and signatures.")
    if env["payloadType"] != layout.PAYLOAD_TYPE:
        raise Failed(f"payloadType is {env['payloadType']!r}, expected {layout.PAYLOAD_TYPE!r}.")
    sigs = env["signatures"]
    if not isinstance(sigs, list) or len(sigs) != 1:
        count = len(sigs) if isinstance(sigs, list) else "not a list"
        raise Failed(f"the envelope has {count} signatures, expected exactly one.")
    sig = sigs[0]
    if not isinstance(sig, dict) or set(sig) != {"keyid", "sig"} or not isinstance(
            sig["keyid"], str):
        raise Failed("the envelope's signature entry must hold exactly a keyid string and a sig.")
    return Envelope(env["payloadType"], _b64(env["payload"], "payload"), sig["keyid"],
                    _b64(sig["sig"], "signature"))


def verify_signature(env: Envelope, key: Ed25519PublicKey, source: str) -> None:
    if len(env.sig) != 64:
        raise Failed(f"the signature is {len(env.sig)} bytes, an Ed25519 signature is 64.")
    try:
        key.verify(env.sig, pae(env.payload_type, env.payload))
    except InvalidSignature as exc:
        raise Failed(f"the DSSE signature does not verify under {source} "
                     f"(fingerprint {fingerprint(key)[:16]}…); the statement or the signature "
                     "was changed after signing.") from exc


def parse_statement(payload: bytes) -> dict[str, Any]:
    try:
        statement = loads_strict(payload, source="The signed statement")
    except CanonicalJSONError as exc:
        raise Failed(str(exc)) from exc
    if not isinstance(statement, dict):
        raise Failed("the signed statement is not a JSON object.")
    expected = {"_type", "subject", "predicateType", "predicate"}
    if set(statement) != expected:
        raise Failed(f"the statement has keys {sorted(statement)}, expected {sorted(expected)}.")
    if statement["_type"] != layout.STATEMENT_TYPE:
        raise Failed(f"the statement _type is {statement['_type']!r}, "
                     f"expected {layout.STATEMENT_TYPE!r}.")
    if statement["predicateType"] != layout.PREDICATE_TYPE:
        raise Failed(f"the predicateType is {statement['predicateType']!r}, "
                     f"expected {layout.PREDICATE_TYPE!r}.")
    if not isinstance(statement["predicate"], dict):
        raise Failed("the statement's predicate is not a JSON object.")
    return statement


def subjects(statement: dict[str, Any]) -> dict[str, str]:
    """name -> sha256 of the statement's subjects; require the exact shape and sorted names."""
    subject = statement["subject"]
    if not isinstance(subject, list):
        raise Failed("the statement's subject is not a list.")
    out: dict[str, str] = {}
    names = []
    for i, item in enumerate(subject):
        if (not isinstance(item, dict) or set(item) != {"name", "digest"}
                or not isinstance(item["name"], str) or not isinstance(item["digest"], dict)
                or set(item["digest"]) != {"sha256"} or not isinstance(item["digest"]["sha256"], str)
                or not re.fullmatch(r"[0-9a-f]{64}", item["digest"]["sha256"])):
            raise Failed(f"statement subject {i} is not {{name, digest: {{sha256: hex}}}}.")
        if item["name"] in out:
            raise Failed(f"the statement names {item['name']!r} twice.")
        out[item["name"]] = item["digest"]["sha256"]
        names.append(item["name"])
    if names != sorted(names):
        raise Failed("the statement's subjects are not sorted by name.")
    return out


def compare_subjects(signed: dict[str, str], manifest: dict[str, str],
                     actual: dict[str, str]) -> str:
    missing = sorted(set(manifest) - set(signed))
    extra = sorted(set(signed) - set(manifest))
    if missing or extra:
        raise Failed(f"the signed subjects differ from manifest-sha256.txt: not signed {missing[:5]}"
                     f", signed but not in the bag {extra[:5]}.")
    for name in sorted(signed):
        if signed[name] != manifest[name] or signed[name] != actual.get(name):
            raise Failed(f"sha256 mismatch for {name!r}: the signed statement says "
                         f"{signed[name][:16]}…, the manifest {manifest[name][:16]}…, the file "
                         f"{actual.get(name, 'missing')[:16]}…; the payload was changed after "
                         "signing.")
    return f"{len(signed)} subjects, equal to the manifest and to the files"
