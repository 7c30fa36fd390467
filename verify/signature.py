"""DSSE envelope, Ed25519 signature, in-toto Statement subjects, and the trusted signer.

The envelope is checked in a fixed order: payload type, signature over the exact signed bytes,
then the statement parsed from those bytes (never re-serialized before verification)."""

from __future__ import annotations

import hashlib
import re
from typing import Any, Final

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from bundle import layout
from bundle.canonical import loads_strict
from bundle.dsse import Envelope
from bundle.errors import CanonicalJSONError, EnvelopeError
from bundle.keys import fingerprint
from bundle.userfile import read_user_file
from verify import bag, schemacheck
from verify.context import Context
from verify.result import (
    DigestMismatch,
    Failed,
    InputError,
    Missing,
    SignatureInvalid,
    ValueMismatch,
)


def load_public_key_pem(data: bytes, source: str) -> Ed25519PublicKey:
    """An Ed25519 SubjectPublicKeyInfo PEM, alone in its file; raise Failed otherwise."""
    if data.count(b"-----BEGIN ") > 1:
        raise Failed(f"{source} holds more than one PEM block; a key file holds exactly one key.")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise Failed(f"{source} is not a PEM public key ({exc}).") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise Failed(f"{source} holds a {type(key).__name__}, expected an Ed25519 public key.")
    return key


MAX_TRUSTED_KEY_BYTES: Final = 64 * 1024
"""A public key PEM is a few hundred bytes; a larger file is refused unread."""


def load_trusted_key(path: str) -> Ed25519PublicKey:
    """The user's trust anchor, an Ed25519 public key PEM file; InputError when unusable."""
    # Read like any file named on the command line: a FIFO or a device is refused, never waited on.
    data = read_user_file(path, "trusted key", MAX_TRUSTED_KEY_BYTES, InputError)
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


def parse_envelope(data: bytes, source: str = layout.PROVENANCE) -> Envelope:
    """The envelope's exact shape (bundle.dsse.Envelope.from_json: DSSE v1 as FORMAT.md writes
    it, one or more signatures); Failed, naming `source`, otherwise."""
    try:
        return Envelope.from_json(data, source)
    except EnvelopeError as exc:
        raise Failed(str(exc)) from exc


def parse_statement(payload: bytes) -> tuple[dict[str, Any], dict[str, dict[str, str]], list[str]]:
    """(the statement as this verifier reads it, name -> digest set of every subject, notes).

    in-toto Statement v1: consumers ignore unknown fields, so fields other than _type, subject,
    predicateType and predicate (and, in a subject, other than name and digest) are dropped and
    noted; a subject's digest set may hold other algorithms, sha256 is required. The predicate
    is ours and stays strict (its schema runs on it unchanged)."""
    try:
        statement = loads_strict(payload, source="The signed statement")
    except CanonicalJSONError as exc:
        raise Failed(str(exc)) from exc
    if not isinstance(statement, dict):
        raise Failed("the signed statement is not a JSON object.")
    known = ("_type", "subject", "predicateType", "predicate")
    missing = [k for k in known if k not in statement]
    if missing:
        raise Failed(f"the statement lacks {missing}; an in-toto Statement v1 holds {list(known)}.")
    notes = [f"the signed statement's field {k!r} is not one this verifier reads; ignored, as "
             "in-toto Statement v1 requires" for k in sorted(set(statement) - set(known))]
    if statement["_type"] != layout.STATEMENT_TYPE:
        raise Failed(f"the statement _type is {statement['_type']!r}, "
                     f"expected {layout.STATEMENT_TYPE!r}.")
    if statement["predicateType"] != layout.PREDICATE_TYPE:
        raise Failed(f"the predicateType is {statement['predicateType']!r}, "
                     f"expected {layout.PREDICATE_TYPE!r}.")
    if not isinstance(statement["predicate"], dict):
        raise Failed("the statement's predicate is not a JSON object.")
    digests, subject_notes = subject_digests(statement["subject"])
    read = {k: statement[k] for k in known}
    read["subject"] = [{"name": name, "digest": {"sha256": d["sha256"]}}
                       for name, d in digests.items()]
    return read, digests, notes + subject_notes


