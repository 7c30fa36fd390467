"""A signed verification summary: what one verification established, as a SLSA Verification
Summary Attestation v1 (https://slsa.dev/verification_summary/v1) in an in-toto Statement v1, in a
DSSE envelope signed with Ed25519 (bundle.dsse.Envelope, the format's one envelope type).

`python -m verify BUNDLE --trusted-key K --attest KEY.pem --out vsa.json` writes one; `python -m
verify --vsa vsa.json --trusted-verifier PUB.pem [BUNDLE]` reads one back. A third party (a
journal, an archive) signs what it checked without re-signing the bundle: the subject is the
bundle's signed statement, so the summary follows the bundle whatever folder or archive holds it.
The schema is schemas/vsa.schema.json."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from bundle import layout
from bundle.canonical import dumps, loads_strict
from bundle.dsse import Envelope
from bundle.errors import CanonicalJSONError, EnvelopeError
from bundle.keys import fingerprint
from bundle.userfile import read_user_file
from verify import schemacheck
from verify.context import Attestation
from verify.result import EXIT_OK, Check, Failed, InputError

PREDICATE_TYPE: Final = "https://slsa.dev/verification_summary/v1"
VERIFIER_ID: Final = "https://calibration-runs.example/verifier/python"
POLICY_URI: Final = layout.PROTOCOL_JSON
PASSPHRASE_ENV: Final = "CALIBRATION_KEY_PASSPHRASE"
"""The environment variable holding an encrypted attesting key's passphrase (as for the job's key)."""

SIGNATURE: Final = "CALIBRATION_SIGNATURE_TRUSTED"
"""Signed by the trusted key(s) and intact: every tag file, manifest, digest and subject."""
RECOMPUTED: Final = "CALIBRATION_FIGURES_RECOMPUTED"
"""Every check passed: every figure recomputed from the stored logits by the verifier's own code."""
BIT_IDENTICAL: Final = "CALIBRATION_REEXECUTION_BIT_IDENTICAL"
"""An independent trusted reproducer re-ran the inference and got the logits bit for bit."""
EQUIVALENT: Final = "CALIBRATION_REEXECUTION_EQUIVALENT"
"""An independent trusted reproducer re-ran the inference within the protocol's tolerance."""

MAX_VSA_BYTES: Final = 1024 * 1024
"""A summary is about a kilobyte; a larger file is refused unread."""
_REPRODUCTION = re.compile(r"^reproduction\.([0-9]+)\.([a-z-]+)$")


@dataclass(frozen=True)
class Subject:
    """What a summary is about: a name and its sha256 (the bundle's signed statement, or the archive)."""

    name: str
    sha256: str


def verified_levels(checks: Sequence[Check], exit_code: int) -> list[str]:
    """The levels a verification established, from its report lines alone: none unless every check
    passed under a trusted signer; then the signature and the recomputation, and the re-execution
    level of the best independent reproduction (every one of its checks passed and it is not a
    self-reproduction; its `reproduced` detail starts with the level)."""
    if exit_code != EXIT_OK:
        return []
    levels = [SIGNATURE, RECOMPUTED]
    by_n: dict[str, dict[str, Check]] = {}
    for check in checks:
        m = _REPRODUCTION.match(check.id)
        if m:
            by_n.setdefault(m.group(1), {})[m.group(2)] = check
    reached = set()
    for parts in by_n.values():
        signed, done = parts.get("signed"), parts.get("reproduced")
        if (signed is None or done is None or "self-reproduction" in signed.detail
                or not all(c.ok for c in parts.values())):
            continue
        reached.add(done.detail.split(":", 1)[0])
    if "bit-identical" in reached:
        levels.append(BIT_IDENTICAL)
    elif "equivalent" in reached:
        levels.append(EQUIVALENT)
    return levels


