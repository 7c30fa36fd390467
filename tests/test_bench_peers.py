"""The forward benchmark (scripts/bench_peers.py): its figures, its workers and its separate environment.

The benchmark's timings are measured, never asserted; what is tested is that every figure it
prints is computed from what the paths returned: a logit difference that is really taken (a one-ulp
change shows, an exact zero says every bit matched), the workers' protocol on a generated model,
and that ONNX Runtime and OpenVINO stay out of the job's locks."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.factory import REPO
from tests.factory import make_model as make_tiny_model

sys.path.insert(0, str(REPO / "scripts"))

import bench_peers
from bench_peer_worker import GEMM_REFERENCES
from bench_peers_stats import fmt_diff, logit_difference, spread

PEER_PACKAGES = ("onnxruntime", "openvino", "onnx")


def test_a_one_ulp_difference_shows_and_a_zero_means_every_bit_matched() -> None:
    rng = np.random.default_rng(0)
    job = rng.normal(size=(40, 3)).astype(np.float32)
    same = job.copy()
    d = logit_difference(same, job)
    assert d["bit_identical"] and d["max_abs"] == 0.0 and d["rows_differing"] == 0
    assert fmt_diff(d) == "0 (all 40 rows bit-identical)"

    moved = job.copy()
    moved[17, 2] = np.nextafter(moved[17, 2], np.float32(np.inf))
    d = logit_difference(moved, job)
    assert not d["bit_identical"] and d["rows_differing"] == 1 and d["max_ulps"] == 1.0
    assert d["max_abs"] == float(np.spacing(np.abs(job[17, 2])))
    assert d["argmax_changes"] == 0

    flipped = job.copy()
    flipped[3] = flipped[3][::-1]
    assert logit_difference(flipped, job)["argmax_changes"] == int(job[3].argmax() != job[3][::-1].argmax())


def test_nan_logits_are_counted_not_hidden_in_the_largest_difference() -> None:
    job = np.arange(12, dtype=np.float32).reshape(6, 2)
    broken = job.copy()
    broken[2, 1] = np.nan
    broken[4, 0] += 0.5
    d = logit_difference(broken, job)
    assert d["nonfinite_rows"] == 1 and d["rows_differing"] == 2 and d["max_abs"] == 0.5
    assert fmt_diff(d) == "NaN or inf in 1/6 rows"


def test_a_difference_of_an_array_with_itself_or_of_other_rows_is_refused() -> None:
    job = np.ones((4, 2), dtype=np.float32)
    with pytest.raises(ValueError, match="same memory"):
        logit_difference(job, job)
    with pytest.raises(ValueError, match="cannot be compared"):
        logit_difference(job[:3].copy(), job)


def test_spread_is_median_and_range_of_the_timed_passes() -> None:
    s = spread([2.0, 1.0, 4.0])
    assert (s["median"], s["min"], s["max"], s["passes"]) == (2.0, 1.0, 4.0, 3)
    assert s["spread"] == pytest.approx(1.5)
    with pytest.raises(ValueError):
        spread([])


def _batches(model_dir: Path, out: Path) -> Path:
    """Three right-padded batches of the tiny model's vocabulary (33 tokens), of different widths."""
    rng = np.random.default_rng(1)
    arrays = {}
    for i, (rows, width) in enumerate([(4, 9), (3, 5), (2, 2)]):
        lengths = rng.integers(2, width + 1, size=rows)
        lengths[0] = width
        mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
        ids = np.where(mask == 1, rng.integers(8, 33, size=(rows, width)), 0).astype(np.int64)
        ids[:, 0] = 2  # [CLS]
        arrays[f"ids_{i}"], arrays[f"mask_{i}"] = ids, mask
    np.savez(out, **arrays)
    return out


def _serve(path: str, python: str, model_dir: Path, batches: Path, tmp: Path, extra: list[str] = ()) -> tuple[
        dict[str, object], dict[str, object], np.ndarray]:
    env = bench_peers.worker_env("native")
    w = bench_peers.Worker(path, python, ["--model-dir", str(model_dir), "--batches", str(batches),
                                          "--threads", "1", *extra], env, tmp / f"{path}.log")
    try:
        ready = w.read(300)["ready"]
        first = w.ask({"op": "pass"}, 300)
        second = w.ask({"op": "pass"}, 300)
        assert first["sha256"] == second["sha256"]
        done = w.ask({"op": "finish", "logits": str(tmp / f"{path}.npy")}, 300)
    finally:
        w.stop()
    return ready, done, np.load(tmp / f"{path}.npy")


