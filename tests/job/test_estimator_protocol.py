"""The protocol's metrics.estimators: parameters out of range, missing or contradictory are refused
before any work with one sentence naming the field; a protocol without the list runs as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from job.errors import JobError
from job.estimator_spec import DEFAULT_ESTIMATORS
from job.protocol import DEFAULT_PROTOCOL, load_protocol


def protocol_with(tmp_path: Path, edit: Any) -> Path:
    doc = json.loads(DEFAULT_PROTOCOL.read_text())
    edit(doc)
    path = tmp_path / "protocol.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def estimator(index: int, **changes: Any) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        entry = doc["metrics"]["estimators"][index]
        for key, value in changes.items():
            if value is None:
                del entry[key]
            else:
                entry[key] = value
    return edit


BAD = {
    "bins below 2": (estimator(0, bins=1), "$.metrics.estimators[0].bins, 1 is less than the minimum of 2"),
    "bins not an integer": (estimator(2, bins=7.5), "$.metrics.estimators[2].bins"),
    "bandwidth zero": (estimator(4, bandwidth=0), "$.metrics.estimators[4].bandwidth"),
    "bandwidth negative": (estimator(4, bandwidth=-0.1), "$.metrics.estimators[4].bandwidth"),
    "level one": (estimator(5, level=1.0), "$.metrics.estimators[5].level, 1.0 is greater than or equal to"),
    "level zero": (estimator(5, level=0), "$.metrics.estimators[5].level, 0 is less than or equal to"),
    "interval level above one": (estimator(3, interval={"method": "paired-bootstrap", "level": 1.5}),
                                 "$.metrics.estimators[3].interval.level"),
    "unknown kind": (estimator(3, kind="ace"), "$.metrics.estimators[3].kind"),
    "bins missing": (estimator(1, bins=None), "metrics.estimators[1] (binned) has no bins"),
    "debiased l1": (estimator(2, norm="l1"), "metrics.estimators[2].debias is true with norm 'l1'"),
    "repeated id": (estimator(1, id="ece-equal-mass"), "repeat the id 'ece-equal-mass'"),
    "interval without bootstrap": (lambda doc: doc.pop("bootstrap"), "asks for a paired-bootstrap interval but"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_estimator_is_refused_in_one_sentence_naming_the_field(case: str, tmp_path: Path) -> None:
    edit, words = BAD[case]
    with pytest.raises(JobError) as caught:
        load_protocol(protocol_with(tmp_path, edit))
    message = str(caught.value)
    assert words in message, message
    assert "\n" not in message and message.endswith(".")


def test_the_formal_protocol_pre_registers_every_default_estimator() -> None:
    protocol = load_protocol()
    assert protocol.doc["metrics"]["estimators"] == json.loads(json.dumps(DEFAULT_ESTIMATORS))
    assert [s.id for s in protocol.estimators] == [e["id"] for e in DEFAULT_ESTIMATORS]
    smooth = next(s for s in protocol.estimators if s.kind == "smooth-ece")
    assert smooth.bandwidth is None and smooth.eps == 0.001 and smooth.refine == 10


def test_a_protocol_without_estimators_still_loads_and_asks_for_none(tmp_path: Path) -> None:
    protocol = load_protocol(protocol_with(tmp_path, lambda doc: doc["metrics"].pop("estimators")))
    assert protocol.estimators == ()
