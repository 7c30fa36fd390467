"""The protocol's inference.linear_kernels: whose kernels run the linear layers. Absent, MKL's, as
every protocol before the field ran; "onednn", oneDNN's, another arithmetic that the protocol
records and the forward check, the reproduction and the verifier take from it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bundle.schemas import SCHEMA_DIR
from job.cli import main
from job.linear_kernels import DEFAULT, KERNELS, linear_kernels
from job.predictions import read_logits
from job.protocol import DEFAULT_PROTOCOL, InferenceSpec, load_protocol
from tests.factory import edited_json


def _with_kernels(protocol: Path, out: Path, kernels: str) -> Path:
    return edited_json(protocol, out, lambda doc: doc["inference"].update(linear_kernels=kernels))


def test_a_protocol_without_the_field_runs_mkl_as_every_earlier_protocol_did() -> None:
    doc = json.loads(DEFAULT_PROTOCOL.read_text())
    assert "linear_kernels" not in doc["inference"]
    assert load_protocol(DEFAULT_PROTOCOL).inference.linear_kernels == DEFAULT == "mkl"
    assert InferenceSpec.from_protocol({**doc["inference"], "linear_kernels": "onednn"}).linear_kernels == "onednn"
    assert KERNELS == ("mkl", "onednn")
    schema = json.loads((SCHEMA_DIR / "protocol.schema.json").read_text())
    assert schema["properties"]["inference"]["properties"]["linear_kernels"]["enum"] == list(KERNELS)


def test_the_report_names_the_kernels_only_where_the_protocol_does() -> None:
    from bundle.views.report import _protocol_paragraph

    doc = json.loads(DEFAULT_PROTOCOL.read_text())
    said = {}
    for kernels in (None, *KERNELS):
        inference = {**doc["inference"], **({} if kernels is None else {"linear_kernels": kernels})}
        said[kernels] = _protocol_paragraph({**doc, "inference": inference}, "0" * 64)
    assert "linear layers" not in said[None]  # as every report before the field
    assert "4 torch threads, linear layers on MKL's kernels, deterministic algorithms on" in said["mkl"]
    assert "4 torch threads, linear layers on oneDNN's kernels, deterministic algorithms on" in said["onednn"]
    assert said["mkl"].replace("linear layers on MKL's kernels, ", "") == said[None]


def test_onednn_kernels_run_only_within_the_block_and_round_otherwise_than_mkl() -> None:
    import torch
    import torch.nn.functional as F

    own = F.linear
    x, w, b = (torch.randn(*shape, generator=torch.Generator().manual_seed(i)) for i, shape in
               enumerate([(37, 768), (3072, 768), (3072,)]))
    mkl = F.linear(x, w, b)
    with linear_kernels("onednn"):
        assert F.linear is not own
        onednn = F.linear(x, w, b)
        layer = torch.nn.Linear(768, 3072)  # transformers' layers call F.linear too
        with torch.no_grad():
            layer.weight.copy_(w)
            layer.bias.copy_(b)
            assert torch.equal(layer(x), onednn)
    assert F.linear is own
    with linear_kernels(DEFAULT):
        assert F.linear is own
    assert not torch.equal(mkl, onednn) and torch.allclose(mkl, onednn, atol=1e-3)
    with pytest.raises(ValueError, match="unknown linear kernels 'cublas'"), linear_kernels("cublas"):
        pass
    assert F.linear is own


def test_a_run_on_onednn_kernels_is_checked_signed_and_verified(tiny_world: tuple[Path, Path], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from verify.api import verify_path
    from verify.context import Trust
    from verify.signature import load_trusted_key

    protocol, lock = tiny_world
    bundles = {}
    for kernels in KERNELS:
        out = tmp_path / kernels
        rc = main(["run", "--protocol", str(_with_kernels(protocol, tmp_path / f"{kernels}.json", kernels)),
                   "--resources", str(lock), "--out", str(out), "--ephemeral-key", "--no-progress"])
        assert rc == 0, capsys.readouterr().err
        trusted = load_trusted_key(str(tmp_path / f"{kernels}.key" / "signing-key.pub.pem"))
        assert verify_path(out, Trust(key=trusted)).exit_code == 0
        bundles[kernels] = out
    recorded = json.loads((bundles["onednn"] / "data" / "protocol.json").read_text())
    assert recorded["inference"]["linear_kernels"] == "onednn"
    assert "torch threads, linear layers on oneDNN's kernels, deterministic" in (
        bundles["onednn"] / "data" / "report.md").read_text()
    # The forward check ran on the same kernels on both sides: its batch without padding is bit-equal.
    check = json.loads((bundles["onednn"] / "data" / "environment.json").read_text())["forward_check"]
    assert check["unpadded"]["identical"] is True, check
    for pool in ("calibration", "audit"):
        mkl, _ = read_logits(bundles["mkl"] / "data" / "predictions" / f"{pool}.parquet")
        onednn, _ = read_logits(bundles["onednn"] / "data" / "predictions" / f"{pool}.parquet")
        assert not np.array_equal(mkl, onednn)  # another arithmetic,
        assert np.abs(mkl - onednn).max() < 1e-4 and (mkl.argmax(1) == onednn.argmax(1)).all()  # the same model


def test_kernels_the_schema_does_not_name_are_refused_before_any_work(tiny_world: tuple[Path, Path], tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    protocol, lock = tiny_world
    out = tmp_path / "out"
    rc = main(["run", "--protocol", str(_with_kernels(protocol, tmp_path / "p.json", "cublas")), "--resources",
               str(lock), "--out", str(out), "--ephemeral-key", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("error: ") and "schemas/protocol.schema.json" in err[-1], err
    assert "Traceback" not in "\n".join(err) and not out.exists()


def test_a_torch_without_onednn_is_refused_in_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch.nn.functional as F

    from job.errors import JobError

    own = F.linear
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    with pytest.raises(JobError, match=r"^The protocol asks for oneDNN's linear kernels .*; set "
                                       r"inference\.linear_kernels to mkl or .*\.$"), linear_kernels("onednn"):
        pass
    assert F.linear is own
