"""What the verifier trusts: it authenticates before it parses, reads bags as RFC 8493 allows and
statements as in-toto Statement v1 says, counts several signatures against a threshold, and lets
nothing unsigned speak (it is listed as an unsigned note, never part of the verdict)."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bagit
import jsonschema
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle import layout
from bundle.canonical import dumps, loads_strict
from bundle.dsse import Envelope
from bundle.errors import BundleError
from bundle.keys import fingerprint, public_key_pem
from job.publishing.cosign import cosign
from tests.verify.tamper import Keys, copy_bag, synthetic_bag, verify_keys  # noqa: F401
from tests.verify.test_tamper import (
    fix_manifests_without_key,
    fix_tagmanifest,
    set_bag_info,
    statement_edit,
)
from verify import verdict_output
from verify.api import Outcome, verify_path
from verify.checks import AUTHENTICATION, CONTENT, Trust, check_ids
from verify.result import EXIT_FAILED, EXIT_OK

REPO = Path(__file__).resolve().parents[2]


def trusted(keys: Keys) -> Trust:
    return Trust(key=keys.real.public_key(), source="real.pem")


def failures(outcome: Outcome) -> dict[str, str]:
    return {c.id: c.detail for c in outcome.checks if c.status == "fail"}


def rewrite_lines(bag: Path, name: str, fn: Callable[[list[str]], list[str]]) -> None:
    lines = (bag / name).read_text(encoding="utf-8").splitlines()
    (bag / name).write_text("".join(f"{line}\n" for line in fn(lines)), encoding="utf-8")


def add_manifest(bag: Path, name: str, algorithm: str, paths: list[str]) -> None:
    (bag / name).write_text("".join(
        f"{hashlib.new(algorithm, (bag / p).read_bytes()).hexdigest()} {p}\n" for p in paths))


def payload_paths(bag: Path) -> list[str]:
    return sorted(p.relative_to(bag).as_posix() for p in (bag / "data").rglob("*") if p.is_file())


def tag_paths(bag: Path) -> list[str]:
    return sorted(p.name for p in bag.iterdir() if p.is_file()
                  and not p.name.startswith("tagmanifest-"))


# -- 1. authenticate before parsing -----------------------------------------------------------

def test_authentication_comes_before_every_parsing_check() -> None:
    first = check_ids(AUTHENTICATION)
    assert first[-1] == "signature.signer-trusted"
    assert "bag.payload-files" in check_ids(CONTENT)
    assert check_ids()[:len(first)] == first


@pytest.mark.parametrize(("size", "first_failure"), [
    (60 * 1024, "signature.subjects"),  # under pools.json's size cap: the signature stops it
    (16 * 1024 * 1024, "bag.layout"),   # over the cap: refused from its size alone, never read
])
def test_unsigned_payload_is_rejected_before_it_is_parsed(synthetic_bag: Path,  # noqa: F811
                                                          verify_keys: Keys,  # noqa: F811
                                                          tmp_path: Path, size: int,
                                                          first_failure: str) -> None:
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    items = size // 3
    (bag / layout.POOLS_JSON).write_bytes(b"[" + b"{}," * (items - 1) + b"{}]")
    paths = payload_paths(bag)
    set_bag_info(bag, layout.INFO_PAYLOAD_OXUM,
                 f"{sum((bag / p).stat().st_size for p in paths)}.{len(paths)}")
    fix_manifests_without_key(bag)
    start = time.perf_counter()
    outcome = verify_path(bag, trusted(verify_keys))
    seconds = time.perf_counter() - start
    assert seconds < 2.0, seconds
    assert outcome.exit_code == EXIT_FAILED
    assert list(failures(outcome)) == [first_failure], failures(outcome)
    ids = [c.id for c in outcome.checks]
    later = outcome.checks[ids.index(first_failure) + 1:]
    assert len(later) > 20
    assert all(c.status == "skip" for c in later)
    assert all(c.detail == f"skipped: the bundle is not authenticated ({first_failure} failed)"
               for c in later if c.id != "signature.signer-trusted")


def test_without_a_trusted_key_integrity_still_runs_first(synthetic_bag: Path,  # noqa: F811
                                                          tmp_path: Path) -> None:
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    (bag / layout.METRICS_JSON).write_bytes(b"{" * 100_000)
    fix_manifests_without_key(bag)
    outcome = verify_path(bag)
    assert failures(outcome) and set(failures(outcome)) <= set(check_ids(AUTHENTICATION))
    assert next(c for c in outcome.checks if c.id == "json.metrics").status == "skip"


# -- 2. bags as RFC 8493 allows -------------------------------------------------------------

def _tab_separator(bag: Path) -> None:
    rewrite_lines(bag, layout.MANIFEST_SHA256, lambda ls: [ln.replace("  ", "\t", 1) for ln in ls])
    fix_tagmanifest(bag)


def _one_space_upper_reversed(bag: Path) -> None:
    def edit(lines: list[str]) -> list[str]:
        return [f"{ln.split('  ', 1)[0].upper()} {ln.split('  ', 1)[1]}" for ln in reversed(lines)]
    rewrite_lines(bag, layout.MANIFEST_SHA512, edit)
    fix_tagmanifest(bag)


def _extra_manifests(bag: Path) -> None:
    add_manifest(bag, "manifest-md5.txt", "md5", payload_paths(bag))
    add_manifest(bag, "manifest-sha1.txt", "sha1", payload_paths(bag))
    add_manifest(bag, "tagmanifest-sha512.txt", "sha512", tag_paths(bag))


def _extra_tag_file(bag: Path) -> None:
    (bag / "README.txt").write_text("This bag was checked by the archive.\n")
    (bag / "metadata").mkdir()
    (bag / "metadata" / "note.txt").write_text("free text\n")


def _extra_labels(bag: Path) -> None:
    rewrite_lines(bag, layout.BAG_INFO, lambda ls: [
        *ls, "Contact-Name: A. Archivist", "Contact-Name: B. Curator",
        "External-Identifier: doi:10.0000/example", "  continued on a second line"])
    fix_tagmanifest(bag)


def _keyid_changed(bag: Path) -> None:
    env = loads_strict((bag / layout.PROVENANCE).read_bytes())
    env["signatures"][0]["keyid"] = "ab" * 32
    (bag / layout.PROVENANCE).write_bytes(dumps(env))
    fix_tagmanifest(bag)


def _signature_twice(bag: Path) -> None:
    env = loads_strict((bag / layout.PROVENANCE).read_bytes())
    env["signatures"].append(dict(env["signatures"][0]))
    (bag / layout.PROVENANCE).write_bytes(dumps(env))
    fix_tagmanifest(bag)


ALLOWED: dict[str, tuple[Callable[[Path], None], str | None]] = {
    "tab-separator": (_tab_separator, None),
    "one-space-uppercase-any-order": (_one_space_upper_reversed, None),
    "extra-manifests": (_extra_manifests, None),
    "extra-tag-files": (_extra_tag_file, "extra tag file metadata/note.txt"),
    "extra-bag-info-labels": (_extra_labels, "continued on a second line"),
    "keyid-is-a-hint": (_keyid_changed, "a keyid is only a hint"),
    "same-signature-twice": (_signature_twice, None),
}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_what_the_standards_allow_verifies(name: str, synthetic_bag: Path,  # noqa: F811
                                           verify_keys: Keys, tmp_path: Path) -> None:  # noqa: F811
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    change, note = ALLOWED[name]
    change(bag)
    outcome = verify_path(bag, trusted(verify_keys))
    assert outcome.exit_code == EXIT_OK, failures(outcome)
    if note is not None:
        assert any(note in n for n in outcome.notes), outcome.notes


def test_bag_resaved_by_bagit_python_verifies(synthetic_bag: Path, verify_keys: Keys,  # noqa: F811
                                              tmp_path: Path) -> None:
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    bagit.Bag(str(bag)).save(manifests=True)
    assert (bag / "tagmanifest-sha512.txt").exists()  # bagit-python adds one per algorithm
    bagit.Bag(str(bag)).validate()
    outcome = verify_path(bag, trusted(verify_keys))
    assert outcome.exit_code == EXIT_OK, failures(outcome)


def test_extra_manifest_is_checked(synthetic_bag: Path, verify_keys: Keys,  # noqa: F811
                                   tmp_path: Path) -> None:
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    add_manifest(bag, "manifest-md5.txt", "md5", payload_paths(bag))
    rewrite_lines(bag, "manifest-md5.txt", lambda ls: ["0" * 32 + ls[0][32:], *ls[1:]])
    outcome = verify_path(bag, trusted(verify_keys))
    assert "md5 mismatch" in failures(outcome)["bag.manifest-other"]


def test_extra_manifest_of_an_unknown_algorithm_is_noted(synthetic_bag: Path,  # noqa: F811
                                                         verify_keys: Keys,  # noqa: F811
                                                         tmp_path: Path) -> None:
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    (bag / "manifest-whirlpool9.txt").write_text("00 data/protocol.json\n")
    outcome = verify_path(bag, trusted(verify_keys))
    assert outcome.exit_code == EXIT_OK, failures(outcome)
    assert any("manifest-whirlpool9.txt" in n and "not checked" in n for n in outcome.notes)


# -- 3. several signatures -------------------------------------------------------------------

@pytest.fixture
def cosigned(synthetic_bag: Path, verify_keys: Keys, tmp_path: Path) -> Path:  # noqa: F811
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    cosign(bag, verify_keys.other)
    return bag


def test_cosign_adds_a_signature_and_keeps_the_payload(cosigned: Path, synthetic_bag: Path,  # noqa: F811
                                                       verify_keys: Keys) -> None:  # noqa: F811
    before = loads_strict((synthetic_bag / layout.PROVENANCE).read_bytes())
    after = loads_strict((cosigned / layout.PROVENANCE).read_bytes())
    assert after["payload"] == before["payload"]
    assert after["signatures"][0] == before["signatures"][0]
    assert after["signatures"][1]["keyid"] == fingerprint(verify_keys.other)
    for name in payload_paths(synthetic_bag) + [layout.MANIFEST_SHA256, layout.BAG_INFO]:
        assert (cosigned / name).read_bytes() == (synthetic_bag / name).read_bytes(), name
    assert not [p for p in cosigned.iterdir() if p.name.startswith(".")]  # no temporary left
    bagit.Bag(str(cosigned)).validate()


def test_threshold_counts_distinct_trusted_keys(cosigned: Path, verify_keys: Keys) -> None:  # noqa: F811
    real, other = verify_keys.real.public_key(), verify_keys.other.public_key()
    both = Trust(key=real, source="real.pem", more_keys=((other, "other.pem"),), threshold=2)
    outcome_both = verify_path(cosigned, both)
    assert outcome_both.exit_code == EXIT_OK
    assert "signed by 2 distinct trusted keys, as required" in verdict_output.table(outcome_both)
    assert "the trusted key" not in verdict_output.to_json(outcome_both)["message"]
    only_real = verify_path(cosigned, trusted(verify_keys))
    assert only_real.exit_code == EXIT_OK
    assert verdict_output.to_json(only_real)["message"].endswith("signed by the trusted key.")
    assert f"signed also by keyid {fingerprint(other)}, not trusted" in " ".join(only_real.notes)
    only_other = verify_path(cosigned, Trust(key=other, source="other.pem"))
    assert only_other.exit_code == EXIT_OK
    assert any(f"signed also by {fingerprint(real)}" in n for n in only_other.notes)
    stranger = Ed25519PrivateKey.generate().public_key()
    three = Trust(key=real, source="real.pem", more_keys=((stranger, "x.pem"), (real, "again.pem")),
                  threshold=2)
    outcome = verify_path(cosigned, three)
    assert "1 of the 2 required" in failures(outcome)["signature.signer-trusted"]


def test_threshold_not_met_without_the_cosignature(synthetic_bag: Path,  # noqa: F811
                                                   verify_keys: Keys) -> None:  # noqa: F811
    both = Trust(key=verify_keys.real.public_key(), source="real.pem",
                 more_keys=((verify_keys.other.public_key(), "other.pem"),), threshold=2)
    outcome = verify_path(synthetic_bag, both)
    assert "signature.signer-trusted" in failures(outcome)


def test_cosign_refuses_a_second_signature_by_the_same_key(cosigned: Path,
                                                            verify_keys: Keys) -> None:  # noqa: F811
    for key in (verify_keys.other, verify_keys.real):
        with pytest.raises(BundleError, match="already signed"):
            cosign(cosigned, key)


def test_cosign_refuses_a_bundle_whose_signature_does_not_verify(synthetic_bag: Path,  # noqa: F811
                                                                 verify_keys: Keys,  # noqa: F811
                                                                 tmp_path: Path) -> None:
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    (bag / layout.SIGNER_PUB).write_bytes(public_key_pem(Ed25519PrivateKey.generate()))
    with pytest.raises(BundleError, match="no signature that verifies"):
        cosign(bag, verify_keys.other)


def test_cosign_cli_speaks_one_sentence(cosigned: Path, synthetic_bag: Path,  # noqa: F811
                                        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from job.cli import main
    from job.publishing.signing_keys import generate

    generate(tmp_path / "k")
    generate(tmp_path / "k2")
    bag = copy_bag(synthetic_bag, tmp_path / "bag2")
    assert main(["archive", str(bag)]) == 0
    before = (tmp_path / "bag2.tar.gz").read_bytes()
    assert main(["cosign", str(bag), "--signing-key", str(tmp_path / "k" / "signing-key.pem")]) == 0
    out = capsys.readouterr().out
    assert "fingerprint" in out and f"archive {tmp_path / 'bag2.tar.gz'} written again" in out
    # the archive beside the folder is the cosigned folder's, byte for byte as `job archive` writes it
    assert (tmp_path / "bag2.tar.gz").read_bytes() != before
    (tmp_path / "bag2.tar.gz").rename(tmp_path / "old.tar.gz")
    assert main(["archive", str(bag)]) == 0
    assert (tmp_path / "bag2.tar.gz").read_bytes() == (tmp_path / "old.tar.gz").read_bytes()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    (tmp_path / "bag2.tar.gz").unlink()
    capsys.readouterr()
    assert main(["cosign", str(bag), "--signing-key", str(tmp_path / "k2" / "signing-key.pem")]) == 0
    assert "an archive made from it before no longer holds this signature" in capsys.readouterr().out
    assert main(["cosign", str(bag), "--signing-key", str(tmp_path / "k" / "signing-key.pem")]) == 2
    assert main(["cosign", str(tmp_path / "none"), "--signing-key", str(tmp_path / "x.pem")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err), err


def test_verify_cli_threshold_beyond_the_keys_is_a_usage_error(synthetic_bag: Path,  # noqa: F811
                                                               tmp_path: Path) -> None:
    from verify.__main__ import main

    pub = tmp_path / "pub.pem"
    pub.write_bytes(public_key_pem(Ed25519PrivateKey.generate()))
    assert main([str(synthetic_bag), "--trusted-key", str(pub), "--threshold", "2"]) == 2


def test_one_threshold_rule_counts_each_trusted_key_file_once(synthetic_bag: Path,  # noqa: F811
                                                               tmp_path: Path) -> None:
    """A bundle and a sweep bound --threshold alike (verify.context.check_threshold): from 1 to the
    number of distinct --trusted-key files, 1 when none is given."""
    from verify.__main__ import main
    from verify.context import check_threshold
    from verify.result import InputError

    check_threshold(1, [])
    check_threshold(2, ["a.pem", "b.pem"])
    for threshold, sources in ((0, ["a.pem"]), (2, []), (2, ["a.pem", "a.pem"]), (3, ["a.pem", "b.pem"])):
        with pytest.raises(InputError, match=f"--threshold {threshold} cannot be met"):
            check_threshold(threshold, sources)
    pub = tmp_path / "pub.pem"
    pub.write_bytes(public_key_pem(Ed25519PrivateKey.generate()))
    assert main([str(synthetic_bag), "--trusted-key", str(pub), "--trusted-key", str(pub), "--threshold", "2"]) == 2


def test_securesystemslib_verifies_a_cosigned_envelope(cosigned: Path,
                                                       verify_keys: Keys) -> None:  # noqa: F811
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey

    envelope = Envelope.from_dict(json.loads((cosigned / layout.PROVENANCE).read_bytes()))
    keys = [SSlibKey.from_crypto(k.public_key(), keyid=fingerprint(k))
            for k in (verify_keys.real, verify_keys.other)]
    accepted = envelope.verify(keys, 2)
    assert set(accepted) == {fingerprint(verify_keys.real), fingerprint(verify_keys.other)}


# -- 4. in-toto Statement v1 as its spec says --------------------------------------------------

def _extra_sha512(statement: dict[str, Any], bag: Path, wrong: bool = False) -> None:
    for subject in statement["subject"]:
        digest = hashlib.sha512((bag / subject["name"]).read_bytes()).hexdigest()
        subject["digest"]["sha512"] = "0" * 128 if wrong else digest


@pytest.mark.parametrize(("name", "edit", "failed", "words"), [
    ("unknown-field", lambda s, b: s.update(extension={"x": 1}), None, "'extension'"),
    ("unknown-subject-field", lambda s, b: s["subject"][0].update(uri="https://example.org/x"),
     None, "'uri'"),
    ("extra-digest", _extra_sha512, None, None),
    ("unknown-digest", lambda s, b: s["subject"][0]["digest"].update(blake9="ab"), None,
     "'blake9'"),
    ("wrong-extra-digest", lambda s, b: _extra_sha512(s, b, wrong=True), "signature.subjects",
     "sha512 mismatch"),
    ("no-sha256", lambda s, b: s["subject"][0]["digest"].pop("sha256"), "signature.valid",
     "sha256"),
    ("predicate-extra-field", lambda s, b: s["predicate"].update(extra=1), "json.statement",
     "'extra'"),
])
def test_statement_read_as_in_toto_says(name: str, edit: Callable[[dict[str, Any], Path], None],
                                        failed: str | None, words: str | None,
                                        synthetic_bag: Path, verify_keys: Keys,  # noqa: F811
                                        tmp_path: Path) -> None:
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    statement_edit(lambda s: edit(s, bag), key="real")(bag, verify_keys)
    outcome = verify_path(bag, trusted(verify_keys))
    if failed is None:
        assert outcome.exit_code == EXIT_OK, failures(outcome)
        if words is not None:
            assert any(words in n for n in outcome.notes), outcome.notes
    else:
        assert words is not None and words in failures(outcome)[failed], failures(outcome)


# -- 5. nothing unsigned speaks ----------------------------------------------------------------

def test_unsigned_text_appears_only_as_notes(synthetic_bag: Path, verify_keys: Keys,  # noqa: F811
                                             tmp_path: Path) -> None:
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    rewrite_lines(bag, layout.BAG_INFO, lambda ls: [
        "External-Description: VERIFIED BY THE LAB" if ln.startswith("External-Description:")
        else ln for ln in ls])
    rewrite_lines(bag, layout.BAG_INFO, lambda ls: [
        *[ln for ln in ls if not ln.startswith("External-Description:")],
        "External-Description: calibration run", "  TRUST ME: ECE IS ZERO"])
    pem = (bag / layout.SIGNER_PUB).read_bytes()
    (bag / layout.SIGNER_PUB).write_bytes(b"Signed by the Ministry of Truth\n" + pem)
    fix_tagmanifest(bag)
    outcome = verify_path(bag, trusted(verify_keys))
    assert outcome.exit_code == EXIT_OK, failures(outcome)
    planted = ("TRUST ME: ECE IS ZERO", "Ministry of Truth")
    for text in planted:
        assert any(text in n for n in outcome.notes), (text, outcome.notes)
        assert not any(text in c.detail for c in outcome.checks), text
    table = verdict_output.table(outcome)
    notes_at = table.index("Unsigned notes")
    assert all(notes_at < table.index(text) for text in planted)
    doc = verdict_output.to_json(outcome)
    schema = json.loads((REPO / "verify" / "report.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert any("Ministry of Truth" in n for n in doc["unsigned_notes"])
    assert "Ministry of Truth" not in json.dumps(doc["checks"])


def test_signed_envelope_payload_is_never_reencoded(cosigned: Path) -> None:
    env = loads_strict((cosigned / layout.PROVENANCE).read_bytes())
    assert base64.b64encode(Envelope.from_dict(env).payload).decode() == env["payload"]