def summary(subject: Subject, *, resource: str, protocol_sha256: str | None,
            inputs: Mapping[str, str], checks: Sequence[Check], exit_code: int,
            verifier_version: str, time_verified: str) -> dict[str, Any]:
    """The in-toto Statement of one verification: PASSED exactly when the exit code is 0 (every check
    passed and the signer is trusted). `inputs` maps each attestation the verifier read (the
    bundle's envelope, each reproduction) to its file's sha256; `protocol_sha256` is the policy
    (None when the protocol could not be read: the sha256 of nothing, and the result is FAILED)."""
    policy = protocol_sha256 or hashlib.sha256(b"").hexdigest()
    return {
        "_type": layout.STATEMENT_TYPE,
        "subject": [{"name": subject.name, "digest": {"sha256": subject.sha256}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "verifier": {"id": VERIFIER_ID, "version": {"calibration-verify": verifier_version}},
            "timeVerified": time_verified,
            "resourceUri": quote(resource, safe="/:.-_~"),
            "policy": {"uri": POLICY_URI, "digest": {"sha256": policy}},
            "inputAttestations": [{"uri": quote(uri, safe="/:.-_~#"), "digest": {"sha256": sha}}
                                  for uri, sha in inputs.items()],
            "verificationResult": "PASSED" if exit_code == EXIT_OK and protocol_sha256 else "FAILED",
            "verifiedLevels": verified_levels(checks, exit_code) if protocol_sha256 else [],
        },
    }


def now_utc() -> str:
    """The time of verification, to the second, as the predicate writes it; SOURCE_DATE_EPOCH, when
    set, stands for now so that a summary can be rebuilt byte for byte."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    seconds = int(epoch) if epoch.isdigit() else int(time.time())
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def load_attesting_key(path: str) -> Ed25519PrivateKey:
    """The attesting party's Ed25519 private key (PKCS#8 PEM, encrypted with the passphrase in
    CALIBRATION_KEY_PASSPHRASE when it is); InputError, one sentence, otherwise."""
    data = read_user_file(path, "attesting key", 64 * 1024, InputError)
    if data.count(b"-----BEGIN ") != 1:
        raise InputError(f"the attesting key {path} must hold exactly one PEM block; pass the Ed25519 "
                         "private key PEM (python -m job keygen writes one).")
    secret = os.environ.get(PASSPHRASE_ENV)
    try:
        key = serialization.load_pem_private_key(data, secret.encode() if secret else None)
    except TypeError as exc:
        raise InputError(f"the attesting key {path} is encrypted; set {PASSPHRASE_ENV} to its "
                         "passphrase.") from exc
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise InputError(f"the attesting key {path} is not a readable PEM private key (or the "
                         f"passphrase is wrong); pass the Ed25519 private key PEM.") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise InputError(f"the attesting key {path} is not an Ed25519 key; sign with an Ed25519 key "
                         "(python -m job keygen --out DIR).")
    return key


def sign(statement: dict[str, Any], key: Ed25519PrivateKey) -> bytes:
    """The DSSE envelope's canonical JSON bytes: the statement (schema-valid, canonical) signed by `key`."""
    schemacheck.validate(statement, "vsa", "the verification summary")
    return Envelope(dumps(statement), layout.PAYLOAD_TYPE).sign(key).to_json(source="vsa")


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all (a temporary file beside it, then renamed)."""
    folder = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def inputs_of(statement_sha256: str | None, attestations: Sequence[Attestation]) -> dict[str, str]:
    """uri -> sha256 of every attestation the verification read: the bundle's signed statement
    (provenance.intoto.json#payload, as the subject names it), then each reproduction attestation
    file under its name."""
    found = {layout.SIGNED_STATEMENT_SUBJECT: statement_sha256} if statement_sha256 else {}
    for att in attestations:
        found[Path(att.source).name] = hashlib.sha256(att.data).hexdigest()
    return found


@dataclass(frozen=True)
class Summary:
    """A summary read back: who signed it (fingerprint) and its statement."""

    signer: str
    statement: dict[str, Any]

    @property
    def predicate(self) -> dict[str, Any]:
        return dict(self.statement["predicate"])

    @property
    def subject(self) -> Subject:
        first = self.statement["subject"][0]
        return Subject(first["name"], first["digest"]["sha256"])


def read_summary(data: bytes, source: str, trusted: Sequence[Ed25519PublicKey]) -> Summary:
    """The summary in `data` when a trusted verifier key signed it: the envelope's exact shape, the
    signature over PAE of the exact payload, the statement strict and valid against
    schemas/vsa.schema.json. Failed, one sentence naming `source`, otherwise."""
    try:
        envelope = Envelope.from_json(data, source)
    except EnvelopeError as exc:
        raise Failed(f"{source} is not a verification summary: {exc}") from exc
    signer = next((fingerprint(k) for k in trusted if envelope.signature_by(k) is not None), None)
    if signer is None:
        raise Failed(f"{source} is not signed by any --trusted-verifier key (or was changed after "
                     "signing); pass the public key of the party that signed it.")
    try:
        statement = loads_strict(envelope.payload, source=f"{source}'s statement")
    except CanonicalJSONError as exc:
        raise Failed(str(exc)) from exc
    schemacheck.validate(statement, "vsa", f"{source}'s statement")
    return Summary(signer, statement)


def describe(found: Summary, bundle_statement_sha256: str | None = None) -> str:
    """The summary in lines for people; with a bundle's statement sha256, whether it is that bundle's."""
    p = found.predicate
    subject = found.subject
    lines = [
        f"{p['verificationResult']}: verified by {p['verifier']['id']} "
        + ", ".join(f"{k} {v}" for k, v in sorted(p['verifier']['version'].items()))
        + f" at {p['timeVerified']}",
        f"signed by {found.signer}",
        f"subject: {subject.name} sha256 {subject.sha256}",
        f"policy: {p['policy']['uri']} sha256 {p['policy']['digest']['sha256']}",
        f"levels: {', '.join(p['verifiedLevels']) or 'none'}",
    ]
    lines += [f"input: {a['uri']} sha256 {a['digest']['sha256']}" for a in p["inputAttestations"]]
    if bundle_statement_sha256 is not None:
        same = subject.name == layout.SIGNED_STATEMENT_SUBJECT and subject.sha256 == bundle_statement_sha256
        lines.append("the summary is about this bundle's signed statement" if same
                     else "the summary is NOT about this bundle: its subject is another statement")
    return "\n".join(lines) + "\n"
