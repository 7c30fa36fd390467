"""The signed verification summary (verify/vsa.py; `--attest/--out`, `--vsa/--trusted-verifier`):
an SLSA VSA v1 in an in-toto Statement in a DSSE envelope. securesystemslib reads ours and we read
one securesystemslib signed; a changed, untrusted or other bundle's summary is refused."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle import layout
from bundle.canonical import dumps
from bundle.keys import fingerprint
from tests.cli import run_verify
from verify import vsa
from verify.__main__ import main
from verify.result import Check

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "goldens" / "bundle-v2"
GOLDEN_KEY = REPO / "tests" / "goldens" / "bundle-v2.pub.pem"


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ed25519PrivateKey, Path, Path]:
    """The third party's key: (key, private PEM path, public PEM path)."""
    folder = tmp_path_factory.mktemp("journal")
    key = Ed25519PrivateKey.generate()
    private = folder / "journal.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public = folder / "journal.pub.pem"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return key, private, public


def _statement_sha256(bag: Path) -> str:
    envelope = json.loads((bag / layout.PROVENANCE).read_bytes())
    return hashlib.sha256(base64.b64decode(envelope["payload"])).hexdigest()


def _attest(bag: Path, private: Path, out: Path, *extra: str) -> int:
    return main([str(bag), "--trusted-key", str(GOLDEN_KEY), "--attest", str(private), "--out", str(out), *extra])


def _payload(envelope_file: Path) -> dict[str, Any]:
    return json.loads(base64.b64decode(json.loads(envelope_file.read_bytes())["payload"]))  # type: ignore[no-any-return]


