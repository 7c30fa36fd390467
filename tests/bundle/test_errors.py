"""bundle.errors: one root, BundleError, whose errors carry their facts as `details` (JSON scalars)
beside the one-sentence message; checked on real failures of the format's functions."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path

import pytest

from bundle.canonical import MAX_JSON_DEPTH, dumps, loads_strict, require_canonical
from bundle.errors import BundleError, CanonicalJSONError, KeyFileError, OutputExistsError, SchemaViolation
from bundle.schemas import validate
from job.publishing.attestation import write_attestation
from job.publishing.signing_keys import generate, load_private_key
from job.publishing.walk import walk_regular
from tests.factory import REPO

PROTOCOL = json.loads((REPO / "provenance.json").read_text())


def _one_sentence(exc: BundleError) -> None:
    assert isinstance(exc, BundleError) and "\n" not in str(exc) and str(exc).endswith(".")
    json.dumps(dict(exc.details))  # every detail is a JSON scalar


def test_a_schema_violation_names_the_document_the_schema_and_the_json_pointer() -> None:
    doc = copy.deepcopy(PROTOCOL)
    doc["resources"]["model"]["files"][1]["size"] = -1
    with pytest.raises(SchemaViolation) as info:
        validate(doc, "protocol", source="data/protocol.json")
    _one_sentence(info.value)
    assert dict(info.value.details) == {
        "document": "data/protocol.json", "schema": "protocol", "pointer": "/resources/model/files/1/size",
        "reason": "-1 is less than the minimum of 0"}
    assert "$.resources.model.files[1].size" in str(info.value)


def test_a_json_pointer_escapes_slash_and_tilde() -> None:
    doc = copy.deepcopy(PROTOCOL)
    doc["resources"]["dataset"]["columns"]["a/b~c"] = ""
    with pytest.raises(SchemaViolation) as info:
        validate(doc, "protocol")
    assert info.value.details["document"] == "protocol"
    assert info.value.details["pointer"] == "/resources/dataset/columns/a~1b~0c"


@pytest.mark.parametrize(("data", "reason"), [
    (b'{"a":1,"a":2}', "not-strict"),
    (b'{"a":NaN}', "not-strict"),
    (b'{"a":', "invalid-json"),
    (b"\xff{}", "not-utf8"),
    ("\ufeff{}".encode(), "byte-order-mark"),
    (b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), "too-deep"),
])
def test_strict_parsing_says_why_as_a_reason_code(data: bytes, reason: str) -> None:
    with pytest.raises(CanonicalJSONError) as info:
        loads_strict(data, source="data/metrics.json")
    _one_sentence(info.value)
    assert info.value.details["reason"] == reason and info.value.details["source"] == "data/metrics.json"


def test_a_value_json_cannot_hold_is_located() -> None:
    with pytest.raises(CanonicalJSONError) as info:
        dumps({"pools": {"audit": [1.0, float("nan")]}}, source="data/metrics.json")
    assert dict(info.value.details) == {"source": "data/metrics.json", "reason": "not-finite",
                                        "at": "$.pools.audit[1]"}
    with pytest.raises(CanonicalJSONError) as info:
        require_canonical(b'{"b":1, "a":2}\n', source="x.json")
    assert info.value.details["reason"] == "not-canonical" and info.value.details["at"] is None


def test_key_file_errors_carry_the_path_and_why(tmp_path: Path) -> None:
    generate(tmp_path)
    with pytest.raises(KeyFileError) as info:
        load_private_key(tmp_path / "signing-key.pub.pem")
    _one_sentence(info.value)
    assert dict(info.value.details) == {"path": str(tmp_path / "signing-key.pub.pem"),
                                        "reason": "public-not-private"}
    with pytest.raises(KeyFileError) as info:
        load_private_key(tmp_path / "absent.pem")
    assert info.value.details["reason"] == "missing"  # from bundle.userfile, with the key error's fields
    with pytest.raises(KeyFileError) as info:
        generate(tmp_path)
    assert info.value.details["reason"] == "exists"


def test_an_existing_output_is_named(tmp_path: Path) -> None:
    out = tmp_path / "attestation.json"
    out.write_bytes(b"{}")
    with pytest.raises(OutputExistsError) as info:
        write_attestation(out, b"{}\n")
    _one_sentence(info.value)
    assert dict(info.value.details) == {"path": str(out)}
    assert out.read_bytes() == b"{}"


def test_errors_cross_processes_with_their_class_and_details() -> None:
    original = SchemaViolation("The pins document does not follow its schema; fix it.", document="pins",
                               schema="pins", pointer="/a", reason="bad")
    back = pickle.loads(pickle.dumps(original))
    assert type(back) is SchemaViolation and str(back) == str(original) and back.details == original.details
    plain = pickle.loads(pickle.dumps(BundleError("Something is wrong; do this.", path="x", size=3)))
    assert type(plain) is BundleError and dict(plain.details) == {"path": "x", "size": 3}


def test_details_cannot_be_changed_after_the_fact() -> None:
    exc = BundleError("Something is wrong; do this.", path="x")
    with pytest.raises(TypeError):
        exc.details["path"] = "y"  # type: ignore[index]


def test_a_link_in_a_bundle_is_named_relative_to_the_bundle(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "bagit.txt").write_bytes(b"x")
    (tmp_path / "data" / "link").symlink_to(tmp_path / "bagit.txt")
    with pytest.raises(BundleError) as info:
        list(walk_regular(tmp_path, tmp_path))
    _one_sentence(info.value)
    assert dict(info.value.details) == {"path": "data/link", "reason": "symlink"}
