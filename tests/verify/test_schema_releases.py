"""A bundle of format 1 may name an earlier revision of a payload schema only when that revision's
digest is listed in schemas/format-1.digests.json; its documents still meet the current schemas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bundle import layout
from tests.verify.tamper import Keys, copy_bag, reseal, synthetic_bag, verify_keys  # noqa: F401
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
    monkeypatch.setattr(claims, "released_digests", lambda: {name: frozenset({OLD})})
    code, failed = _verify(old_pin_bag, verify_keys)
    assert code == EXIT_OK, failed


def test_a_released_digest_of_another_schema_does_not_count(old_pin_bag: Path, verify_keys: Keys,  # noqa: F811
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claims, "released_digests", lambda: {"metrics": frozenset({OLD})})
    code, failed = _verify(old_pin_bag, verify_keys)
    assert code == EXIT_FAILED and "predicate.claims" in failed


def test_the_released_digests_file_names_payload_schemas_with_hex_digests() -> None:
    doc = json.loads(claims.RELEASED_DIGESTS.read_bytes())
    assert doc["format"] == layout.FORMAT_VERSION
    assert set(doc["schemas"]) <= set(layout.PAYLOAD_SCHEMAS.values())
    for digests in doc["schemas"].values():
        assert all(len(d) == 64 and int(d, 16) >= 0 for d in digests)