def test_a_verified_bundle_gets_a_passed_summary_securesystemslib_verifies(
        journal: tuple[Ed25519PrivateKey, Path, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from securesystemslib.dsse import Envelope as SslibEnvelope
    from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    key, private, _ = journal
    out = tmp_path / "vsa.json"
    assert _attest(GOLDEN, private, out) == 0
    envelope = SslibEnvelope.from_dict(json.loads(out.read_bytes()))
    accepted = envelope.verify([SSlibKey.from_crypto(key.public_key(), keyid=fingerprint(key))], 1)
    assert list(accepted) == [fingerprint(key)]
    statement = json.loads(envelope.payload)
    assert statement["predicateType"] == "https://slsa.dev/verification_summary/v1"
    assert statement["subject"] == [{"name": "provenance.intoto.json#payload",
                                     "digest": {"sha256": _statement_sha256(GOLDEN)}}]
    p = statement["predicate"]
    assert p["verificationResult"] == "PASSED"
    assert p["verifiedLevels"] == [vsa.SIGNATURE, vsa.RECOMPUTED]
    assert p["policy"]["digest"]["sha256"] == hashlib.sha256((GOLDEN / layout.PROTOCOL_JSON).read_bytes()).hexdigest()
    assert p["inputAttestations"] == [{"uri": "provenance.intoto.json#payload",
                                       "digest": {"sha256": _statement_sha256(GOLDEN)}}]
    assert p["verifier"]["version"] == {"calibration-verify": "2.0.0"}
    assert p["timeVerified"] == "2026-01-01T00:00:00Z"
    again = tmp_path / "again.json"
    assert _attest(GOLDEN, private, again) == 0
    assert again.read_bytes() == out.read_bytes()  # SOURCE_DATE_EPOCH: the same bytes


def test_the_summary_reads_back_only_under_the_trusted_verifier_and_for_its_bundle(
        journal: tuple[Ed25519PrivateKey, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, private, public = journal
    out = tmp_path / "vsa.json"
    assert _attest(GOLDEN, private, out) == 0
    capsys.readouterr()
    assert main(["--vsa", str(out), "--trusted-verifier", str(public), str(GOLDEN)]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("PASSED: ") and "about this bundle's signed statement" in shown
    assert main(["--vsa", str(out), "--trusted-verifier", str(GOLDEN_KEY)]) == 1
    assert capsys.readouterr().out.startswith("REJECTED: ")
    other = REPO / "tests" / "goldens" / "bundle-v1"
    assert main(["--vsa", str(out), "--trusted-verifier", str(public), str(other)]) == 1
    assert "NOT about this bundle" in capsys.readouterr().out


def test_a_changed_summary_is_refused(journal: tuple[Ed25519PrivateKey, Path, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    _, private, public = journal
    out = tmp_path / "vsa.json"
    assert _attest(GOLDEN, private, out) == 0
    doc = json.loads(out.read_bytes())
    statement = _payload(out)
    statement["predicate"]["verifiedLevels"].append(vsa.BIT_IDENTICAL)
    doc["payload"] = base64.b64encode(dumps(statement)).decode()
    out.write_bytes(json.dumps(doc).encode())
    capsys.readouterr()
    assert main(["--vsa", str(out), "--trusted-verifier", str(public)]) == 1
    assert "not signed by any --trusted-verifier key" in capsys.readouterr().out


def test_a_rejected_bundle_gets_a_failed_summary_with_no_levels(
        journal: tuple[Ed25519PrivateKey, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, private, public = journal
    bag = shutil.copytree(GOLDEN, tmp_path / "bag")
    report = bag / layout.REPORT_MD
    report.write_bytes(report.read_bytes() + b"\nall fine\n")
    out = tmp_path / "vsa.json"
    assert _attest(bag, private, out) == 1
    p = _payload(out)["predicate"]
    assert (p["verificationResult"], p["verifiedLevels"]) == ("FAILED", [])
    capsys.readouterr()
    assert main(["--vsa", str(out), "--trusted-verifier", str(public), str(bag)]) == 1
    assert capsys.readouterr().out.startswith("FAILED: ")


def test_we_read_a_summary_securesystemslib_signed(journal: tuple[Ed25519PrivateKey, Path, Path],
                                                   tmp_path: Path) -> None:
    from securesystemslib.dsse import Envelope as SslibEnvelope
    from securesystemslib.signer import CryptoSigner, SSlibKey  # type: ignore[attr-defined]

    key, _, public = journal
    checks = [Check("signature.signer-trusted", "signer is the trusted key", "pass", "signed")]
    statement = vsa.summary(vsa.Subject(layout.SIGNED_STATEMENT_SUBJECT, _statement_sha256(GOLDEN)),
                            resource="bundle-v2", protocol_sha256="ab" * 32, inputs={}, checks=checks,
                            exit_code=0, verifier_version="9.9.9", time_verified="2026-01-01T00:00:00Z")
    envelope = SslibEnvelope(dumps(statement), layout.PAYLOAD_TYPE, {})
    envelope.sign(CryptoSigner(key, SSlibKey.from_crypto(key.public_key(), keyid=fingerprint(key))))
    out = tmp_path / "sslib.json"
    out.write_text(json.dumps(envelope.to_dict()))
    assert main(["--vsa", str(out), "--trusted-verifier", str(public), str(GOLDEN)]) == 0


def _check(cid: str, detail: str, status: str = "pass") -> Check:
    return Check(cid, cid, status, detail)  # type: ignore[arg-type]


@pytest.mark.parametrize(("reproductions", "levels"), [
    ([], []),
    ([("the trusted reproducer", "bit-identical: 20 rows", "pass")], [vsa.BIT_IDENTICAL]),
    ([("the trusted reproducer", "equivalent: 20 rows", "pass")], [vsa.EQUIVALENT]),
    ([("the trusted reproducer", "equivalent: 20 rows", "pass"),
      ("the trusted reproducer", "bit-identical: 8 rows", "pass")], [vsa.BIT_IDENTICAL]),
    ([("the bundle's own signer, a self-reproduction that is not independent", "bit-identical: 8 rows", "pass")], []),
])
def test_levels_name_the_best_independent_reproduction(reproductions: list[tuple[str, str, str]],
                                                       levels: list[str]) -> None:
    checks = [_check("signature.signer-trusted", "signed")]
    for n, (who, verdict, status) in enumerate(reproductions, start=1):
        checks += [_check(f"reproduction.{n}.signed", f"att.json: Ed25519 signature by {who} 0123…"),
                   _check(f"reproduction.{n}.subjects", "about this bundle"),
                   _check(f"reproduction.{n}.reproduced", verdict, status)]
    assert vsa.verified_levels(checks, 0) == [vsa.SIGNATURE, vsa.RECOMPUTED, *levels]
    assert vsa.verified_levels(checks, 1) == []
    assert vsa.verified_levels(checks, 3) == []


@pytest.mark.parametrize("argv", [
    ["BUNDLE", "--attest", "KEY"],
    ["BUNDLE", "--out", "OUT"],
    ["BUNDLE", "--attest", "KEY", "--out", "OUT"],
    ["--vsa", "OUT"],
    [],
])
def test_options_that_mean_nothing_are_one_sentence(argv: list[str], journal: tuple[Ed25519PrivateKey, Path, Path],
                                                    tmp_path: Path) -> None:
    _, private, _ = journal
    names = {"BUNDLE": str(GOLDEN), "KEY": str(private), "OUT": str(tmp_path / "vsa.json")}
    done = run_verify([names.get(a, a) for a in argv])
    assert done.code == 2, done.err
    assert done.err.count("\n") == 1 and done.err.startswith("verify: ")
    assert not (tmp_path / "vsa.json").exists()


def test_a_public_key_is_not_an_attesting_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "vsa.json"
    assert _attest(GOLDEN, GOLDEN_KEY, out) == 2
    assert "the attesting key" in capsys.readouterr().err
    assert not out.exists()


def test_a_schema_violation_is_never_signed(journal: tuple[Ed25519PrivateKey, Path, Path]) -> None:
    key, _, _ = journal
    statement = vsa.summary(vsa.Subject("x", "ab" * 32), resource="r", protocol_sha256="ab" * 32, inputs={},
                            checks=[], exit_code=0, verifier_version="2.0.0", time_verified="2026-01-01T00:00:00Z")
    bad = copy.deepcopy(statement)
    bad["predicate"]["verificationResult"] = "MAYBE"
    with pytest.raises(vsa.Failed, match="verification summary"):
        vsa.sign(bad, key)


def test_an_archive_refused_unread_is_named_by_its_own_sha256(journal: tuple[Ed25519PrivateKey, Path, Path],
                                                              tmp_path: Path) -> None:
    from job.publishing.archive import archive

    _, private, _ = journal
    tarball = archive(GOLDEN, tmp_path / "bundle.tar.gz")
    tarball.write_bytes(tarball.read_bytes() + b"trailing bytes tar would read")
    out = tmp_path / "vsa.json"
    assert _attest(tarball, private, out) == 1
    statement = _payload(out)
    assert statement["subject"] == [{"name": "bundle.tar.gz",
                                     "digest": {"sha256": hashlib.sha256(tarball.read_bytes()).hexdigest()}}]
    assert statement["predicate"]["verificationResult"] == "FAILED"
    assert statement["predicate"]["inputAttestations"] == []
