"""The protocol's inference.linear_kernels: whose kernels run the linear layers. Absent, MKL's, as
every protocol before the field ran; "onednn", oneDNN's, another arithmetic that the protocol
records and the forward check, the reproduction and the verifier take from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bundle.schemas import SCHEMA_DIR
from job.cli import main
from job.linear_kernels import DEFAULT, KERNELS, LinearKernels
from job.predictions import read_logits
from job.protocol import DEFAULT_PROTOCOL, InferenceSpec, load_protocol
from tests.factory import edited_json

REPO = Path(__file__).resolve().parents[2]


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
    with LinearKernels("onednn").active():
        assert F.linear is not own
        onednn = F.linear(x, w, b)
        layer = torch.nn.Linear(768, 3072)  # transformers' layers call F.linear too
        with torch.no_grad():
            layer.weight.copy_(w)
            layer.bias.copy_(b)
            assert torch.equal(layer(x), onednn)
    assert F.linear is own
    with LinearKernels(DEFAULT).active():
        assert F.linear is own
    assert not torch.equal(mkl, onednn) and torch.allclose(mkl, onednn, atol=1e-3)
    with pytest.raises(ValueError, match="unknown linear kernels 'cublas'"):
        LinearKernels("cublas")
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
                                       r"inference\.linear_kernels to mkl or .*\.$"):
        LinearKernels("onednn")
    assert F.linear is own


SHAPES = [(768, 768), (3072, 768), (768, 3072)]  # [out, in] of the full-size model's linear layers
HEIGHTS = [1, 7, 16, 54, 150, 230, 329, 512, 773]  # rows: one row to the longest batch of the formal run


def packed_and_plain_differ() -> list[str]:
    """Where oneDNN's products on packed weights differ in any bit from those on the plain weights:
    the full-size model's shapes at the heights of its batches, at this process's thread count."""
    import torch

    from job.linear_kernels import _onednn_linear

    gen = torch.Generator().manual_seed(0)
    kernels, differ = LinearKernels("onednn"), []
    for out, width in SHAPES:
        weight, bias = torch.randn(out, width, generator=gen) * 0.05, torch.randn(out, generator=gen)
        assert kernels.pack(weight, bias)
        for m in HEIGHTS:
            x = torch.randn(m, width, generator=gen)
            with kernels.active():
                ours = torch.nn.functional.linear(x, weight, bias)  # on the packed copy, found by storage
            if not torch.equal(ours, _onednn_linear(x, weight, bias)):
                differ.append(f"{out}x{width} at {m} rows")
    return differ


@pytest.mark.parametrize("threads", [1, 2])
def test_packed_weights_give_the_bits_of_plain_ones(threads: int) -> None:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert packed_and_plain_differ() == []
    finally:
        torch.set_num_threads(before)


def test_packed_weights_give_the_bits_of_plain_ones_under_avx2_limits() -> None:
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "2"}
    code = ("from tests.job.test_linear_kernels import packed_and_plain_differ as f; import sys; "
            "d = f(); print(d); sys.exit(bool(d))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_pack_keeps_a_plain_weight_whose_packed_products_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import job.linear_kernels as lk

    own = lk._reorder
    monkeypatch.setattr(lk, "_reorder", lambda weight: own(weight * 1.001))  # a reorder that changes values
    kernels = LinearKernels("onednn")
    weight, bias = torch.ones(64, 32), torch.zeros(64)
    assert not kernels.pack(weight, bias) and kernels.packed_weights() == []
    assert kernels.pack(torch.ones(64, 32), bias) is False
    assert not LinearKernels("mkl").pack(weight, bias)


def resident_pages(t: Any) -> int:
    """How many pages wholly inside tensor `t` are in this process's memory (/proc/self/pagemap)."""
    page = os.sysconf("SC_PAGE_SIZE")
    start, end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    first, last = -(-start // page), end // page
    if last <= first:
        return 0
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(first * 8)
        flags = np.frombuffer(f.read((last - first) * 8), dtype=np.uint64)
    return int(((flags >> np.uint64(63)) & np.uint64(1)).sum())


def test_a_packed_forward_and_its_check_leave_the_plain_weights_out_of_memory(tmp_path: Path) -> None:
    """With onednn the plain weights are read once, to pack them, and their pages handed back: neither
    the forward nor the check's reference, which finds the packed copies by storage, reads them again.
    Both forwards' logits are those of the plain weights, bit for bit."""
    import torch
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    from job.distilbert import DistilBertClassifier
    from job.forward_check import reference_forward

    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=300, dim=256, n_layers=2, n_heads=4, hidden_dim=1024, num_labels=3)
    DistilBertForSequenceClassification(config).save_pretrained(tmp_path, safe_serialization=True)
    model = DistilBertClassifier.load(tmp_path, LinearKernels("onednn"))
    plain = model.kernels.packed_weights()
    if model.word_rows is None:
        pytest.skip("this platform does not memory-map safetensors or has no /proc/self/pagemap")
    assert len(plain) == 2 * 6 + 2 and all(resident_pages(w) == 0 for w in plain)
    gen = np.random.default_rng(0)
    ids = gen.integers(5, 300, (4, 9))
    mask = np.ones_like(ids)
    padded_mask = (np.arange(9) < np.array([[9], [7], [4], [2]])).astype(np.int64)
    reference = reference_forward(tmp_path, model.tensors, model.kernels)
    with torch.inference_mode():
        ours, theirs = model(ids, mask), reference(ids, mask)
        model(ids, padded_mask)
        assert all(resident_pages(w) == 0 for w in plain)
        unpacked = DistilBertClassifier(model.tensors, 4, kernels=_Unpacked("onednn"))
        assert torch.equal(ours, theirs) and torch.equal(ours, unpacked(ids, mask))
        assert torch.equal(model(ids, padded_mask), unpacked(ids, padded_mask))
    assert sum(resident_pages(w) for w in plain) > 0  # the plain forward read them: the count sees pages


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise to empty the file's page cache")
def test_a_packed_forward_reads_no_small_tensor_from_the_model_file(tmp_path: Path) -> None:
    """With onednn the biases and layer norms are copies, not the file's mapping: read there at every
    product, each would map the file's pages around it back in, whole page-cache folios of the
    neighbouring plain weights where the file was last read with read() (a download, a hash), as
    on Linux 6.18 with ext4. A model of DistilBERT's layer widths, so that readahead makes such
    folios; MKL's kernels keep reading the mapping, as they read the plain weights anyway."""
    import torch
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    from job.distilbert import DistilBertClassifier
    from job.mapped_pages import file_backing

    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=300, dim=768, n_layers=2, n_heads=12, hidden_dim=3072, num_labels=2)
    DistilBertForSequenceClassification(config).save_pretrained(tmp_path, safe_serialization=True)
    weights = tmp_path / "model.safetensors"
    fd = os.open(weights, os.O_RDONLY)
    try:  # the file's pages out of the page cache, then in again by read(), as after a download
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    weights.read_bytes()
    model = DistilBertClassifier.load(tmp_path, LinearKernels("onednn"))
    if model.word_rows is None:
        pytest.skip("this platform does not memory-map safetensors or has no /proc/self/pagemap")
    small = [t for t in model.tensors.values() if t.dim() == 1]
    assert len(small) == 2 * 10 + 2 + 2 and all(file_backing(t) is None for t in small)
    plain = model.kernels.packed_weights()
    ids = np.random.default_rng(0).integers(5, 300, (4, 9))
    with torch.inference_mode():
        model(ids, np.ones_like(ids))
    # without the copies, 1,017 of the plain weights' 14,400 pages here (Linux 6.18, ext4)
    assert sum(resident_pages(w) for w in plain) <= 16
    mkl = DistilBertClassifier.load(tmp_path, LinearKernels("mkl"))
    assert all(file_backing(t) is not None for t in mkl.tensors.values() if t.dim() == 1)


class _Unpacked(LinearKernels):
    def pack(self, weight: Any, bias: Any = None) -> bool:
        return False
