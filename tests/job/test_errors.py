"""job.errors: one root, JobError, whose errors carry their facts as `details` beside the one
sentence a user reads; checked on real failures of the job's functions."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from job.errors import JobError, PinMismatch, ProtocolBeyondLimits
from job.protocol import Protocol, load_protocol
from job.resources import check_file
from tests.factory import REPO, sha256


def test_a_file_that_is_not_the_pinned_one_says_which_field_differs(tmp_path: Path) -> None:
    local = tmp_path / "config.json"
    local.write_bytes(b"{}\n")
    with pytest.raises(PinMismatch) as info:
        check_file("model file config.json", local, 4, None)
    assert dict(info.value.details) == {"path": str(local), "field": "size", "expected": 4, "found": 3}
    with pytest.raises(PinMismatch) as info:
        check_file("model file config.json", local, 3, "0" * 64)
    assert dict(info.value.details) == {"path": str(local), "field": "sha256", "expected": "0" * 64,
                                        "found": sha256(local)}
    assert "\n" not in str(info.value) and "expected " + "0" * 64 in str(info.value)
    with pytest.raises(JobError) as missing:
        check_file("model file config.json", tmp_path / "absent.json", 3, None)
    assert dict(missing.value.details) == {"path": str(tmp_path / "absent.json"), "reason": "missing"}


def test_a_protocol_beyond_the_formats_limits_is_a_job_error_that_says_which_size() -> None:
    doc = json.loads((REPO / "provenance.json").read_text())
    doc["resources"]["dataset"]["rows"] = 50_000
    for pool, size in zip(doc["split"]["pools"], (256, 256, 49_488), strict=True):
        pool["size"] = size
    doc["bootstrap"]["resamples"] = 5000
    raw = json.dumps(doc).encode()
    with pytest.raises(ProtocolBeyondLimits) as info:
        Protocol.from_bytes(raw, doc)
    assert isinstance(info.value, JobError) and "resamples" in str(info.value.details["reason"])


def test_a_protocol_against_its_schema_names_the_file_and_the_pointer(tmp_path: Path) -> None:
    doc = json.loads((REPO / "provenance.json").read_text())
    doc["inference"]["batch_size"] = 0
    path = tmp_path / "protocol.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(JobError) as info:
        load_protocol(path)
    details = dict(info.value.details)
    assert details["path"] == str(path) and details["schema"] == "protocol"
    assert details["pointer"] == "/inference/batch_size"
    path.write_text("{")
    with pytest.raises(JobError) as info:
        load_protocol(path)
    assert info.value.details["reason"] == "invalid-json"
    with pytest.raises(JobError) as info:
        load_protocol(tmp_path / "absent.json")
    assert info.value.details["reason"] == "missing"


def test_job_errors_cross_processes_with_their_class_and_details() -> None:
    original = PinMismatch("The file is not the pinned one; fetch it again.", path="a", field="size",
                           expected=4, found=3)
    back = pickle.loads(pickle.dumps(original))
    assert type(back) is PinMismatch and str(back) == str(original) and back.details == original.details


def test_a_worker_that_failed_to_start_on_a_subclass_reports_its_sentence() -> None:
    pytest.importorskip("ray")
    from job.sharded import _cause

    crash = RuntimeError("The actor died.\n  File x\njob.errors.PinMismatch: The model file is not the pinned one; "
                         "fetch it again.\n")
    assert _cause(crash) == "A worker could not start: The model file is not the pinned one; fetch it again."
