"""The edited protocol copies that benchmarks hand to `job run --protocol`
(scripts/generated_split.write_protocol: bench.py's formal run, bench_sweep's loop, bench_memory and
the generated split's protocol): the fields asked for, nothing else changed, the source document
untouched, and a copy the job's own loader accepts."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from job.protocol import DEFAULT_PROTOCOL, load_protocol
from scripts.generated_split import make_protocol, write_protocol


def test_a_copy_sets_the_inference_fields_asked_for_and_nothing_else(tmp_path: Path) -> None:
    formal = load_protocol(DEFAULT_PROTOCOL)
    source = copy.deepcopy(formal.doc)
    path = write_protocol(tmp_path / "not" / "yet" / "protocol.json", formal.doc,
                          {"linear_kernels": "onednn", "torch_threads": 8})

    assert formal.doc == source  # the caller's document is not edited in place
    text = path.read_text()
    written = json.loads(text)
    assert text == json.dumps(written, indent=2) + "\n"  # as a person would write it: indented, one final newline
    assert written["inference"] == {**source["inference"], "linear_kernels": "onednn", "torch_threads": 8}
    assert {k: v for k, v in written.items() if k != "inference"} == {
        k: v for k, v in source.items() if k != "inference"}

    loaded = load_protocol(path)  # the job reads the copy as it reads any protocol
    assert loaded.inference.linear_kernels == "onednn" and loaded.inference.torch_threads == 8


def test_a_copy_without_edits_keeps_the_protocols_settings(tmp_path: Path) -> None:
    formal = load_protocol(DEFAULT_PROTOCOL)
    loaded = load_protocol(write_protocol(tmp_path / "protocol.json", formal.doc))
    assert loaded.doc == formal.doc and loaded.inference == formal.inference


def test_the_generated_splits_protocol_resizes_the_pools_and_sets_threads_only_when_asked(tmp_path: Path) -> None:
    default = load_protocol(make_protocol(tmp_path / "a.json", 2000))
    threaded = load_protocol(make_protocol(tmp_path / "b.json", 2000, threads=2))

    assert [size for _, size in default.split.pools] == [256, 256, 1488]
    assert default.inference.torch_threads == load_protocol(DEFAULT_PROTOCOL).inference.torch_threads
    assert threaded.inference.torch_threads == 2
    assert {**threaded.doc, "inference": default.doc["inference"]} == default.doc
