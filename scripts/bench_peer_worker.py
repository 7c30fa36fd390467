#!/usr/bin/env python3
"""One path of the forward benchmark (scripts/bench_peers.py) in a process of its own.

    python scripts/bench_peer_worker.py --path job --model-dir DIR --batches B.npz --threads 1|default

The driver starts one worker per path, so each path's peak RSS is its own, and drives them in
turn over stdin/stdout, one JSON object a line (the worker's own stdout goes to stderr, so that
no library's print can corrupt the exchange):

    -> {"op": "pass"}                  <- {"wall": s, "cpu": s, "batch_walls": [...], "sha256": hex}
    -> {"op": "pass", "batches": [i]}  <- {"wall": s, "batches": [i]}   (a warm-up on some batches)
    -> {"op": "finish", "logits": F}   <- {"peak_rss_mb": MB, "passes_identical": bool}

A pass runs every batch of B.npz (`ids_<i>`, `mask_<i>`: right-padded int64 [rows, longest], in
the job's batch order) through the path's forward and times each call, the conversion of the
logits to a float32 numpy array included; the job's paths run a pass as a run does
(job.inference.run_batches, as many batches at once as its thread layout runs) and time it whole,
so their `batch_walls` hold one figure, the pass's. The first full pass's logits are written to F at `finish`;
every later pass is compared with it bit for bit. Before the first command the worker answers
{"ready": {...}} with what it loaded and how many threads it runs, or {"error": "..."}.

Paths: `job` (the job's forward, loaded and configured as a run does: job.runtime.Settings,
configure_torch, job.model.load_model), `job-onednn` (the same under a protocol whose
inference.linear_kernels is onednn: every linear layer runs on oneDNN's kernels instead of MKL's
sgemm, job.linear_kernels), `eager` and `sdpa` (transformers' forward with that attention),
`compile` (torch.compile of the eager model, dynamic shapes), `gemm` (not a forward: F.linear at
the model's three matrix shapes with M = the batch's real tokens, best of 3 calls each, scaled to
all layers: the GEMM limit the job's linear layers could reach), `gemm-onednn` (the same on the
job's packed oneDNN layers), and, with the benchmark environment's Python (.bench-venv), `ort`
(ONNX Runtime, CPU provider, its default graph optimisations) and `openvino` (CPU plugin, f32
inference precision) on the ONNX file given by --onnx, and `gemm-mlas` (the GEMM rate of ONNX
Runtime's own kernels, MLAS, on the same shapes). `export` writes the ONNX file instead of serving."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import resource
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# GEMM references, path -> (kernel of gemm_forward, its label, the paths it runs beside, whose linear
# layers run on that kernel: none for MKL's, over which every path's GEMM fraction is taken, so that
# it runs in every block)
GEMM_REFERENCES = {"gemm": ("mkl", "MKL", ()), "gemm-onednn": ("onednn", "oneDNN", ("job-onednn",)),
                   "gemm-mlas": ("mlas", "MLAS", ("ort",))}
TORCH_PATHS = ("job", "job-onednn", "eager", "sdpa", "compile", "gemm", "gemm-onednn")
ONNX_PATHS = ("ort", "openvino")
PEER_ENV_PATHS = (*ONNX_PATHS, "gemm-mlas")  # run by the benchmark environment's Python (.bench-venv)
GEMM_CALLS = 3
ORT_DEFAULT_THREADS = "ORT default (physical cores)"


def load_batches(path: Path) -> list[tuple[Any, Any]]:
    with np.load(path) as z:
        n = sum(1 for k in z.files if k.startswith("ids_"))
        return [(z[f"ids_{i}"], z[f"mask_{i}"]) for i in range(n)]


def torch_threads(threads: str) -> int:
    """Set torch's intra-op threads unless `threads` is "default"; the count torch then runs."""
    import torch

    if threads != "default":
        torch.set_num_threads(int(threads))
    return int(torch.get_num_threads())


def transformers_model(model_dir: Path, attn: str) -> Any:
    import torch
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    return AutoModelForSequenceClassification.from_pretrained(model_dir, attn_implementation=attn,
                                                              dtype=torch.float32).eval()


