"""`python -m job run --license/--publisher/--author/--contact`: the values reach the crate and
the signed predicate; a malformed one ends the run with one sentence and exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bundle import layout
from bundle.dsse import Envelope
from job.cli import main


@pytest.mark.parametrize(("option", "value"), [("--license", "CC-BY-4.0"), ("--contact", "nobody"),
                                               ("--author", "Ada <orcid>")])
def test_a_malformed_publication_option_is_one_sentence(tiny_world: tuple[Path, Path], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str], option: str,
                                                        value: str) -> None:
    protocol, lock = tiny_world
    out = tmp_path / "run"
    rc = main(["run", "--protocol", str(protocol), "--resources", str(lock), "--out", str(out),
               "--ephemeral-key", "--no-progress", option, value])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"error: {option} ") and err.count("\n") == 1
    assert not out.exists() and "Traceback" not in err


def test_defaults_are_signed(tiny_bundle: Path) -> None:
    envelope = json.loads((tiny_bundle / "provenance.intoto.json").read_bytes())
    predicate = json.loads(Envelope.from_dict(envelope).payload)["predicate"]
    assert predicate["publication"] == {
        "license": "https://spdx.org/licenses/CC-BY-4.0",
        "publisher": {"name": "calibration-runs", "id": "https://calibration-runs.example/"},
        "authors": [], "contact": None}
    assert predicate["format"] == {"version": layout.FORMAT_VERSION, "oldest_verifier": layout.OLDEST_VERIFIER}


def test_the_verifier_requires_the_crate_to_state_the_signed_publication(tiny_bundle: Path) -> None:
    from verify.crate import check_publication, parse
    from verify.result import Failed

    _, graph = parse((tiny_bundle / "data" / "ro-crate-metadata.json").read_bytes())
    signed = {"license": "https://spdx.org/licenses/CC-BY-4.0",
              "publisher": {"name": "calibration-runs", "id": "https://calibration-runs.example/"},
              "authors": [], "contact": None}
    assert "calibration-runs" in check_publication(graph, signed)
    for key, value in [("license", "https://spdx.org/licenses/MIT"), ("authors", [{"name": "X", "id": None}]),
                       ("publisher", {"name": "someone else", "id": "https://calibration-runs.example/"})]:
        with pytest.raises(Failed, match=key):
            check_publication(graph, {**signed, key: value})