def subject_digests(subject: Any) -> tuple[dict[str, dict[str, str]], list[str]]:
    """name -> {algorithm: lowercase hex} of every subject, and notes on ignored fields."""
    if not isinstance(subject, list):
        raise Failed("the statement's subject is not a list.")
    out: dict[str, dict[str, str]] = {}
    notes: list[str] = []
    for i, item in enumerate(subject):
        digest = item.get("digest") if isinstance(item, dict) else None
        if (not isinstance(item, dict) or not isinstance(item.get("name"), str)
                or not isinstance(digest, dict)
                or not all(isinstance(a, str) and isinstance(v, str) and re.fullmatch(
                    r"[0-9a-fA-F]+", v) for a, v in digest.items())
                or not re.fullmatch(r"[0-9a-f]{64}", str(digest.get("sha256")))):
            raise Failed(f"statement subject {i} is not {{name, digest: {{sha256: lowercase hex, "
                         "...}}}.")
        name = item["name"]
        if name in out:
            raise Failed(f"the statement names {name!r} twice.")
        notes += [f"the signed subject {name!r} has field {k!r}, which this verifier does not "
                  "read; ignored" for k in sorted(set(item) - {"name", "digest"})]
        out[name] = {alg: value.lower() for alg, value in digest.items()}
    return out, notes


def compare_subjects(signed: dict[str, str], manifest: dict[str, str],
                     actual: dict[str, str]) -> str:
    missing = sorted(set(manifest) - set(signed))
    extra = sorted(set(signed) - set(manifest))
    if missing or extra:
        raise Failed(f"the signed subjects differ from manifest-sha256.txt: not signed {missing[:5]}"
                     f", signed but not in the bag {extra[:5]}.")
    for name in sorted(signed):
        if signed[name] != manifest[name] or signed[name] != actual.get(name):
            raise DigestMismatch(f"sha256 mismatch for {name!r}: the signed statement says "
                                 f"{signed[name][:16]}…, the manifest {manifest[name][:16]}…, the "
                                 f"file {actual.get(name, 'missing')[:16]}…; the payload was changed "
                                 "after signing.", path=name, algorithm="sha256",
                                 expected=signed[name], found=actual.get(name, "missing"))
    return f"{len(signed)} subjects, equal to the manifest and to the files"


def load_signer_key(data: bytes, notes: list[str]) -> Ed25519PublicKey:
    """signer.pub.pem's key; text around the PEM block is not signed, so it is only noted."""
    begin = data.find(b"-----BEGIN")
    if begin > 0 and data[:begin].strip():
        text = data[:begin].decode("utf-8", "replace").strip()
        notes.append(f"{layout.SIGNER_PUB} holds text before -----BEGIN, which nothing signs: "
                     f"{text[:200]!r}")
    return load_public_key_pem(data, layout.SIGNER_PUB)


# -- the checks (verify/checks.py lists them in order) ---------------------------------------

def envelope(ctx: Context) -> str:
    """The DSSE envelope's shape, payload type, signatures and the envelope schema."""
    tree = ctx.bag()
    if layout.PROVENANCE not in tree.files:
        raise Failed(f"the bundle is unsigned: {layout.PROVENANCE} is missing, so nothing "
                     "ties the payload to a signer.")
    ctx.envelope = parse_envelope(tree.files[layout.PROVENANCE])
    # to_dict gives back the very document read (canonical base64 only), so it is what the schema sees
    schemacheck.validate(ctx.envelope.to_dict(), "envelope", layout.PROVENANCE)
    count = len(ctx.envelope.signatures)
    return (f"DSSE envelope, payloadType {ctx.envelope.payload_type}, {count} signature"
            + ("s" if count > 1 else ""))


def valid(ctx: Context) -> str:
    """Ed25519 over PAE of the exact payload by signer.pub.pem, the key the bag names."""
    tree = ctx.bag()
    env = ctx.need(ctx.envelope, "signature.envelope")
    if layout.SIGNER_PUB not in tree.files:
        raise Failed(f"{layout.SIGNER_PUB} is missing; the signer's key is not in the bag.")
    key = load_signer_key(tree.files[layout.SIGNER_PUB], ctx.notes)
    fp = fingerprint(key)
    named = (ctx.info or {}).get(layout.INFO_SIGNER_FINGERPRINT)
    if named is not None and named != fp:
        raise ValueMismatch(f"bag-info.txt names signer {named[:16]}…, the signing key is "
                            f"{fp[:16]}….", file="bag-info.txt",
                            field=layout.INFO_SIGNER_FINGERPRINT, expected=fp, found=named)
    index = env.signature_by(key)
    if index is None:
        keyids = [s.keyid[:16] + "…" for s in env.signatures]
        raise SignatureInvalid(f"the DSSE signature does not verify under {layout.SIGNER_PUB} "
                               f"(fingerprint {fp[:16]}…; the envelope's keyids {keyids[:5]}); the "
                               "statement or the signature was changed after signing, or the key "
                               "was replaced.", reason="no signature verifies under the bag's key",
                               keyid=fp)
    if env.signatures[index].keyid != fp:
        ctx.notes.append(f"signature {index} names keyid {env.signatures[index].keyid[:16]}…, but "
                         f"was made by {layout.SIGNER_PUB} ({fp[:16]}…); a keyid is only a hint")
    statement, _, notes = parse_statement(env.payload)
    ctx.notes.extend(notes)
    ctx.statement = statement
    ctx.signer_fingerprint = fp
    return f"Ed25519 signature valid, signer fingerprint {fp}"


