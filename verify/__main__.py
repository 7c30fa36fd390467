"""`python -m verify BUNDLE [--trusted-key PUB.pem ... [--threshold N] | --trusted-fingerprint HEX]
[--json REPORT] [--reproduction ATT.json --trusted-reproducer PUB.pem]... [--attest KEY.pem --out VSA.json]`;
`python -m verify --vsa VSA.json --trusted-verifier PUB.pem [BUNDLE]` reads a verification summary back.

Exit codes: 0 verified with a trusted signer; 1 a check failed; 2 usage or unreadable input;
3 every check passed but no trusted key was given (integrity holds, signer not established)."""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle import layout, limits
from bundle.terminal import nonempty_path, tolerant_stdout
from bundle.userfile import describe, read_user_file
from verify import reproduction, signature, sweep_verification, verdict_output, vsa
from verify.api import Outcome, verify_path
from verify.context import Attestation, Trust, check_threshold
from verify.release import __version__
from verify.result import EXIT_FAILED, EXIT_OK, EXIT_UNREADABLE, Failed, InputError


def _say(message: str) -> None:
    """One line on stderr. A name from the command line may hold a newline or bytes that are not
    UTF-8: non-printable characters are escaped, so the error stays one line the terminal shows."""
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in message)
    print(f"verify: {text}", file=sys.stderr)


def _out(text: str) -> None:
    """Write the report table to stdout, as much as can be written (bundle.terminal.tolerant_stdout):
    a closed stdout or a reader that has gone costs the report, never the exit code (which carries
    the verdict)."""
    print(text, end="", flush=True)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # One line, like every other error: the usage spans several and is one --help away.
        _say(f"{message}; see python -m verify --help.")
        raise SystemExit(EXIT_UNREADABLE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m verify",
                description="Verify a calibration bundle without torch: BagIt structure and "
                            "hashes, DSSE signature and signer, schemas, and every figure "
                            "recomputed from the stored logits.",
                epilog="exit codes: 0 verified with a trusted signer; 1 a check failed; 2 usage "
                       "or unreadable input; 3 every check passed but no trusted key was given")
    p.add_argument("bundle", type=nonempty_path, nargs="?",
                   help="the bag folder, the bundle .tar.gz archive, or a sweep directory (python -m job sweep)")
    trust = p.add_mutually_exclusive_group()
    trust.add_argument("--trusted-key", metavar="PUB.pem", action="append",
                       help="a trusted signer's Ed25519 public key (SubjectPublicKeyInfo PEM); "
                            "repeat it to trust several keys")
    trust.add_argument("--trusted-fingerprint", metavar="HEX",
                       help="sha256 hex of the signer's raw 32-byte Ed25519 public key")
    p.add_argument("--threshold", metavar="N", type=int, default=1,
                   help="how many distinct trusted keys must have signed (default 1)")
    p.add_argument("--protocol", metavar="provenance.json", type=nonempty_path,
                   help="also require data/protocol.json to be byte-identical to this "
                        "pre-registered protocol")
    p.add_argument("--json", metavar="REPORT.json", type=nonempty_path,
                   help="also write the report as JSON (verify/report.schema.json)")
    p.add_argument("--reproduction", metavar="ATT.json", action="append", default=[],
                   help="a reproduction attestation (python -m job reproduce) to check; repeatable")
    p.add_argument("--trusted-reproducer", metavar="PUB.pem", action="append", default=[],
                   help="an Ed25519 public key whose reproduction attestations count; repeatable")
    p.add_argument("--require-bit-identical", action="store_true",
                   help="count a reproduction only when its logits are the bundle's bit for bit, not "
                        "merely equivalent within the protocol's tolerance")
    p.add_argument("--attest", metavar="KEY.pem", type=nonempty_path,
                   help="sign a verification summary (SLSA VSA v1) of this verification with this Ed25519 "
                        "private key; needs --out and a trusted key")
    p.add_argument("--out", metavar="VSA.json", type=nonempty_path, help="where --attest writes the summary")
    p.add_argument("--vsa", metavar="VSA.json", type=nonempty_path,
                   help="read a verification summary back (with --trusted-verifier; BUNDLE, if given, must "
                        "be its subject)")
    p.add_argument("--trusted-verifier", metavar="PUB.pem", action="append", default=[],
                   help="an Ed25519 public key whose verification summaries count; repeatable")
    p.add_argument("--max-tolerance", metavar="X", type=_tolerance, default=layout.DEFAULT_LOGIT_TOLERANCE,
                   help="the largest pre-registered reproduction logit tolerance you accept (default: the "
                        f"format's, {layout.DEFAULT_LOGIT_TOLERANCE:g}); a bundle whose protocol sets a larger "
                        "one fails reproduction.tolerance")
    return p


