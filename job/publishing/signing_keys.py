"""Ed25519 signing keys: generate a key pair, load the private key (with one-sentence errors).

Private keys are PKCS#8 PEM (optionally encrypted with a passphrase read from an environment
variable); public keys are written as SubjectPublicKeyInfo PEM, which only verify/ reads. The
fingerprint and the public PEM are the format's (bundle/keys.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, rsa, x448, x25519
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle.errors import KeyFileError
from bundle.keys import fingerprint, public_key_pem
from bundle.limits import KEY_FILE_BYTES
from bundle.userfile import read_user_file

PRIVATE_KEY_NAME = "signing-key.pem"
PUBLIC_KEY_NAME = "signing-key.pub.pem"
PASSPHRASE_ENV = "CALIBRATION_KEY_PASSPHRASE"
KEYGEN_HINT = "create one with `python -m job keygen --out DIR`"


def generate(out_dir: Path, *, passphrase: bytes | None = None) -> str:
    """Write out_dir/signing-key.pem (mode 0600, never overwritten) and signing-key.pub.pem.

    Returns the fingerprint. With a passphrase the private key is encrypted (PKCS#8).
    """
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KeyFileError(
            f"Cannot create key directory {out_dir} ({exc.strerror}); choose another --out.",
            path=str(out_dir), reason="unwritable"
        ) from exc
    private_path = out_dir / PRIVATE_KEY_NAME
    public_path = out_dir / PUBLIC_KEY_NAME
    for path in (private_path, public_path):
        if os.path.lexists(path):
            raise KeyFileError(
                f"{path} already exists and keys are never overwritten; choose "
                "another --out or move the old key away.", path=str(path), reason="exists"
            )
    key = Ed25519PrivateKey.generate()
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase)
        if passphrase
        else serialization.NoEncryption()
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    try:
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise KeyFileError(
            f"Cannot create {private_path} ({exc.strerror}); choose another --out.",
            path=str(private_path), reason="unwritable"
        ) from exc
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(pem)
        fh.flush()
        os.fsync(fh.fileno())
    fd = os.open(public_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(public_key_pem(key))
    return fingerprint(key)


def _kind(key: object) -> str:
    if isinstance(key, rsa.RSAPrivateKey | rsa.RSAPublicKey):
        return "an RSA key"
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        return f"an EC ({key.curve.name}) key"
    if isinstance(key, dsa.DSAPrivateKey | dsa.DSAPublicKey):
        return "a DSA key"
    if isinstance(key, ed448.Ed448PrivateKey | ed448.Ed448PublicKey):
        return "an Ed448 key"
    if isinstance(key, x25519.X25519PrivateKey | x448.X448PrivateKey):
        return "an X25519/X448 key-agreement key"
    return f"a {type(key).__name__.lstrip('_')} key"


def _wrong_type(path: Path, key: object) -> KeyFileError:
    return KeyFileError(f"{path} is {_kind(key)}; this project signs with Ed25519: {KEYGEN_HINT}.",
                        path=str(path), reason="wrong-type")


def _read(path: Path, what: str) -> bytes:
    """The key file's bytes: a regular file of at most KEY_FILE_BYTES (never a FIFO or device)."""
    data = read_user_file(path, f"{what} file", KEY_FILE_BYTES, KeyFileError)
    if data.count(b"-----BEGIN ") > 1:
        raise KeyFileError(f"The {what} file {path} holds more than one PEM block; pass a file "
                           "with exactly one key.", path=str(path), reason="several-pem-blocks")
    return data


def load_private_key(path: Path, passphrase_env: str = PASSPHRASE_ENV) -> Ed25519PrivateKey:
    """Load an Ed25519 private key (PKCS#8 PEM or OpenSSH); raise KeyFileError saying what to do.

    An encrypted key is decrypted with the passphrase in the environment variable passphrase_env.
    """
    path = Path(path)
    data = _read(path, "signing key")
    if b"-----BEGIN" not in data:
        raise KeyFileError(
            f"{path} is not a PEM private key; pass the {PRIVATE_KEY_NAME} "
            f"written by keygen, or {KEYGEN_HINT}.", path=str(path), reason="not-pem"
        )
    if b"PUBLIC KEY-----" in data and b"PRIVATE KEY-----" not in data:
        raise KeyFileError(
            f"{path} holds a public key, not a private key; pass the signing key "
            f"({PRIVATE_KEY_NAME}), not {PUBLIC_KEY_NAME}.", path=str(path), reason="public-not-private"
        )
    env_value = os.environ.get(passphrase_env)
    passphrase = env_value.encode("utf-8") if env_value else None
    openssh = b"BEGIN OPENSSH PRIVATE KEY" in data
    encrypted = b"ENCRYPTED" in data  # PKCS#8 "ENCRYPTED PRIVATE KEY" or "Proc-Type: 4,ENCRYPTED"
    loader = serialization.load_ssh_private_key if openssh else serialization.load_pem_private_key
    try:
        try:
            key: object = loader(data, passphrase if (encrypted or openssh) else None)
        except TypeError:  # a passphrase is needed, or one was given for a plain key
            if passphrase is None:
                raise KeyFileError(
                    f"{path} is encrypted and {passphrase_env} is not set; set it "
                    "to the key's passphrase.", path=str(path), reason="passphrase-missing"
                ) from None
            key = loader(data, None)
    except ValueError as exc:
        if passphrase is not None and (encrypted or openssh):
            raise KeyFileError(
                f"{path} could not be decrypted with the passphrase in "
                f"{passphrase_env}; set it to the right passphrase.", path=str(path), reason="passphrase-wrong"
            ) from exc
        raise KeyFileError(
            f"{path} is not a readable PEM private key (its key data does not "
            f"parse); pass the {PRIVATE_KEY_NAME} written by keygen, or "
            f"{KEYGEN_HINT}.", path=str(path), reason="unparsable"
        ) from exc
    except (TypeError, UnsupportedAlgorithm) as exc:
        raise KeyFileError(
            f"{path} uses a key type or cipher this build cannot read; {KEYGEN_HINT}.",
            path=str(path), reason="unsupported"
        ) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise _wrong_type(path, key)
    return key