def signed_subjects(ctx: Context) -> str:
    """The signed subjects equal manifest-sha256.txt and the files, in every digest hashlib has."""
    env = ctx.need(ctx.envelope, "signature.envelope")
    ctx.need(ctx.statement, "signature.statement")
    manifest = ctx.need(ctx.manifest, "bag.manifest")
    tree = ctx.bag()
    _, digests, _ = parse_statement(env.payload)
    actual = {p: tree.sha256(p) for p in tree.payload()}
    detail = compare_subjects({n: d["sha256"] for n, d in digests.items()}, manifest, actual)
    others = 0
    for name, digest in sorted(digests.items()):
        for algorithm, value in sorted(digest.items()):
            if algorithm == "sha256":
                continue
            hname = bag.hashlib_name(algorithm)
            if hname is None:
                ctx.notes.append(f"the signed subject {name!r} has a {algorithm!r} digest, which "
                                 "this Python cannot compute; not checked")
                continue
            found = hashlib.new(hname, tree.files[name]).hexdigest()
            if found != value:
                raise DigestMismatch(f"{algorithm} mismatch for {name!r}: the signed statement "
                                     f"says {value[:16]}…, the file hashes to {found[:16]}…; the "
                                     "payload was changed after signing.", path=name,
                                     algorithm=algorithm, expected=value, found=found)
            others += 1
    return detail + (f", and {others} other signed digests" if others else "")


def trusted_signer(ctx: Context) -> str:
    """At least the threshold of distinct trusted keys signed; skipped without a trusted key."""
    env = ctx.need(ctx.envelope, "signature.envelope")
    fp = ctx.need(ctx.signer_fingerprint, "signature.statement")
    ctx.require("input.trust")
    keys = ctx.trust.keys()
    trusted: dict[str, str] = {}
    by_trusted: set[int] = set()
    for key, source in keys:
        index = env.signature_by(key)
        if index is not None:
            trusted.setdefault(fingerprint(key), source)
            by_trusted.add(index)
    _note_untrusted(ctx, env, fp, by_trusted)
    if keys:
        want = ctx.trust.threshold
        if len(trusted) >= want:
            names = ", ".join(f"{src} ({kfp[:16]}…)" for kfp, src in trusted.items())
            return f"signed by {len(trusted)} trusted key(s), {want} required: {names}"
        sources = ", ".join(src for _, src in keys)
        raise SignatureInvalid(f"signed by {fp[:16]}…, not by the trusted key(s) {sources}: "
                               f"{len(trusted)} of the {want} required trusted signatures verify; "
                               "the bundle was re-signed by someone else, or a required signature "
                               "is missing.", reason=f"{len(trusted)} of {want} trusted signatures",
                               keyid=fp)
    if ctx.trust.fingerprint is not None:
        if ctx.trust.fingerprint != fp:
            raise SignatureInvalid(f"signed by {fp[:16]}…, not by the trusted fingerprint "
                                   f"{ctx.trust.fingerprint[:16]}…; the bundle was re-signed by "
                                   "someone else.", reason="not the trusted fingerprint", keyid=fp)
        return f"signer has the trusted fingerprint {fp[:16]}…"
    raise Missing(f"no trusted key given: the bundle is intact and signed by {fp[:16]}…, but "
                  "whose key that is is not established; pass --trusted-key PUB.pem or "
                  "--trusted-fingerprint HEX", fact="input.trust", item="a trusted key")


def _note_untrusted(ctx: Context, env: Envelope, fp: str, by_trusted: set[int]) -> None:
    """A note for every signature no trusted key made: it counts for nothing."""
    tree = ctx.bag()
    signer = load_public_key_pem(tree.files[layout.SIGNER_PUB], layout.SIGNER_PUB)
    own = env.signature_by(signer)
    for i, sig in enumerate(env.signatures):
        if i in by_trusted:
            continue
        if i == own:
            if ctx.trust.keys():
                ctx.notes.append(f"signed also by {fp} ({layout.SIGNER_PUB}), not trusted")
        else:
            ctx.notes.append(f"signed also by keyid {sig.keyid[:64]}, not trusted (no trusted key "
                             "verifies that signature)")
