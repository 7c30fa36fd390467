"""DSSE envelope, Ed25519 signature, in-toto Statement subjects, and the trusted signer.

The envelope is checked in a fixed order: payload type, signature over the exact signed bytes,
then the statement parsed from those bytes (never re-serialized before verification)."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from bundle import layout
from bundle.canonical import loads_strict
from bundle.dsse import pae
from bundle.errors import CanonicalJSONError
from bundle.keys import fingerprint
from verify import schemacheck
from verify.context import Context
from verify.documents import Envelope
from verify.result import Failed, InputError, Skipped


def load_public_key_pem(data: bytes, source: str) -> Ed25519PublicKey:
    """An Ed25519 SubjectPublicKeyInfo PEM; raise Failed otherwise."""
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise Failed(f"{source} is not a PEM public key ({exc}).") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise Failed(f"{source} holds a {type(key).__name__}, expected an Ed25519 public key.")
    return key


def load_trusted_key(path: str) -> Ed25519PublicKey:
    """The user's trust anchor, an Ed25519 public key PEM file; InputError when unusable."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(64 * 1024)
    except OSError as exc:
        raise InputError(f"the trusted key {path} cannot be read ({exc.strerror}); pass the "
                         "signer's public key PEM.") from exc
    if b"PRIVATE KEY-----" in data:
        raise InputError(f"the trusted key {path} holds a private key; pass the signer's public "
                         "key PEM and keep the private key secret.")
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


# -- the checks (verify/checks.py lists them in order) ---------------------------------------

def envelope(ctx: Context) -> str:
    """The DSSE envelope's shape, payload type, one signature and the envelope schema."""
    tree = ctx.bag()
    if layout.PROVENANCE not in tree.files:
        raise Failed(f"the bundle is unsigned: {layout.PROVENANCE} is missing, so nothing "
                     "ties the payload to a signer.")
    ctx.envelope = parse_envelope(tree.files[layout.PROVENANCE])
    schemacheck.validate(loads_strict(tree.files[layout.PROVENANCE]), "envelope",
                         layout.PROVENANCE)
    return f"DSSE envelope, payloadType {ctx.envelope.payload_type}, one signature"


def valid(ctx: Context) -> str:
    """Ed25519 over PAE of the exact payload by signer.pub.pem, the key the bag names."""
    tree = ctx.bag()
    env = ctx.need(ctx.envelope, "the envelope")
    if layout.SIGNER_PUB not in tree.files:
        raise Failed(f"{layout.SIGNER_PUB} is missing; the signer's key is not in the bag.")
    key = load_public_key_pem(tree.files[layout.SIGNER_PUB], layout.SIGNER_PUB)
    fp = fingerprint(key)
    if env.keyid != fp:
        raise Failed(f"the envelope's keyid is {env.keyid[:16]}…, {layout.SIGNER_PUB} has "
                     f"fingerprint {fp[:16]}….")
    named = (ctx.info or {}).get(layout.INFO_SIGNER_FINGERPRINT)
    if named is not None and named != fp:
        raise Failed(f"bag-info.txt names signer {named[:16]}…, the signing key is "
                     f"{fp[:16]}….")
    verify_signature(env, key, layout.SIGNER_PUB)
    ctx.statement = parse_statement(env.payload)
    ctx.signer_fingerprint = fp
    return f"Ed25519 signature valid, signer fingerprint {fp}"


def signed_subjects(ctx: Context) -> str:
    """The signed subjects equal manifest-sha256.txt and the files."""
    statement = ctx.need(ctx.statement, "the signed statement")
    manifest = ctx.need(ctx.manifest, "manifest-sha256.txt")
    tree = ctx.bag()
    actual = {p: tree.sha256(p) for p in tree.payload()}
    return compare_subjects(subjects(statement), manifest, actual)


def trusted_signer(ctx: Context) -> str:
    """The signer is the trusted key or has the trusted fingerprint; skipped without either."""
    env = ctx.need(ctx.envelope, "the envelope")
    fp = ctx.need(ctx.signer_fingerprint, "a valid signature")
    if ctx.trust.key is not None:
        want = fingerprint(ctx.trust.key)
        if want != fp:
            raise Failed(f"signed by {fp[:16]}…, not by the trusted key {ctx.trust.source} "
                         f"({want[:16]}…); the bundle was re-signed by someone else.")
        verify_signature(env, ctx.trust.key, f"the trusted key {ctx.trust.source}")
        return f"signer is the trusted key {ctx.trust.source} ({want[:16]}…)"
    if ctx.trust.fingerprint is not None:
        if ctx.trust.fingerprint != fp:
            raise Failed(f"signed by {fp[:16]}…, not by the trusted fingerprint "
                         f"{ctx.trust.fingerprint[:16]}…; the bundle was re-signed by someone "
                         "else.")
        return f"signer has the trusted fingerprint {fp[:16]}…"
    raise Skipped(f"no trusted key given: the bundle is intact and signed by {fp[:16]}…, but "
                  "whose key that is is not established; pass --trusted-key PUB.pem or "
                  "--trusted-fingerprint HEX")