def _tolerance(text: str) -> float:
    """--max-tolerance: a positive finite number."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"--max-tolerance must be a positive number, not {text[:40]!r}")
    return value


def _write_report(path: Path, text: str) -> None:
    """Write the JSON report to `path`. Opened non-blocking so that a FIFO nobody reads fails
    (ENXIO) instead of hanging; a name that is not UTF-8 (from the bag or the command line) is a
    lone surrogate inside a JSON string, written as its JSON escape (backslashreplace)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NONBLOCK", 0), 0o666)
    os.set_blocking(fd, True)
    with open(fd, "w", encoding="utf-8", errors="backslashreplace") as out:
        out.write(text)


def _verify_sweep(args: argparse.Namespace) -> int:
    """A sweep directory: every planned member verified under the --trusted-key(s), one table."""
    if args.attest is not None:
        raise InputError("--attest summarises one bundle; pass a member folder under members/ for it.")
    if not args.trusted_key:
        raise InputError(f"{args.bundle} is a sweep; pass --trusted-key PUB.pem, the key that signed its plan.")
    if args.protocol is not None or args.json is not None:
        raise InputError("--protocol and --json apply to one bundle; verify a member folder under members/ "
                         "for them.")
    keys = [(signature.load_trusted_key(path), path) for path in args.trusted_key]
    check_threshold(args.threshold, args.trusted_key)
    attestations = tuple(reproduction.load_attestation(a) for a in args.reproduction)
    reproducers = tuple(signature.load_trusted_key(k) for k in args.trusted_reproducer)
    outcome = sweep_verification.verify_sweep(args.bundle, keys, attestations=attestations, reproducers=reproducers,
                                 threshold=args.threshold, require_bit_identical=args.require_bit_identical,
                                 max_tolerance=args.max_tolerance)
    _out(sweep_verification.sweep_table(outcome))
    return outcome.exit_code


def _usage(args: argparse.Namespace) -> None:
    """The combinations of options that mean nothing, refused before anything is read."""
    if args.vsa is None and args.bundle is None:
        raise InputError("the bundle argument is required: pass the bag folder or .tar.gz to verify, or --vsa "
                         "VSA.json to read a verification summary.")
    if args.vsa is not None and (args.attest is not None or not args.trusted_verifier):
        raise InputError("--vsa reads a summary back and needs --trusted-verifier PUB.pem (and no --attest); "
                         "pass the public key of the party that signed it.")
    if (args.attest is None) != (args.out is None):
        raise InputError("--attest KEY.pem and --out VSA.json go together; pass both to sign a summary.")
    if args.attest is not None and not (args.trusted_key or args.trusted_fingerprint):
        raise InputError("--attest signs what was established under a trusted key; pass --trusted-key PUB.pem "
                         "(or --trusted-fingerprint).")


def _read_vsa(args: argparse.Namespace) -> int:
    """--vsa: the summary, signed by a trusted verifier, printed; with BUNDLE, whether it is that
    bundle's. Exit 0 only for a PASSED summary about the bundle given (or no bundle given)."""
    keys = [signature.load_trusted_key(str(k)) for k in args.trusted_verifier]
    data = read_user_file(args.vsa, "verification summary", vsa.MAX_VSA_BYTES, InputError)
    try:
        found = vsa.read_summary(data, str(args.vsa), keys)
    except Failed as exc:
        _out(f"REJECTED: {exc}\n")
        return EXIT_FAILED
    statement = None
    if args.bundle is not None:
        statement = verify_path(args.bundle).digests.get("statement")
        if statement is None:
            raise InputError(f"{args.bundle}'s signed statement cannot be read; pass the bundle the summary "
                             "is about.")
    _out(vsa.describe(found, statement))
    about = statement is None or (found.subject.sha256 == statement)
    return EXIT_OK if about and found.predicate["verificationResult"] == "PASSED" else EXIT_FAILED


