"""`python -m bundle keygen --out DIR` and `python -m bundle archive BUNDLE [--out FILE]`.

Data goes to stdout; an error is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from bundle import keys
from bundle.archive import archive
from bundle.digests import sha256_file
from bundle.errors import BundleError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bundle", description="Keys and archives for calibration bundles."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    keygen = sub.add_parser(
        "keygen",
        help="create an Ed25519 signing key pair",
        description="Write DIR/signing-key.pem (mode 0600) and "
        "DIR/signing-key.pub.pem. If "
        f"{keys.PASSPHRASE_ENV} is set, the private key is "
        "encrypted with it.",
    )
    keygen.add_argument("--out", required=True, type=Path, metavar="DIR")
    arch = sub.add_parser(
        "archive",
        help="write a deterministic .tar.gz of a bundle",
        description="Archive a bundle directory; prints the path and sha256.",
    )
    arch.add_argument("bundle", type=Path, metavar="BUNDLE")
    arch.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        default=None,
        help="archive path (default: BUNDLE.tar.gz beside the bundle)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "keygen":
            passphrase = os.environ.get(keys.PASSPHRASE_ENV)
            fp = keys.generate(args.out, passphrase=passphrase.encode() if passphrase else None)
            print(f"fingerprint {fp}")
            print(f"private {args.out / keys.PRIVATE_KEY_NAME}")
            print(f"public {args.out / keys.PUBLIC_KEY_NAME}")
        else:
            path = archive(args.bundle, args.out)
            print(f"{path}")
            print(f"sha256 {sha256_file(path)}")
    except BundleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
