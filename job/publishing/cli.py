"""The publishing commands of `python -m job` (and `calibration-job`): `keygen --out DIR`,
`archive BUNDLE [--out FILE]` and `cosign BUNDLE --signing-key KEY.pem [--trusted-key PUB.pem]`
(which runs the verifier on the bundle first and refuses one that does not verify).

Data goes to stdout; an error is a BundleError, which job.cli prints as one line on stderr with
exit status 2. None of these imports torch."""

from __future__ import annotations

import argparse
import os
from typing import Any, Final

from bundle.digests import sha256_file
from bundle.errors import BundleError
from bundle.terminal import nonempty_path
from job.publishing import signing_keys as keys
from job.publishing.archive import archive
from job.publishing.cosign import cosign, refresh_archive, verified_before_cosigning

COMMANDS: Final = ("keygen", "archive", "cosign")


def add_commands(sub: Any) -> None:
    """Add keygen, archive and cosign to the subparsers `sub` (argparse's add_subparsers())."""
    keygen = sub.add_parser(
        "keygen",
        help="create an Ed25519 signing key pair",
        description="Write DIR/signing-key.pem (mode 0600) and "
        "DIR/signing-key.pub.pem. If "
        f"{keys.PASSPHRASE_ENV} is set, the private key is "
        "encrypted with it.",
    )
    keygen.add_argument("--out", required=True, type=nonempty_path, metavar="DIR")
    arch = sub.add_parser(
        "archive",
        help="write a deterministic .tar.gz of a bundle",
        description="Archive a bundle directory; prints the path and sha256.",
    )
    arch.add_argument("bundle", type=nonempty_path, metavar="BUNDLE")
    arch.add_argument(
        "--out",
        type=nonempty_path,
        metavar="FILE",
        default=None,
        help="archive path (default: BUNDLE.tar.gz beside the bundle)",
    )
    co = sub.add_parser(
        "cosign",
        help="add a signature to a signed bundle",
        description="Add KEY.pem's Ed25519 signature to BUNDLE's DSSE envelope (payload "
        "untouched) and update its tag manifests, in place; prints the new signer's fingerprint. "
        "An archive BUNDLE.tar.gz beside it is written again; one elsewhere is out of date. "
        f"An encrypted key is decrypted with {keys.PASSPHRASE_ENV}.",
    )
    co.add_argument("bundle", type=nonempty_path, metavar="BUNDLE")
    co.add_argument("--signing-key", required=True, type=nonempty_path, metavar="KEY.pem")
    co.add_argument("--trusted-key", type=nonempty_path, metavar="PUB.pem",
                    help="the original signer's public key: the bundle must verify as signed by it "
                         "(without it, the bundle must verify intact under the key it carries)")


def run(args: argparse.Namespace) -> int:
    """Run the publishing command `args.command`; return the exit status (BundleError propagates)."""
    if args.command == "keygen":
        passphrase = os.environ.get(keys.PASSPHRASE_ENV)
        fp = keys.generate(args.out, passphrase=passphrase.encode() if passphrase else None)
        print(f"fingerprint {fp}")
        print(f"private {args.out / keys.PRIVATE_KEY_NAME}")
        print(f"public {args.out / keys.PUBLIC_KEY_NAME}")
    elif args.command == "cosign":
        if not args.bundle.is_dir():
            raise BundleError(f"{args.bundle} is not a bundle folder; pass the bag folder "
                              "(extract an archive first).")
        key = keys.load_private_key(args.signing_key)
        verified_before_cosigning(args.bundle, args.trusted_key)
        fp = cosign(args.bundle, key)
        print(f"cosigned {args.bundle} fingerprint {fp}")
        rewritten = refresh_archive(args.bundle)
        if rewritten is not None:
            print(f"archive {rewritten} written again with the new signature, sha256 {sha256_file(rewritten)}")
        else:
            print(f"the folder changed in place: an archive made from it before no longer holds this "
                  f"signature; run `python -m job archive {args.bundle}` again")
    else:
        path = archive(args.bundle, args.out)
        print(f"{path}")
        print(f"sha256 {sha256_file(path)}")
    return 0
