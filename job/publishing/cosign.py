"""Add a signature to a sealed bundle's DSSE envelope (a co-author, a lab, an archive).

The payload, the statement and every other signature stay byte for byte; the envelope gains one
`{"keyid": fingerprint, "sig": ...}` over the same PAE. The envelope is a tag file, so every
`tagmanifest-<alg>.txt` that lists it is updated. Each file is replaced atomically (written
beside it, then renamed), envelope first: an interrupted cosign leaves a bag whose tag manifest
no longer matches, never a half-written file.

This is a writer: it reads only what it must to refuse a bad bundle (the envelope's shape and
its original signature by signer.pub.pem); the verifier, called through its API before any
signature is added, is the reader of the format.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from bundle import layout
from bundle.dsse import Envelope
from bundle.errors import BundleError, EnvelopeError
from bundle.keys import fingerprint
from bundle.schemas import validate
from job.publishing.archive import archive


def verified_before_cosigning(bag: Path, trusted_key: Path | None = None) -> str:
    """Run the verifier (verify.api.verify_path, in this process) on the bag and return its
    assurance line; BundleError when the bag does not verify.

    With `trusted_key` the bag must verify as signed by that key (exit status 0); without one it
    must be intact and carry a valid signature (0 or 3, "signer not established"). A co-signature
    vouches for the bundle's content, so a bag that fails any check is never co-signed."""
    # deferred: the verifier and its pyarrow and jsonschema stack load only when a cosign runs
    from verify import EXIT_OK, EXIT_UNTRUSTED, Trust, VerifyError, load_trusted_key, verify_path

    try:
        trust = Trust() if trusted_key is None else Trust(key=load_trusted_key(str(trusted_key)),
                                                          source=str(trusted_key))
    except VerifyError as exc:  # the trusted key file itself: the verifier's one sentence says why
        raise BundleError(str(exc), **exc.details) from exc
    try:
        outcome = verify_path(bag, trust)
    except VerifyError as exc:
        raise BundleError(f"{bag} does not verify ({str(exc).rstrip('.')}); nothing was co-signed: run "
                          "`python -m verify` on it and cosign only a bundle that verifies.") from exc
    allowed = (EXIT_OK,) if trusted_key is not None else (EXIT_OK, EXIT_UNTRUSTED)
    if outcome.exit_code not in allowed:
        failed = [c for c in outcome.checks if c.status == "fail"]
        first = f" ({failed[0].id}: {failed[0].detail})" if failed else " (the signer is not the trusted key)"
        raise BundleError(f"{bag} does not verify{first}; nothing was co-signed: run `python -m verify` "
                          "on it and cosign only a bundle that verifies.")
    return outcome.assurance or "verified"


def cosign(bag: Path, private_key: Ed25519PrivateKey) -> str:
    """Add `private_key`'s signature to the bag's envelope; return its fingerprint.

    Refuses (BundleError, one sentence) an unsigned or unreadable bag, an envelope whose
    original signature does not verify under signer.pub.pem, and a key that already signed."""
    bag = Path(bag)
    env_path = bag / layout.PROVENANCE
    envelope = _read_envelope(env_path)
    if envelope.signature_by(_signer_key(bag)) is None:
        raise BundleError(
            f"{env_path} holds no signature that verifies under {layout.SIGNER_PUB}; run "
            "`python -m verify` on the bundle and cosign only a bundle that verifies."
        )
    fp = fingerprint(private_key)
    if envelope.signature_by(private_key.public_key()) is not None:
        raise BundleError(f"The key {fp[:16]}… already signed {bag}; nothing to add.")
    signed = envelope.sign(private_key)
    validate(signed.to_dict(), "envelope", source=layout.PROVENANCE)
    data = signed.to_json()
    _replace(env_path, data)
    for name in sorted(os.listdir(bag)):
        match = layout.MANIFEST_FILE_RE.fullmatch(name)
        if match is not None and match.group(1):
            _update_tagmanifest(bag / name, match.group(2), data)
    return fp


def _read_envelope(path: Path) -> Envelope:
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise BundleError(
            f"{path} does not exist; cosign a signed bundle (sealed with --signing-key)."
        ) from exc
    except OSError as exc:
        raise BundleError(f"Cannot read {path} ({exc.strerror}); pass a bundle folder.") from exc
    try:
        envelope = Envelope.from_json(raw)
        validate(envelope.to_dict(), "envelope", source=layout.PROVENANCE)
    except EnvelopeError as exc:
        what = "a readable DSSE envelope" if exc.field == "json" else "a DSSE envelope of this format"
        raise BundleError(f"{path} is not {what} ({str(exc).rstrip('.')}); re-create the "
                          "bundle.") from exc
    except BundleError as exc:
        raise BundleError(f"{path} is not a DSSE envelope of this format ({exc}); re-create "
                          "the bundle.") from exc
    return envelope


def _signer_key(bag: Path) -> Ed25519PublicKey:
    path = bag / layout.SIGNER_PUB
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except OSError as exc:
        raise BundleError(f"Cannot read {path} ({exc.strerror}); cosign a signed bundle.") from exc
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise BundleError(f"{path} is not a PEM public key; re-create the bundle.") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise BundleError(f"{path} is not an Ed25519 public key; re-create the bundle.")
    return key


def _update_tagmanifest(path: Path, algorithm: str, envelope: bytes) -> None:
    """Rewrite the envelope's line of one tag manifest with its new digest; keep every other line
    (and the manifest's own separator) as it is. Lines are read with the format's definitions
    (bundle.layout.TAG_FILE_EOL, MANIFEST_LINE_RE), the ones the verifier reads them with."""
    try:
        digest = hashlib.new(algorithm.lower().replace("-", ""), envelope).hexdigest()
    except ValueError:
        return  # an algorithm this Python lacks: nothing can update it, a verifier notes it
    lines = layout.TAG_FILE_EOL.split(path.read_bytes().decode("utf-8"))
    if lines and lines[-1] == "":
        lines.pop()
    out = []
    for line in lines:
        match = layout.MANIFEST_LINE_RE.fullmatch(line)
        if match is not None and match.group(3) == layout.PROVENANCE:
            line = f"{digest}{match.group(2)}{layout.PROVENANCE}"
        out.append(line)
    _replace(path, "".join(f"{line}\n" for line in out).encode("utf-8"))


def _replace(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, flush it, and rename it over `path`."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def refresh_archive(bag: Path) -> Path | None:
    """After a cosign: write the default archive beside the bag (`NAME.tar.gz`, as `job archive`
    names it) again when one is there, since it holds the bag without the new signature; return
    its path, or None when there is none (an archive elsewhere is the caller's to remake). The
    new archive is written beside the old one and renamed over it, so no reader sees half of it."""
    old = Path(os.path.abspath(bag)).with_name(Path(os.path.abspath(bag)).name + ".tar.gz")
    if not old.is_file() or old.is_symlink():
        return None
    fresh = old.with_name(f".{old.name}.cosigned-{os.getpid()}")
    fresh.unlink(missing_ok=True)
    try:
        archive(bag, fresh)
        os.replace(fresh, old)
    except BaseException:
        fresh.unlink(missing_ok=True)
        raise
    return old