def _attest(args: argparse.Namespace, outcome: Outcome, attestations: tuple[Attestation, ...],
            key: Ed25519PrivateKey) -> None:
    """--attest: sign the summary of `outcome` and write it to --out, whole or not at all."""
    digests = outcome.digests
    if "statement" in digests:
        subject = vsa.Subject(layout.SIGNED_STATEMENT_SUBJECT, digests["statement"])
    elif outcome.kind == "archive":
        data = args.bundle.read_bytes()
        subject = vsa.Subject(args.bundle.name, hashlib.sha256(data).hexdigest())
    else:
        raise InputError(f"{args.bundle} has no readable signed statement to name in a summary; nothing "
                         "was written to --out.")
    statement = vsa.summary(subject, resource=args.bundle.name, protocol_sha256=digests.get("protocol"),
                            inputs=vsa.inputs_of(digests.get("statement"), attestations),
                            checks=outcome.checks, exit_code=outcome.exit_code,
                            verifier_version=__version__, time_verified=vsa.now_utc())
    vsa.write_atomic(args.out, vsa.sign(statement, key))


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    with tolerant_stdout():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _usage(args)
        if args.vsa is not None:
            return _read_vsa(args)
        if not args.bundle.exists() and not args.bundle.is_symlink():
            raise InputError(f"{args.bundle} does not exist; pass a bag folder or a bundle "
                             ".tar.gz.")
        if args.bundle.is_symlink():
            raise InputError(f"{args.bundle} is a symbolic link; pass the bag folder or archive "
                             "itself.")
        if sweep_verification.is_sweep(args.bundle):
            return _verify_sweep(args)
        trust = Trust()
        check_threshold(args.threshold, args.trusted_key or [])
        if args.trusted_key:
            keys = [(signature.load_trusted_key(path), path) for path in args.trusted_key]
            trust = Trust(key=keys[0][0], source=keys[0][1], more_keys=tuple(keys[1:]),
                          threshold=args.threshold)
        elif args.trusted_fingerprint:
            trust = Trust(fingerprint=signature.parse_fingerprint(args.trusted_fingerprint),
                          source="--trusted-fingerprint")
        expected = None
        if args.protocol is not None:
            expected = hashlib.sha256(read_user_file(args.protocol, "protocol", limits.MAX_PROTOCOL_BYTES, InputError)
                                      ).hexdigest()
        attestations = tuple(reproduction.load_attestation(a) for a in args.reproduction)
        reproducers = tuple(signature.load_trusted_key(k) for k in args.trusted_reproducer)
        attesting = vsa.load_attesting_key(str(args.attest)) if args.attest is not None else None
        outcome = verify_path(args.bundle, trust, expected_protocol_sha256=expected,
                              attestations=attestations, reproducers=reproducers,
                              require_bit_identical=args.require_bit_identical,
                              max_tolerance=args.max_tolerance)
    except InputError as exc:
        _say(str(exc))
        return EXIT_UNREADABLE
    except (OSError, UnicodeError, MemoryError, RecursionError) as exc:
        # The input's edges (names the filesystem refuses, a full disk, memory): one sentence.
        _say(f"{args.bundle} cannot be verified ({describe(exc)}); pass the bag folder or "
             ".tar.gz the job wrote, on a disk with free space.")
        return EXIT_UNREADABLE
    _out(verdict_output.table(outcome))
    try:
        if args.json is not None:
            _write_report(args.json, verdict_output.dumps_report(outcome))
    except (OSError, UnicodeError, ValueError) as exc:
        _say(f"cannot write the report{f' to {args.json}' if args.json else ''} "
             f"({describe(exc)}); choose another path.")
        return EXIT_UNREADABLE
    try:
        if attesting is not None:
            _attest(args, outcome, attestations, attesting)
    except InputError as exc:
        _say(str(exc))
        return EXIT_UNREADABLE
    except OSError as exc:
        _say(f"cannot write the summary to {args.out} ({describe(exc)}); choose another path.")
        return EXIT_UNREADABLE
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