def job_forward(model_dir: Path, threads: str, onednn: bool = False) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The job's forward, set up exactly as `python -m job run` sets it up (configure_torch before
    torch is first imported, so that its threads wait and oneDNN keeps primitives as a run's do);
    with `onednn`, as under a protocol whose inference.linear_kernels is onednn."""
    from job.model import load_model
    from job.protocol import DEFAULT_PROTOCOL, load_protocol
    from job.runtime import Settings, configure_torch

    inference = load_protocol(DEFAULT_PROTOCOL).inference
    if onednn:
        inference = dataclasses.replace(inference, linear_kernels="onednn")
    s = Settings.from_protocol(inference, None if threads == "default" else int(threads))
    info = configure_torch(s)
    import torch

    model = load_model(model_dir, s)
    choice = s.thread_choice.record() if s.thread_choice else None
    return JobPasses(model.forward, model.pad_id, s.forward_workers), {
        "threads": int(torch.get_num_threads()), "thread_choice": choice, "forward": model.choice.record(),
        "linear_kernels": s.linear_kernels, "deterministic": info["deterministic_algorithms"],
        "thread_waits": info["thread_waits"], "primitive_cache": info["primitive_cache"],
        "forward_workers": s.forward_workers}


class JobPasses:
    """The job's forward as a run calls it: a pass is job.inference.run_batches over the batches,
    `workers` of them at once (the run's thread layout), so that it is timed as a whole; a single
    batch may also be called directly."""

    def __init__(self, forward: Callable[..., Any], pad_id: int, workers: int) -> None:
        self.forward, self.pad_id, self.workers = forward, pad_id, workers

    def __call__(self, ids: Any, mask: Any) -> Any:
        return self.forward(ids, mask)

    def run_pass(self, batches: list[tuple[Any, Any]]) -> Any:
        """The logits [rows, K] of `batches`, in their order."""
        from job.inference import run_batches

        tokens = Prepadded(batches)
        return run_batches(self.forward, self.pad_id, tokens, tokens.plan, None, self.workers)


class Prepadded:
    """Already padded batches as a token source for job.inference.run_batches (job.batching.Tokens):
    the rows numbered across the batches in order, batch i's rows its plan entry."""

    def __init__(self, batches: list[tuple[Any, Any]]) -> None:
        from job.batching import Batch

        self.batches = [Batch(ids, mask) for ids, mask in batches]
        self.lengths = np.concatenate([mask.sum(axis=1) for _, mask in batches]).astype(np.int64)
        self.full_lengths, self.truncated = self.lengths, np.zeros(len(self.lengths), dtype=bool)
        ends = np.cumsum([len(ids) for ids, _ in batches])
        self.plan = [list(range(end - len(ids), end)) for end, (ids, _) in zip(ends, batches, strict=True)]
        self._of_first = {rows[0]: i for i, rows in enumerate(self.plan)}

    def batch(self, rows: Any, pad_id: int) -> Any:
        return self.batches[self._of_first[rows[0]]]


def hf_forward(model_dir: Path, threads: str, attn: str, compiled: bool) -> tuple[Callable[..., Any], dict[str, Any]]:
    import torch

    n = torch_threads(threads)
    model = transformers_model(model_dir, attn)
    run = torch.compile(model, dynamic=True) if compiled else model

    def forward(ids: Any, mask: Any) -> Any:
        return run(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits

    return forward, {"threads": n, "attention": model.config._attn_implementation, "compiled": compiled}


def gemm_forward(model_dir: Path, threads: str, kernel: str = "mkl") -> tuple[Callable[..., Any], dict[str, Any]]:
    """Per batch: the seconds all layers' linear layers take at the best measured GEMM speed of
    `kernel`, on M = the batch's real tokens (what the job's packed linear layers see). Kernels: mkl
    (F.linear), onednn (the job's own packed oneDNN layers, job.linear_kernels) and mlas (ONNX
    Runtime's MatMul and Add on a [1, M, in] input, as in the exported forward, with the weight an
    initializer that it packs once, the sessions sharing one thread pool; the benchmark
    environment's Python only). The weights are the same seeded matrices for every kernel."""
    config = json.loads((model_dir / "config.json").read_text())
    d, h, layers = int(config["dim"]), int(config["hidden_dim"]), int(config["n_layers"])
    rng = np.random.default_rng(0)
    weights = {tag: (rng.standard_normal((o, i), dtype=np.float32), rng.standard_normal(o, dtype=np.float32))
               for tag, (o, i) in {"dd": (d, d), "dh": (h, d), "hd": (d, h)}.items()}
    linear, n, context, packed, library = _gemm_kernel(kernel, weights, threads)
    # the job's layout of n threads (job.runtime.BATCHES) on torch's kernels: n products at once, one thread each
    concurrent = n if kernel != "mlas" and isinstance(n, int) and n > 1 else 0

    def forward(ids: Any, mask: Any) -> Any:
        m = int(mask.sum())
        best: dict[str, float] = {}
        together: dict[str, float] = {}
        with context():
            for tag, (w, _) in weights.items():
                x = rng.standard_normal((m, w.shape[1]), dtype=np.float32)
                run, convert = linear[tag]
                arg = convert(x)  # outside the timing: numpy for mlas, a torch tensor for the others
                run(arg)  # first touch of x and the output's size class
                times = []
                for _ in range(GEMM_CALLS):
                    t0 = time.perf_counter()
                    run(arg)
                    times.append(time.perf_counter() - t0)
                best[tag] = min(times)
                if concurrent:
                    together[tag] = _concurrent_seconds(run, arg, concurrent)
        flops = 2 * m * layers * (4 * d * d + 2 * d * h)
        seconds = {name: layers * (4 * t["dd"] + t["dh"] + t["hd"]) for name, t in
                   (("operators", best), ("batches", together)) if t}
        return np.array([[min(seconds.values()), float(flops), seconds["operators"],
                          seconds.get("batches", float("nan"))]], dtype=np.float64)

    return forward, {"threads": n, "kernel": kernel, "packed_weights": packed,
                     "library": library, "layouts": ["operators", "batches"] if concurrent else ["operators"],
                     "shapes": {"dim": d, "hidden": h, "layers": layers}, "calls": GEMM_CALLS}


def _concurrent_seconds(run: Callable[[Any], Any], arg: Any, workers: int) -> float:
    """Seconds per product when `workers` threads each run `run(arg)` at once on one torch thread
    (job.runtime.forward_pool, as the job's BATCHES layout runs its forwards): the best of
    GEMM_CALLS walls from the first start to the last end, divided by `workers`."""
    import threading

    from job.runtime import forward_pool

    walls = []
    with forward_pool(workers) as pool:
        list(pool.map(lambda _: run(arg), range(workers)))  # the threads exist and have run it once
        for _ in range(GEMM_CALLS):
            start = threading.Barrier(workers + 1)

            def one(_: int, start: threading.Barrier = start) -> None:
                start.wait()
                run(arg)

            futures = [pool.submit(one, i) for i in range(workers)]
            start.wait()
            t0 = time.perf_counter()
            for f in futures:
                f.result()
            walls.append(time.perf_counter() - t0)
    return min(walls) / workers


def _gemm_kernel(kernel: str, weights: dict[str, tuple[Any, Any]],
                 threads: str) -> tuple[dict[str, Any], int | str, Callable[[], Any], int | None, str]:
    """Each weight's (product, input conversion) under `kernel`, the threads it runs, the context
    its products run in, how many weights run packed in a layout of the kernel's own (None: not
    known), and the library whose kernels they are, with its version."""
    import contextlib

    if kernel == "mlas":
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper

        # one thread pool for the three sessions, as a forward's one session has: with a pool each,
        # the idle sessions' spinning threads took the cores from the timed one (on 2 vCPUs the
        # 768x768 product ran at 73 GFLOP/s beside them, 124-146 alone or on a shared pool)
        opts, used = _ort_options(threads)
        ort.set_global_thread_pool_sizes(opts.intra_op_num_threads, 1)
        opts.use_per_session_threads = False
        calls = {}
        for tag, (w, b) in weights.items():
            o, i = w.shape
            graph = helper.make_graph(  # MatMul then Add, as in the exported forward's graph
                [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])], tag,
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "m", i])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "m", o])],
                [numpy_helper.from_array(np.ascontiguousarray(w.T), "w"), numpy_helper.from_array(b, "b")])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
            sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            calls[tag] = (lambda x, s=sess: s.run(None, {"x": x}), lambda x: x[None])
        packed = None  # it packs constant weights itself and does not say
        return calls, used, contextlib.nullcontext, packed, f"onnxruntime {ort.__version__}"
    import torch
    import torch.nn.functional as F

    from job.linear_kernels import LinearKernels

    n = torch_threads(threads)
    kernels = LinearKernels(kernel)
    calls = {}
    for tag, (w, b) in weights.items():
        wt, bt = torch.from_numpy(w), torch.from_numpy(b)
        kernels.pack(wt, bt)
        calls[tag] = (lambda x, wt=wt, bt=bt: F.linear(x, wt, bt), torch.from_numpy)
    return calls, n, kernels.active, len(kernels.packed_weights()), f"torch {torch.__version__}"


