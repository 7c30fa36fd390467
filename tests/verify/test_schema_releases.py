"""A bundle of format 1 may name an earlier revision of a payload schema only when that revision's
digest is listed in schemas/format-1.digests.json; its documents still meet the current schemas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bundle import layout
from tests.verify.tamper import Keys, copy_bag, edit_json, reseal, synthetic_bag, verify_keys  # noqa: F401
from verify import claims
from verify.api import verify_path
from verify.checks import Trust
from verify.result import EXIT_FAILED, EXIT_OK

OLD = "0" * 63 + "1"


def _old_protocol_pin(pred: dict[str, Any]) -> dict[str, Any]:
    pred["schemas"][layout.PROTOCOL_JSON]["sha256"] = OLD
    return pred


@pytest.fixture()
def old_pin_bag(synthetic_bag: Path, verify_keys: Keys, tmp_path: Path) -> Path:  # noqa: F811
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    reseal(bag, verify_keys.real, predicate=_old_protocol_pin)
    return bag


def _verify(bag: Path, keys: Keys) -> tuple[int, dict[str, str]]:
    outcome = verify_path(bag, Trust(key=keys.real.public_key()))
    return outcome.exit_code, {c.id: c.detail for c in outcome.checks if c.status == "fail"}


def test_an_unknown_schema_revision_fails(old_pin_bag: Path, verify_keys: Keys) -> None:  # noqa: F811
    code, failed = _verify(old_pin_bag, verify_keys)
    assert code == EXIT_FAILED
    assert "schemas this verifier does not know" in failed["predicate.claims"]


def test_a_released_schema_revision_is_accepted(old_pin_bag: Path, verify_keys: Keys,  # noqa: F811
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    name = layout.PAYLOAD_SCHEMAS[layout.PROTOCOL_JSON]
    monkeypatch.setattr(claims, "released_digests", lambda version: {name: frozenset({OLD})})
    code, failed = _verify(old_pin_bag, verify_keys)
    assert code == EXIT_OK, failed


def test_a_released_digest_of_another_schema_does_not_count(old_pin_bag: Path, verify_keys: Keys,  # noqa: F811
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claims, "released_digests", lambda version: {"metrics": frozenset({OLD})})
    code, failed = _verify(old_pin_bag, verify_keys)
    assert code == EXIT_FAILED and "predicate.claims" in failed


@pytest.mark.parametrize("version", range(1, layout.FORMAT_VERSION + 1))
def test_the_released_digests_file_names_payload_schemas_with_hex_digests(version: int) -> None:
    doc = json.loads(claims.released_digests_file(version).read_bytes())
    assert doc["format"] == version
    assert set(doc["schemas"]) <= set(layout.PAYLOAD_SCHEMAS.values())
    for digests in doc["schemas"].values():
        assert all(len(d) == 64 and int(d, 16) >= 0 for d in digests)


def _drop_warnings(doc: dict[str, Any]) -> None:
    doc.pop("warnings")
    doc.pop("truncation")


def test_a_format_2_bundle_that_drops_its_warnings_is_refused(synthetic_bag: Path, verify_keys: Keys,  # noqa: F811
                                                               tmp_path: Path) -> None:
    """A key holder removes metrics.json's warnings and truncation and re-seals: format.fields fails."""
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    edit_json(bag, layout.METRICS_JSON, _drop_warnings)
    reseal(bag, verify_keys.real)
    code, failed = _verify(bag, verify_keys)
    assert code == EXIT_FAILED
    assert "data/metrics.json truncation, data/metrics.json warnings" in failed["format.fields"]


def test_a_format_2_bundle_relabelled_as_format_1_is_refused(synthetic_bag: Path, verify_keys: Keys,  # noqa: F811
                                                              tmp_path: Path) -> None:
    """The same, also claiming format 1 (which lacks those fields): its schema pins give it away."""
    bag = copy_bag(synthetic_bag, tmp_path / "bag")
    edit_json(bag, layout.METRICS_JSON, _drop_warnings)

    def as_format_1(pred: dict[str, Any]) -> dict[str, Any]:
        pred["format"] = {"version": 1, "oldest_verifier": "1.0.0"}
        return pred

    reseal(bag, verify_keys.real, predicate=as_format_1)
    code, failed = _verify(bag, verify_keys)
    assert code == EXIT_FAILED
    assert "states format 1 but names a later format's schema" in failed["predicate.claims"]
