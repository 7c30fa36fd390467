"""seal(): a generated payload becomes a bag that bagit-python validates, with a statement the
verifier's reader (verify/) accepts; the bundle package itself has no reader."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import bagit  # type: ignore[import-untyped]
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bundle import layout
from bundle.canonical import dumps, loads_strict
from bundle.dsse import Envelope
from bundle.errors import BundleError
from bundle.keys import fingerprint
from bundle.schemas import schema_sha256, validate
from job.publishing.dates import bagging_date
from job.publishing.ledger import Ledger
from job.publishing.seal import file_digests, payload_files, seal
from tests.payload import ledger_of, predicate_from_payload, seal_payload
from tests.synthetic import REPO, write_payload
from verify import bag as reader
from verify import signature
from verify.result import Failed

KEY = Ed25519PrivateKey.generate()


def read_bag_info(bag: Path) -> dict[str, str]:
    """bag-info.txt as the verifier reads it."""
    return dict(reader.parse_bag_info((bag / layout.BAG_INFO).read_bytes()))


def read_manifest(bag: Path, name: str) -> dict[str, str]:
    """A manifest or tag manifest as the verifier reads it."""
    algorithm = name.rsplit("-", 1)[-1].removesuffix(".txt")
    return reader.parse_manifest((bag / name).read_bytes(), name, algorithm)


def test_unsigned_bag_validates_with_bagit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1715040000")
    bag = tmp_path / "bag"
    protocol_sha256 = write_payload(bag / "data", profile="other")
    seal_payload(bag, description="tiny", protocol_sha256=protocol_sha256, profile="other")
    parsed = bagit.Bag(str(bag))
    parsed.validate()
    paths = payload_files(bag)
    assert parsed.info["Bagging-Date"] == "2024-05-07"
    assert parsed.info["Payload-Oxum"] == f"{sum((bag / p).stat().st_size for p in paths)}.{len(paths)}"
    assert not (bag / layout.PROVENANCE).exists() and not (bag / layout.SIGNER_PUB).exists()
    assert (bag / layout.BAGIT_TXT).read_text() == (
        "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"
    )
    info = read_bag_info(bag)
    assert list(info) == [
        "Bagging-Date",
        "Payload-Oxum",
        "External-Description",
        "Protocol-SHA256",
        "Profile",
    ]
    assert list(read_manifest(bag, layout.MANIFEST_SHA256)) == paths
    assert list(read_manifest(bag, layout.TAGMANIFEST_SHA256)) == [
        "bag-info.txt",
        "bagit.txt",
        "manifest-sha256.txt",
        "manifest-sha512.txt",
    ]


def protocol_bytes(bag: Path) -> bytes:
    return (bag / layout.PROTOCOL_JSON).read_bytes()


def _signed(tmp_path: Path) -> Path:
    bag = tmp_path / "signed"
    protocol_sha256 = write_payload(bag / "data", profile="formal")
    seal_payload(
        bag,
        description="example",
        protocol_sha256=protocol_sha256,
        profile="formal",
        private_key=KEY,
    )
    return bag


def test_signed_example_bag(tmp_path: Path) -> None:
    bag = _signed(tmp_path)
    bagit.Bag(str(bag)).validate()
    assert read_bag_info(bag)["Signer-Fingerprint"] == fingerprint(KEY)
    assert sorted(read_manifest(bag, layout.TAGMANIFEST_SHA256)) == sorted(
        set(layout.TAG_FILES) - {layout.TAGMANIFEST_SHA256}
    )
    public = signature.load_public_key_pem((bag / layout.SIGNER_PUB).read_bytes(), "signer")
    raw_envelope = (bag / layout.PROVENANCE).read_bytes()
    envelope = loads_strict(raw_envelope)
    assert dumps(envelope) == raw_envelope
    validate(envelope, "envelope")
    parsed = Envelope.from_json(raw_envelope)
    assert parsed.payload_type == layout.PAYLOAD_TYPE and [s.keyid for s in parsed.signatures] == [fingerprint(KEY)]
    assert list(parsed.verify([public], 1)) == [fingerprint(KEY)]
    payload = parsed.payload
    statement = signature.parse_statement(payload)[0]
    assert payload == dumps(statement)
    names = [s["name"] for s in statement["subject"]]
    protocol = json.loads((bag / layout.PROTOCOL_JSON).read_bytes())
    assert names == sorted(names) == list(layout.expected_payload(protocol))
    assert layout.BOOTSTRAP_JSON in names and layout.STABILITY_JSON in names
    manifest = read_manifest(bag, layout.MANIFEST_SHA256)
    assert {s["name"]: s["digest"]["sha256"] for s in statement["subject"]} == manifest
    predicate = statement["predicate"]
    assert predicate["signer_fingerprint"] == fingerprint(KEY)
    assert predicate["schemas"]["data/metrics.json"] == {
        "id": "https://calibration-runs.example/schemas/metrics/v1",
        "sha256": schema_sha256("metrics"),
    }
    assert sorted(predicate["schemas"]) == [n for n in names if n.endswith(".json")
                                            and n != layout.RO_CRATE_JSON]
    restated = predicate_from_payload(bag)
    assert {k: predicate[k] for k in restated} == restated


def test_tampered_payload_fails_bagit(tmp_path: Path) -> None:
    bag = _signed(tmp_path)
    with open(bag / layout.TEMPERATURE_JSON, "r+b") as fh:
        fh.seek(5)
        fh.write(b"X")
    with pytest.raises(bagit.BagValidationError):
        bagit.Bag(str(bag)).validate()


def test_sha512_manifest(tmp_path: Path) -> None:
    bag = _signed(tmp_path)
    sha512 = read_manifest(bag, layout.MANIFEST_SHA512)
    for path, digest in sha512.items():
        assert hashlib.sha512((bag / path).read_bytes()).hexdigest() == digest
        assert file_digests(bag / path)[1] == digest


def _payload(tmp_path: Path) -> tuple[Path, str]:
    bag = tmp_path / "p"
    return bag, write_payload(bag / "data", profile="formal")


def _rewrite(bag: Path, rel: str, change: Any) -> None:
    doc = json.loads((bag / rel).read_bytes())
    change(doc)
    (bag / rel).write_bytes(dumps(doc))


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda b: (b / layout.TRAJECTORY_JSON).unlink(), r"missing: \['data/trajectory.json'\]"),
        (lambda b: (b / layout.BOOTSTRAP_JSON).unlink(), r"missing: \['data/bootstrap.json'\]"),
        (lambda b: (b / "data" / "notes.txt").write_text("x"), r"extra: \['data/notes.txt'\]"),
        (lambda b: (b / layout.POOLS_JSON).write_bytes(b'{"a": 1}\n'), "not canonical"),
        (
            lambda b: _rewrite(b, layout.METRICS_JSON, lambda d: d.update(beta="x")),
            r"data/metrics.json does not follow schema metrics/v1 .*\$\.beta",
        ),
        (
            lambda b: _rewrite(b, layout.RESOURCES_JSON, lambda d: d.update(profile="other")),
            "says profile 'other'",
        ),
        (lambda b: (b / layout.PROTOCOL_JSON).write_bytes(protocol_bytes(b) + b"\n"), "copy the protocol file byte"),
        (lambda b: (b / "bagit.txt").write_text("x"), "already holds bagit.txt"),
        (lambda b: (b / "data" / "link").symlink_to(b / layout.POOLS_JSON), "symbolic link"),
        (lambda b: (b / "data" / "bad%name").write_text("x"), "rename the file"),
    ],
)
def test_seal_refuses_a_bad_payload(tmp_path: Path, setup: Any, message: str) -> None:
    bag, protocol_sha256 = _payload(tmp_path)
    setup(bag)
    with pytest.raises(BundleError, match=message):
        seal_payload(
            bag, description="x", protocol_sha256=protocol_sha256, profile="formal", date="2026-01-01", private_key=KEY
        )
    assert not (bag / layout.TAGMANIFEST_SHA256).exists()


def test_seal_seals_from_the_ledger_and_refuses_what_it_does_not_list(tmp_path: Path) -> None:
    """The manifests are the ledger's digests; a file written past the ledger, or changed in size
    after it was written, stops the seal before any tag file exists."""
    bag, protocol_sha256 = _payload(tmp_path)
    ledger = ledger_of(bag)
    (bag / "data" / "late.txt").write_text("x")
    with pytest.raises(BundleError, match=r"not written through it: \['data/late.txt'\]"):
        seal(bag, ledger, description="x", protocol_sha256=protocol_sha256, profile="formal", date="2026-01-01")
    (bag / "data" / "late.txt").unlink()
    with open(bag / layout.METRICS_JSON, "ab") as fh:
        fh.write(b" ")
    with pytest.raises(BundleError, match="data/metrics.json changed size after it was written"):
        seal(bag, ledger, description="x", protocol_sha256=protocol_sha256, profile="formal", date="2026-01-01")
    assert not (bag / layout.TAGMANIFEST_SHA256).exists()
    bag, protocol_sha256 = _payload(tmp_path / "again")
    ledger = ledger_of(bag)
    seal(bag, ledger, description="x", protocol_sha256=protocol_sha256, profile="formal", date="2026-01-01")
    assert read_manifest(bag, layout.MANIFEST_SHA256) == {p: w.sha256 for p, w in ledger.items()}
    assert read_manifest(bag, layout.MANIFEST_SHA512) == {p: w.sha512 for p, w in ledger.items()}


def test_the_ledger_refuses_a_json_file_against_its_schema_and_a_second_write(tmp_path: Path) -> None:
    bag, _ = _payload(tmp_path)
    doc = json.loads((bag / layout.METRICS_JSON).read_bytes())
    ledger = Ledger(tmp_path / "other")
    with pytest.raises(BundleError, match=r"does not follow schema metrics/v1 .*\$\.beta"):
        ledger.write_json(layout.METRICS_JSON, dict(doc, beta="x"))
    assert not (tmp_path / "other" / layout.METRICS_JSON).exists()
    written = ledger.write_json(layout.METRICS_JSON, doc)
    assert written.sha256 == hashlib.sha256((tmp_path / "other" / layout.METRICS_JSON).read_bytes()).hexdigest()
    with pytest.raises(BundleError, match="already written"):
        ledger.write_bytes(layout.METRICS_JSON, dumps(doc))


def test_a_signed_seal_needs_its_predicate(tmp_path: Path) -> None:
    bag, protocol_sha256 = _payload(tmp_path)
    with pytest.raises(BundleError, match="needs the predicate"):
        seal(bag, ledger_of(bag), description="x", protocol_sha256=protocol_sha256, profile="formal", date="2026-01-01",
             private_key=KEY)


def test_seal_refuses_bad_arguments(tmp_path: Path) -> None:
    bag, protocol_sha256 = _payload(tmp_path)
    with pytest.raises(BundleError, match="not one of formal, other"):
        seal_payload(bag, description="x", protocol_sha256=protocol_sha256, profile="casual")
    with pytest.raises(BundleError, match="64 lowercase hex"):
        seal_payload(bag, description="x", protocol_sha256="abc", profile="formal")
    with pytest.raises(BundleError, match="single line"):
        seal_payload(bag, description="two\nlines", protocol_sha256=protocol_sha256, profile="formal")
    predicate = predicate_from_payload(bag)
    predicate["profile"] = "other"
    with pytest.raises(BundleError, match="predicate's profile"):
        seal_payload(
            bag,
            description="x",
            protocol_sha256=protocol_sha256,
            profile="formal",
            predicate=predicate,
            private_key=KEY,
        )


def test_bagging_date(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    assert bagging_date() == "1970-01-01"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "soon")
    with pytest.raises(BundleError, match="SOURCE_DATE_EPOCH"):
        bagging_date()


def test_verifier_reader_rejects_damage() -> None:
    good = "ab" * 32 + "  data/x\n"
    assert reader.parse_manifest(good.encode(), "m", "sha256") == {"data/x": "ab" * 32}
    # RFC 8493: any whitespace between digest and path, either hex case, CRLF, no final newline
    for fine in [good[:-1], "AB" * 32 + " \tdata/x\r\n"]:
        assert reader.parse_manifest(fine.encode(), "m", "sha256") == {"data/x": "ab" * 32}
    for bad in ["ab  data/x\n", good + good, "ab" * 32 + "data/x\n", "ab" * 32 + "  ../x\n"]:
        with pytest.raises(Failed):
            reader.parse_manifest(bad.encode(), "m", "sha256")
    assert reader.parse_bag_info(b"A: 1\nB: two\n  words\nA: 2\n") == [
        ("A", "1"), ("B", "two words"), ("A", "2")]
    for bad in [b"A 1\n", b": x\n", b" A: x\n"]:
        with pytest.raises(Failed):
            reader.parse_bag_info(bad)


def test_envelope_payload_is_base64_of_canonical_statement(tmp_path: Path) -> None:
    bag = _signed(tmp_path)
    envelope = json.loads((bag / layout.PROVENANCE).read_bytes())
    payload = Envelope.from_dict(envelope).payload
    assert payload.endswith(b"}\n") and b": " not in payload


def test_optional_sections_decide_the_payload(tmp_path: Path) -> None:
    protocol = json.loads((REPO / "provenance.json").read_bytes())
    protocol.pop("bootstrap", None)
    protocol.pop("stability", None)
    for estimator in protocol["metrics"]["estimators"]:  # their intervals draw the bootstrap's resamples
        estimator.pop("interval", None)
    raw = json.dumps(protocol, indent=2).encode()
    assert layout.expected_payload(protocol) == layout.PAYLOAD_FILES
    bag = tmp_path / "plain"
    protocol_sha256 = write_payload(bag / "data", protocol=raw, profile="formal")
    assert not (bag / layout.BOOTSTRAP_JSON).exists()
    seal_payload(bag, description="x", protocol_sha256=protocol_sha256, profile="formal", private_key=KEY)
    bagit.Bag(str(bag)).validate()
    stray = tmp_path / "stray"
    protocol_sha256 = write_payload(stray / "data", protocol=raw, profile="formal")
    full = tmp_path / "full"
    write_payload(full / "data", profile="formal")
    (stray / layout.STABILITY_JSON).write_bytes((full / layout.STABILITY_JSON).read_bytes())
    with pytest.raises(BundleError, match=r"extra: \['data/stability.json'\]"):
        seal_payload(stray, description="x", protocol_sha256=protocol_sha256, profile="formal")