def _ort_options(threads: str) -> tuple[Any, int | str]:
    """ONNX Runtime's session options at `threads` (its own default where "default"), and the
    threads that gives, as the report shows them."""
    import onnxruntime as ort

    opts = ort.SessionOptions()  # graph_optimization_level: ORT_ENABLE_ALL by default
    opts.intra_op_num_threads = 0 if threads == "default" else int(threads)
    return opts, opts.intra_op_num_threads or ORT_DEFAULT_THREADS


def ort_forward(onnx: Path, threads: str) -> tuple[Callable[..., Any], dict[str, Any]]:
    import onnxruntime as ort

    opts, used = _ort_options(threads)
    sess = ort.InferenceSession(str(onnx), opts, providers=["CPUExecutionProvider"])

    def forward(ids: Any, mask: Any) -> Any:
        return sess.run(["logits"], {"input_ids": ids, "attention_mask": mask})[0]

    return forward, {"threads": used, "version": ort.__version__, "providers": sess.get_providers(),
                     "graph_optimization_level": str(opts.graph_optimization_level)}


def openvino_forward(onnx: Path, threads: str) -> tuple[Callable[..., Any], dict[str, Any]]:
    import openvino as ov

    core = ov.Core()
    # f32 explicitly: on a CPU with AMX or AVX-512 BF16 the plugin's default precision is bf16
    config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "f32"}
    if threads != "default":
        config["INFERENCE_NUM_THREADS"] = int(threads)
    compiled = core.compile_model(core.read_model(str(onnx)), "CPU", config)
    request = compiled.create_infer_request()

    def forward(ids: Any, mask: Any) -> Any:
        request.infer({"input_ids": ids, "attention_mask": mask})
        return request.get_output_tensor(0).data.copy()

    props = {k: str(compiled.get_property(k)) for k in ("INFERENCE_NUM_THREADS", "INFERENCE_PRECISION_HINT",
                                                         "PERFORMANCE_HINT")}
    return forward, {"threads": props["INFERENCE_NUM_THREADS"], "version": ov.get_version(), "properties": props}