@pytest.mark.slow  # two worker processes, each importing torch and transformers
def test_the_workers_run_the_jobs_forward_and_transformers_on_the_same_batches(tmp_path: Path) -> None:
    model_dir = make_tiny_model(tmp_path / "model")
    batches = _batches(model_dir, tmp_path / "batches.npz")
    job_ready, job_done, job = _serve("job", sys.executable, model_dir, batches, tmp_path)
    eager_ready, eager_done, eager = _serve("eager", sys.executable, model_dir, batches, tmp_path)

    assert job_ready["forward"]["name"] == "packed-distilbert" and job_ready["threads"] == 1
    assert job_ready["thread_choice"]["chosen_by"] == "--threads" and job_ready["deterministic"] is True
    assert eager_ready["attention"] == "eager" and eager_ready["threads"] == 1
    assert job.shape == eager.shape == (9, 2) and np.isfinite(job).all()
    assert job_done["passes_identical"] and eager_done["passes_identical"]
    assert 0 < job_done["peak_rss_mb"] < 4096
    d = logit_difference(eager, job)  # the same model through two forwards: equal to float32 rounding
    assert d["max_abs"] < 1e-5 and d["argmax_changes"] == 0


@pytest.mark.slow  # two worker processes, each importing torch
def test_the_jobs_pass_at_two_threads_runs_two_batches_at_once_with_one_threads_logits(tmp_path: Path) -> None:
    model_dir = make_tiny_model(tmp_path / "model")
    batches = _batches(model_dir, tmp_path / "batches.npz")
    one_ready, _, one = _serve("job", sys.executable, model_dir, batches, tmp_path)
    two_ready, done, two = _serve("job", sys.executable, model_dir, batches, tmp_path, ["--threads", "2"])
    assert (one_ready["forward_workers"], two_ready["forward_workers"]) == (1, 2)
    assert two_ready["thread_choice"]["layout"] == "batches" and done["passes_identical"]
    assert two.tobytes() == one.tobytes()


@pytest.mark.slow  # a worker process importing torch
def test_at_two_threads_the_gemm_reference_times_both_layouts_and_keeps_the_faster(tmp_path: Path) -> None:
    model_dir = make_tiny_model(tmp_path / "model")
    batches = _batches(model_dir, tmp_path / "batches.npz")
    w = bench_peers.Worker("gemm", sys.executable, ["--model-dir", str(model_dir), "--batches", str(batches),
                                                    "--threads", "2"], bench_peers.worker_env("native"),
                           tmp_path / "w.log")
    try:
        ready = w.read(300)["ready"]
        x = w.ask({"op": "pass"}, 300)
        w.ask({"op": "finish"}, 300)
    finally:
        w.stop()
    assert ready["threads"] == 2 and ready["layouts"] == ["operators", "batches"]
    by = x["gemm_seconds_by_layout"]
    assert set(by) == {"operators", "batches"} and all(0 < v < x["wall"] for v in by.values())
    assert x["gemm_seconds"] <= min(by.values())  # each batch's faster layout


@pytest.mark.slow  # a worker process importing torch
def test_the_onednn_candidate_runs_the_jobs_forward_on_other_linear_kernels(tmp_path: Path) -> None:
    model_dir = make_tiny_model(tmp_path / "model")
    batches = _batches(model_dir, tmp_path / "batches.npz")
    _, _, job = _serve("job", sys.executable, model_dir, batches, tmp_path)
    ready, done, onednn = _serve("job-onednn", sys.executable, model_dir, batches, tmp_path)
    assert ready["linear_kernels"] == "onednn" and ready["forward"]["name"] == "packed-distilbert"
    assert done["passes_identical"]
    d = logit_difference(onednn, job)  # other kernels: rounding apart, never another answer
    assert 0 < d["max_abs"] < 1e-4 and d["argmax_changes"] == 0 and d["nonfinite_rows"] == 0


@pytest.mark.slow  # a worker process importing torch
def test_a_worker_that_cannot_load_its_path_says_why_in_one_sentence(tmp_path: Path) -> None:
    batches = _batches(tmp_path, tmp_path / "batches.npz")
    w = bench_peers.Worker("job", sys.executable, ["--model-dir", str(tmp_path / "absent"), "--batches",
                                                   str(batches), "--threads", "1"],
                           bench_peers.worker_env("native"), tmp_path / "job.log")
    with pytest.raises(bench_peers.WorkerError, match=r"^the job worker failed: JobError: .*\S$") as exc:
        w.read(300)
    assert "\n" not in str(exc.value) and w.proc.poll() is not None


