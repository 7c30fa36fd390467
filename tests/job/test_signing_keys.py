"""Ed25519 keys: keygen writes 0600 PKCS#8 PEM, fingerprints match, wrong keys are refused clearly."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle.errors import BundleError, KeyFileError
from job.publishing import signing_keys as keys
from verify.result import InputError
from verify.signature import load_trusted_key

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | Ed25519PrivateKey


def _pem(
    key: PrivateKey,
    fmt: serialization.PrivateFormat = serialization.PrivateFormat.PKCS8,
    password: bytes | None = None,
) -> bytes:
    enc = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, fmt, enc)


def test_keygen_writes_0600_private_and_public_with_fingerprint(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        fp = keys.generate(tmp_path / "k")
    finally:
        os.umask(old)
    private = tmp_path / "k" / keys.PRIVATE_KEY_NAME
    public = tmp_path / "k" / keys.PUBLIC_KEY_NAME
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    key = keys.load_private_key(private)
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert fp == hashlib.sha256(raw).hexdigest() == keys.fingerprint(key)
    assert keys.fingerprint(load_trusted_key(str(public))) == fp
    assert len(fp) == 64


def test_keygen_never_overwrites(tmp_path: Path) -> None:
    keys.generate(tmp_path)
    before = (tmp_path / keys.PRIVATE_KEY_NAME).read_bytes()
    with pytest.raises(KeyFileError, match="already exists"):
        keys.generate(tmp_path)
    assert (tmp_path / keys.PRIVATE_KEY_NAME).read_bytes() == before


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        (rsa.generate_private_key(65537, 2048), "an RSA key"),
        (ec.generate_private_key(ec.SECP256R1()), r"an EC \(secp256r1\) key"),
    ],
)
@pytest.mark.parametrize(
    "fmt", [serialization.PrivateFormat.PKCS8, serialization.PrivateFormat.TraditionalOpenSSL]
)
def test_other_key_types_refused(
    tmp_path: Path, key: PrivateKey, kind: str, fmt: serialization.PrivateFormat
) -> None:
    path = tmp_path / "other.pem"
    path.write_bytes(_pem(key, fmt))
    with pytest.raises(
        KeyFileError,
        match=rf"is {kind}; this project signs with Ed25519: create "
        r"one with `python -m job keygen --out DIR`",
    ):
        keys.load_private_key(path)
    pub = tmp_path / "other.pub.pem"
    pub.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    with pytest.raises(InputError, match="expected an Ed25519 public key"):
        load_trusted_key(str(pub))


def test_encrypted_key_needs_the_passphrase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "enc.pem"
    path.write_bytes(_pem(key, password=b"correct horse"))
    monkeypatch.delenv(keys.PASSPHRASE_ENV, raising=False)
    with pytest.raises(KeyFileError, match=f"is encrypted and {keys.PASSPHRASE_ENV} is not set"):
        keys.load_private_key(path)
    monkeypatch.setenv(keys.PASSPHRASE_ENV, "wrong")
    with pytest.raises(KeyFileError, match="could not be decrypted with the passphrase"):
        keys.load_private_key(path)
    monkeypatch.setenv(keys.PASSPHRASE_ENV, "correct horse")
    assert keys.fingerprint(keys.load_private_key(path)) == keys.fingerprint(key)
    monkeypatch.setenv("OTHER_VAR", "correct horse")
    monkeypatch.delenv(keys.PASSPHRASE_ENV)
    assert keys.fingerprint(
        keys.load_private_key(path, passphrase_env="OTHER_VAR")
    ) == keys.fingerprint(key)


def test_keygen_with_passphrase_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fp = keys.generate(tmp_path, passphrase=b"pw")
    assert b"ENCRYPTED" in (tmp_path / keys.PRIVATE_KEY_NAME).read_bytes()
    monkeypatch.setenv(keys.PASSPHRASE_ENV, "pw")
    assert keys.fingerprint(keys.load_private_key(tmp_path / keys.PRIVATE_KEY_NAME)) == fp


def test_passphrase_set_for_plain_key_is_harmless(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fp = keys.generate(tmp_path)
    monkeypatch.setenv(keys.PASSPHRASE_ENV, "unused")
    assert keys.fingerprint(keys.load_private_key(tmp_path / keys.PRIVATE_KEY_NAME)) == fp


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        (b"not a key at all", "is not a PEM private key"),
        (b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "not a readable PEM"),
        ("public", "holds a public key, not a private key"),
    ],
)
def test_unusable_private_key_files(
    tmp_path: Path, content: bytes | str | None, message: str
) -> None:
    path = tmp_path / "key.pem"
    if content == "public":
        keys.generate(tmp_path / "k")
        path = tmp_path / "k" / keys.PUBLIC_KEY_NAME
    elif isinstance(content, bytes):
        path.write_bytes(content)
    with pytest.raises(KeyFileError, match=message) as info:
        keys.load_private_key(path)
    assert isinstance(info.value, BundleError) and "\n" not in str(info.value)


def test_private_key_refused_as_trusted_key(tmp_path: Path) -> None:
    keys.generate(tmp_path)
    with pytest.raises(InputError, match="holds a private key"):
        load_trusted_key(str(tmp_path / keys.PRIVATE_KEY_NAME))