def build(path: str, model_dir: Path, threads: str, onnx: Path | None) -> tuple[Callable[..., Any], dict[str, Any]]:
    if path in ("job", "job-onednn"):
        return job_forward(model_dir, threads, onednn=path == "job-onednn")
    if path in ("eager", "sdpa", "compile"):
        return hf_forward(model_dir, threads, "sdpa" if path == "sdpa" else "eager", path == "compile")
    if path in GEMM_REFERENCES:
        return gemm_forward(model_dir, threads, GEMM_REFERENCES[path][0])
    if onnx is None:
        raise ValueError(f"the {path} path needs --onnx")
    return (ort_forward if path == "ort" else openvino_forward)(onnx, threads)


def peak_rss_mb() -> float:
    """This process's resident high-water mark (VmHWM). Not getrusage's ru_maxrss: Linux carries
    that over from the parent through fork and exec, so every worker would report at least the
    driver's size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # no /proc: an upper bound


def as_numpy(out: Any) -> Any:
    return out if isinstance(out, np.ndarray) else out.detach().numpy()


def export_onnx(model_dir: Path, out: Path, batches: list[tuple[Any, Any]]) -> None:
    """transformers' eager forward of the model as ONNX (opset 17, batch and length dynamic),
    exported with torch.onnx's TorchScript exporter: the graph a user would hand to ONNX Runtime
    or OpenVINO. Traced on the longest batch (padding included)."""
    import torch

    model = transformers_model(model_dir, "eager")
    ids, mask = max(batches, key=lambda b: b[0].size)
    axes = {"input_ids": {0: "batch", 1: "length"}, "attention_mask": {0: "batch", 1: "length"},
            "logits": {0: "batch"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.from_numpy(ids), torch.from_numpy(mask)), str(out), dynamo=False,
                          input_names=["input_ids", "attention_mask"], output_names=["logits"],
                          dynamic_axes=axes, opset_version=17)


class Session:
    """A loaded path and what its passes gave: the first full pass's logits, and whether every
    later pass gave the same bits."""

    def __init__(self, path: str, forward: Callable[..., Any], batches: list[tuple[Any, Any]]) -> None:
        self.path, self.forward, self.batches = path, forward, batches
        self.first: Any = None
        self.identical = True

    def run(self, subset: list[int] | None) -> dict[str, Any]:
        """One pass over every batch (or over `subset`, a warm-up), each forward call timed."""
        walls, logits = [], []
        batches = self.batches if subset is None else [self.batches[i] for i in subset]
        c0, t0 = time.process_time(), time.perf_counter()
        if isinstance(self.forward, JobPasses):  # timed as a whole: its batches may run at once
            logits.append(self.forward.run_pass(batches))
            walls.append(time.perf_counter() - t0)
        else:
            with _no_grad()():
                for ids, mask in batches:
                    b0 = time.perf_counter()
                    out = as_numpy(self.forward(ids, mask))  # gemm: float64 [[seconds, flops]]
                    logits.append(out if self.path in GEMM_REFERENCES else np.asarray(out, dtype=np.float32))
                    walls.append(time.perf_counter() - b0)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        arr = np.concatenate(logits)
        if subset is not None:
            return {"wall": sum(walls), "batches": subset}
        if self.first is None:
            self.first = arr
        else:
            self.identical = self.identical and np.array_equal(arr, self.first)
        gemm = ({"gemm_seconds": float(arr[:, 0].sum()), "gemm_flops": float(arr[:, 1].sum()),
                 "gemm_seconds_by_layout": {"operators": float(arr[:, 2].sum()),
                                            **({"batches": float(arr[:, 3].sum())}
                                               if not np.isnan(arr[:, 3]).any() else {})}}
                if self.path in GEMM_REFERENCES else {})
        return {"wall": sum(walls), "loop_wall": wall, "cpu": cpu, "batch_walls": walls,
                "sha256": hashlib.sha256(arr.tobytes()).hexdigest(), **gemm}

    def finish(self, logits: str | None) -> dict[str, Any]:
        if self.first is not None and logits:
            np.save(logits, self.first)
        return {"peak_rss_mb": peak_rss_mb(), "passes_identical": self.identical}


def serve(path: str, model_dir: Path, batches_file: Path, threads: str, onnx: Path | None) -> int:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else written to stdout goes to the log
    sys.stdout = sys.stderr

    def say(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")

    try:
        t0 = time.perf_counter()
        forward, info = build(path, model_dir, threads, onnx)
        info["load_s"] = round(time.perf_counter() - t0, 3)
        session = Session(path, forward, load_batches(batches_file))
    except Exception as exc:  # noqa: BLE001  (reported to the driver, which leaves the path out and says why)
        say({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    info["isa"] = {k: os.environ[k] for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")
                   if k in os.environ}
    if path in TORCH_PATHS:
        import torch

        info["torch"] = torch.__version__
        info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    say({"ready": info})
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["op"] == "finish":
                say(session.finish(cmd.get("logits")))
                return 0
            say(session.run(cmd.get("batches")))
        except Exception as exc:  # noqa: BLE001  (as above: one line to the driver)
            say({"error": f"{type(exc).__name__}: {exc}"})
            return 1
    return 0


def _no_grad() -> Callable[[], Any]:
    """torch.inference_mode where torch is imported (the torch paths), else a no-op context."""
    import contextlib

    torch = sys.modules.get("torch")
    return torch.inference_mode if torch is not None else contextlib.nullcontext


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", required=True, choices=(*TORCH_PATHS, *PEER_ENV_PATHS, "export"))
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--batches", type=Path, required=True)
    ap.add_argument("--threads", default="default")
    ap.add_argument("--onnx", type=Path, help="the exported model (ort, openvino; export writes it)")
    args = ap.parse_args(argv)
    if args.path == "export":
        export_onnx(args.model_dir, args.onnx, load_batches(args.batches))
        return 0
    return serve(args.path, args.model_dir, args.batches, args.threads, args.onnx)


if __name__ == "__main__":
    raise SystemExit(main())