PEER_PYTHON = REPO / ".bench-venv" / "bin" / "python"


@pytest.mark.slow
@pytest.mark.skipif(not PEER_PYTHON.exists(), reason="no benchmark environment (make bench-peers-env)")
@pytest.mark.parametrize("path", ["ort", "openvino"])
def test_onnx_runtime_and_openvino_run_the_exported_model_to_the_jobs_logits(tmp_path: Path, path: str) -> None:
    model_dir = make_tiny_model(tmp_path / "model")
    batches = _batches(model_dir, tmp_path / "batches.npz")
    p = bench_peers.Prepared("tiny", model_dir, batches, [], 0, 9)
    onnx = bench_peers.export_onnx(p, str(PEER_PYTHON), tmp_path / "onnx")
    _, _, peer = _serve(path, str(PEER_PYTHON), model_dir, batches, tmp_path, ["--onnx", str(onnx)])
    _, _, job = _serve("job", sys.executable, model_dir, batches, tmp_path)
    d = logit_difference(peer, job)
    assert d["max_abs"] < 1e-4 and d["argmax_changes"] == 0


@pytest.mark.slow  # worker processes importing torch (and ONNX Runtime in the benchmark environment)
@pytest.mark.parametrize("path", ["gemm", "gemm-onednn", "gemm-mlas"])
def test_each_gemm_reference_times_its_own_kernel_on_every_batchs_real_tokens(tmp_path: Path, path: str) -> None:
    if path == "gemm-mlas" and not PEER_PYTHON.exists():
        pytest.skip("no benchmark environment (make bench-peers-env)")
    model_dir = make_tiny_model(tmp_path / "model")
    batches = _batches(model_dir, tmp_path / "batches.npz")
    python = bench_peers.worker_python(path, str(PEER_PYTHON))
    w = bench_peers.Worker(path, python, ["--model-dir", str(model_dir), "--batches", str(batches),
                                          "--threads", "1"], bench_peers.worker_env("native"), tmp_path / "w.log")
    try:
        ready = w.read(300)["ready"]
        passes = [w.ask({"op": "pass"}, 300) for _ in range(2)]
        w.ask({"op": "finish"}, 300)
    finally:
        w.stop()
    config = json.loads((model_dir / "config.json").read_text())
    d, h, layers = config["dim"], config["hidden_dim"], config["n_layers"]
    with np.load(batches) as z:
        tokens = sum(int(z[k].sum()) for k in z.files if k.startswith("mask_"))
    assert ready["kernel"] == GEMM_REFERENCES[path][0] and ready["threads"] == 1
    # the library that ran, and the weights in the kernel's own layout: none for MKL's F.linear,
    # all three for oneDNN (each passed pack's probe); ONNX Runtime does not say
    assert ready["library"].startswith("onnxruntime " if path == "gemm-mlas" else "torch ")
    assert ready["packed_weights"] == {"gemm": 0, "gemm-onednn": 3, "gemm-mlas": None}[path]
    for x in passes:  # the FLOPs of every layer's products on each batch's real tokens, timed
        assert x["gemm_flops"] == 2 * tokens * layers * (4 * d * d + 2 * d * h)
        assert 0 < x["gemm_seconds"] < x["wall"]


def test_the_gemm_references_run_beside_the_paths_whose_kernels_they_are() -> None:
    assert bench_peers.gemm_paths(["job", "eager"]) == ["gemm"]
    assert bench_peers.gemm_paths(["job-onednn", "ort", "openvino"]) == ["gemm", "gemm-onednn", "gemm-mlas"]
    assert bench_peers.worker_python("gemm-mlas", "/peer") == bench_peers.worker_python("ort", "/peer") == "/peer"
    assert bench_peers.worker_python("gemm-onednn", "/peer") == sys.executable


def _locked(path: Path) -> dict[str, list[str]]:
    """{package: its sha256 hashes} of a hash-locked requirements file."""
    out: dict[str, list[str]] = {}
    name = None
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", line)
        if m:
            name = m.group(1).lower()
            out[name] = []
        elif name and (h := re.search(r"--hash=sha256:([0-9a-f]{64})", line)):
            out[name].append(h.group(1))
    return out


