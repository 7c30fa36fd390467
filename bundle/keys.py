"""Ed25519 public keys as the format names them: the fingerprint and the PEM of signer.pub.pem.

The fingerprint, used as the DSSE keyid and in bag-info.txt, is the sha256 hex of the raw 32-byte
public key; a public key is written as SubjectPublicKeyInfo PEM. Generating and loading private
keys is the writer's (job/publishing/signing_keys.py)."""

from __future__ import annotations

import hashlib

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = ["fingerprint", "public_key_pem"]


def fingerprint(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """sha256 hex of the raw 32-byte Ed25519 public key."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def public_key_pem(key: Ed25519PublicKey | Ed25519PrivateKey) -> bytes:
    """SubjectPublicKeyInfo PEM of the (public half of the) key."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