def test_the_peers_lock_is_hashed_and_apart_from_the_jobs_and_the_verifiers_requirements() -> None:
    peers = _locked(REPO / "scripts" / "bench-peers.lock")
    job = {**_locked(REPO / "requirements.lock"), **_locked(REPO / "requirements-dev.lock")}
    assert set(PEER_PACKAGES) <= set(peers) and all(peers.values())
    assert not set(peers) & set(job), "a package is locked twice: pip refuses two pins of one name"
    assert not set(PEER_PACKAGES) & set(job)
    verifier = (REPO / "verify" / "requirements.txt").read_text().lower()
    assert not any(re.search(rf"^{p}\b", verifier, re.MULTILINE) for p in PEER_PACKAGES)


def _block(tmp: Path, threads: str, walls: dict[str, list[float]], logits: dict[str, np.ndarray],
           gemm: tuple[float, float], refs: dict[str, tuple[float, float]] | None = None) -> dict[str, object]:
    paths: dict[str, object] = {}
    for path, w in walls.items():
        np.save(tmp / f"{threads}-{path}.npy", logits[path])
        paths[path] = {"info": {"threads": 2 if threads == "default" else 1}, "warmup": [{"wall": 9.0}],
                       "passes": [{"wall": x, "batch_walls": [x / 4, 3 * x / 4]} for x in w], "peak_rss_mb": 500.0,
                       "logits": str(tmp / f"{threads}-{path}.npy")}
    for ref, (flops, seconds) in {"gemm": gemm, **(refs or {})}.items():
        paths[ref] = {"info": {}, "passes": [{"gemm_flops": flops, "gemm_seconds": seconds}], "peak_rss_mb": 1.0}
    return {"model": "m", "isa": "native", "threads": threads, "load_avg": [0.1, 0.2], "paths": paths, "errors": {}}


def test_the_tables_take_every_figure_from_the_passes_and_the_logits(tmp_path: Path) -> None:
    job = np.array([[1.0, -1.0], [0.3, 0.25]], dtype=np.float32)
    eager = job.copy()
    eager[1, 0] = np.nextafter(eager[1, 0], np.float32(0))
    p = bench_peers.Prepared("m", tmp_path, tmp_path / "b.npz", [3, 4], 200, 2)
    one = bench_peers.summarise(_block(tmp_path, "1", {"job": [2.0, 4.0, 3.0], "eager": [6.0, 6.0, 6.0]},
                                       {"job": job, "eager": eager}, (400.0, 2.0)), p)
    default = bench_peers.summarise(_block(tmp_path, "default", {"job": [1.5, 1.5, 1.5]}, {"job": job.copy()},
                                           (400.0, 1.0)), p)
    j, e = one["paths"]["job"], one["paths"]["eager"]
    assert j["time"]["median"] == 3.0 and j["rows_per_s"] == pytest.approx(2 / 3)
    assert j["batch_walls_median"] == [0.75, 2.25]
    assert e["relative_to_job"] == pytest.approx(2.0) and j["relative_to_job"] == 1.0
    assert j["useful_gemm_fraction"] == pytest.approx((200 / 3.0) / (400 / 2.0))  # useful rate / GEMM rate
    assert e["logits_vs_job"]["rows_differing"] == 1 and e["logits_vs_job"]["max_ulps"] == 1.0
    assert j["logits_vs_job"] is None and "gemm" not in one["paths"]
    text = bench_peers.report([one, default], {"m": p})
    assert "| eager | 1 (1) | 6.00 | 6.00–6.00 | 0.3 | 2.00 |" in text
    assert "| m | native | 2 | 3.00 | 1.50 | 0.50 | 0 (all 2 rows bit-identical) |" in text


def test_every_kernels_gemm_rate_is_reported_and_the_useful_fraction_stays_over_mkls(tmp_path: Path) -> None:
    job = np.array([[1.0, -1.0]], dtype=np.float32)
    p = bench_peers.Prepared("m", tmp_path, tmp_path / "b.npz", [3], 2e11, 1)
    block = bench_peers.summarise(_block(tmp_path, "1", {"job": [2.0]}, {"job": job}, (4e11, 2.0),
                                         {"gemm-onednn": (4e11, 1.6), "gemm-mlas": (4e11, 1.25)}), p)
    assert {k: v["gflop_per_s_median"] for k, v in block["gemm_kernels"].items()} == pytest.approx(
        {"MKL": 200.0, "oneDNN": 250.0, "MLAS": 320.0})
    assert block["paths"]["job"]["useful_gemm_fraction"] == pytest.approx(100.0 / 200.0)
    assert not {"gemm", "gemm-onednn", "gemm-mlas"} & set(block["paths"])
    assert "threads 1: MKL 200.0, oneDNN 250.0, MLAS 320.0" in bench_peers.report([block], {"m": p})
