#!/usr/bin/env python3
"""The job's forward against what a careful user would run instead, side by side and interleaved.

    make bench                                     # = scripts/bench_peers.py, .bench-venv for ORT/OpenVINO
    make bench BENCH_ARGS="--models standin --repeats 1 --batches 4"     # a smoke run
    .venv/bin/python scripts/bench_peers.py --isa native avx2 --threads 1 default --repeats 3

Paths (each in its own process, scripts/bench_peer_worker.py, so that its peak RSS is its own):
the job's forward as a run loads it (`job`); the same under a protocol whose
inference.linear_kernels is onednn (`job-onednn`: oneDNN's kernels run the linear layers instead of
MKL's sgemm, another arithmetic); transformers' eager and SDPA attention (`eager`,
`sdpa`); torch.compile of the eager model (`compile`); ONNX Runtime and OpenVINO on the same model
exported to ONNX (`ort`, `openvino`: they need --peer-python, the benchmark-only environment of
`make bench-peers-env`); and `gemm`, the F.linear rate on the job's own matrix shapes, which
gives the useful-FLOP fraction of every path in the same run. Beside job-onednn and ort, the GEMM
rates of their own kernels on the same shapes run too (`gemm-onednn`, `gemm-mlas`), so that where
a peer is faster, the table under it says whether its matrix products are.

Every path gets the same rows and weights: the protocol's calibration and audit pools of the real
SST-2 validation split (616 rows), tokenised, length-sorted and cut into the job's batches of 16
once, here, and handed to every path as the same right-padded int64 arrays; so each path's time is
its forward alone (the logits' conversion to numpy included), never tokenising. Models: `full`,
the pinned checkpoint's architecture with seed-0 weights (scripts/bench.py builds it), and
`standin`, the trained classifier of ../shared/fixtures.

A block is one model under one instruction-set setting at one thread setting: every path's worker
is started, then passes run round-robin (warm-up first, which also compiles; each round's order
is a permutation seeded by the round's number, so a path's predecessor varies), and the workers
finish with their peak RSS. `--threads default` gives each
library its own default (the job: job.runtime.ThreadChoice, the physical cores within the
protocol's bound); `--isa avx2` starts the workers with oneDNN, ATen and MKL limited to AVX2
(ONNX Runtime and OpenVINO have no such switch: their rows there run their normal kernels).

Printed and written (out/bench/peers.json and peers.md): per path, the median pass and its spread
over the timed passes, rows/s, time relative to the job's, useful FLOP rate over the GEMM rate,
peak RSS, and the largest logit difference from the job's forward in the same block, computed on
every logit (scripts/bench_peers_stats.logit_difference); then the job at its default thread
count against 1 thread. Load averages are recorded with every block. No timed tests."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from bench import FIXTURES, PARQUET, POOLS, REAL_CONFIG, cpu_model, full_size_model, load, workload
from bench_peer_worker import GEMM_REFERENCES, ONNX_PATHS, PEER_ENV_PATHS
from bench_peers_stats import fmt_diff, gemm_fraction, logit_difference, markdown_table, spread

WORKER = HERE / "bench_peer_worker.py"
STANDIN = FIXTURES / "distilbert-minilm-sst2"
PATHS = ("job", "job-onednn", "eager", "sdpa", "compile", "ort", "openvino")


def gemm_paths(paths: list[str]) -> list[str]:
    """The GEMM references a block runs beside `paths`."""
    return [g for g, (_, _, beside) in GEMM_REFERENCES.items() if not beside or set(beside) & set(paths)]


def worker_python(path: str, peer_python: str) -> str:
    return peer_python if path in PEER_ENV_PATHS else sys.executable
ISA_ENV = {"native": {}, "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
                                  "MKL_ENABLE_INSTRUCTIONS": "AVX2"}}
READY_TIMEOUT_S = 600.0
PASS_TIMEOUT_S = 1800.0
SETTLE_S = 0.1  # between two paths: the last one's spinning threads go to sleep


class WorkerError(Exception):
    """A worker died, answered with an error or took too long; str(): what happened, one sentence."""


class Worker:
    """One path's process, spoken to one JSON line at a time (scripts/bench_peer_worker.py)."""

    def __init__(self, path: str, python: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.path, self.log = path, log
        self._log: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen([python, str(WORKER), "--path", path, *argv], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, env=env, cwd=REPO, text=True)

    def read(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.stop()
            tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
            raise WorkerError(f"the {self.path} worker {'timed out' if not ready else 'exited'} "
                              f"({' | '.join(tail) or 'no output'}); see {self.log}")
        msg: dict[str, Any] = json.loads(line)
        if "error" in msg:
            self.stop()
            raise WorkerError(f"the {self.path} worker failed: {msg['error']}")
        return msg

    def ask(self, cmd: dict[str, Any], timeout: float = PASS_TIMEOUT_S) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.read(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._log.close()


@dataclasses.dataclass
class Prepared:
    """One model's rows, batched once for every path."""

    name: str
    model_dir: Path
    batches: Path  # npz: ids_<i>, mask_<i>
    lengths: list[int]  # real tokens of every row, in batch order
    useful_flops: int
    rows: int
    onnx: Path | None = None


def prepare(name: str, model_dir: Path, work: Path, limit: int | None) -> Prepared:
    """Tokenise the protocol's pools with the model's tokenizer and write the job's batches."""
    from job.batching import encode
    from job.model import load_tokenizer
    from job.protocol import DEFAULT_PROTOCOL, load_protocol
    from job.runtime import Settings

    protocol = load_protocol(DEFAULT_PROTOCOL)
    s = Settings.from_protocol(protocol.inference, 1)
    config = json.loads((model_dir / "config.json").read_text())
    shape = (int(config["dim"]), int(config["hidden_dim"]), int(config["n_layers"]), len(config["id2label"]))
    tokenizer = load_tokenizer(model_dir)
    w = workload(protocol, tokenizer, shape, True, s, PARQUET)
    pad_id = int(tokenizer.pad_token_id or 0)
    arrays: dict[str, Any] = {}
    lengths: list[int] = []
    plan = [(pool, rows) for pool in POOLS for rows in w.plans[pool]]
    if limit is not None:  # a smoke run: batches spread over the lengths
        plan = [plan[int(i)] for i in np.unique(np.linspace(0, len(plan) - 1, limit).round())]
    encoded = {pool: encode(tokenizer, w.texts[pool], s.max_length) for pool in POOLS}
    for i, (pool, rows) in enumerate(plan):
        b = encoded[pool].batch(rows, pad_id)
        arrays[f"ids_{i}"], arrays[f"mask_{i}"] = b.ids, b.mask
        lengths += w.lengths[pool][rows].tolist()
    batches = work / f"{name}-batches.npz"
    np.savez(batches, **arrays)
    useful = dataclasses.replace(w, lengths={"rows": np.array(lengths)}).useful_flops()
    return Prepared(name, model_dir, batches, lengths, useful, len(lengths))


def export_onnx(p: Prepared, python: str, cache: Path) -> Path:
    """transformers' eager model exported to ONNX in the benchmark environment; reused while the
    weights' sha256 is the one it was exported from."""
    from bench import sha256_file

    out, marker = cache / f"{p.name}.onnx", cache / f"{p.name}.onnx.json"
    digest = sha256_file(p.model_dir / "model.safetensors")
    if out.is_file() and marker.is_file() and json.loads(marker.read_text()).get("model.safetensors") == digest:
        return out
    cache.mkdir(parents=True, exist_ok=True)
    log = cache / f"{p.name}-export.log"
    with log.open("wb") as f:
        rc = subprocess.run([python, str(WORKER), "--path", "export", "--model-dir", str(p.model_dir),
                             "--batches", str(p.batches), "--onnx", str(out)], stdout=f, stderr=subprocess.STDOUT,
                            cwd=REPO, timeout=READY_TIMEOUT_S, check=False).returncode
    if rc != 0 or not out.is_file():
        raise WorkerError(f"exporting {p.name} to ONNX failed (exit {rc}); see {log}")
    marker.write_text(json.dumps({"model.safetensors": digest}))
    return out


def worker_env(isa: str, inductor_cache: Path | None = None) -> dict[str, str]:
    """The workers' environment under instruction-set setting `isa`. torch.compile gets a cache of
    its own per setting: inductor's cache is not keyed on ATEN_CPU_CAPABILITY, and a kernel compiled
    under one setting, reused under another, gave NaN logits or a heap corruption (torch 2.13)."""
    env = {k: v for k, v in os.environ.items() if k not in ISA_ENV["avx2"]}
    env.update(ISA_ENV[isa])
    if inductor_cache is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_cache / isa)
    env["PYTHONPATH"] = str(REPO)
    env.setdefault("OPENVINO_TELEMETRY_DISABLE", "1")
    return env


def round_order(order: list[str], r: int) -> list[str]:
    """Round r's order of the paths: a permutation drawn with seed r, the same in every run, so that
    each path starts rounds and follows different paths in turn. (Rotating a fixed order keeps every
    path's predecessor; a library whose threads keep a core busy after its own pass then slows the
    same path in every round: measured, the job after OpenVINO on an Intel Xeon.)"""
    return [order[int(i)] for i in np.random.default_rng(r).permutation(len(order))]


def run_block(p: Prepared, isa: str, threads: str, paths: list[str], python: dict[str, str], warmup: int,
              repeats: int, work: Path, warmup_batches: list[int] | None = None) -> dict[str, Any]:
    """Every path's worker for one model, instruction-set setting and thread setting, driven round-robin."""
    env = worker_env(isa, work.parent / "inductor-cache")
    tag = f"{p.name}-{isa}-t{threads}"
    workers: dict[str, Worker] = {}
    out: dict[str, Any] = {"model": p.name, "isa": isa, "threads": threads, "load_avg": [load()], "paths": {},
                           "errors": {}}
    for path in [*paths, *gemm_paths(paths)]:
        argv = ["--model-dir", str(p.model_dir), "--batches", str(p.batches), "--threads", threads]
        if path in ONNX_PATHS:
            argv += ["--onnx", str(p.onnx)]
        workers[path] = Worker(path, python[path], argv, env, work / f"{tag}-{path}.log")
    for path, w in list(workers.items()):
        try:
            out["paths"][path] = {"info": w.read(READY_TIMEOUT_S)["ready"], "warmup": [], "passes": []}
        except WorkerError as exc:
            out["errors"][path] = str(exc)
            del workers[path]
    order = list(workers)
    try:
        for r in range(warmup + repeats):
            cmd: dict[str, Any] = {"op": "pass"}
            if r < warmup and warmup_batches is not None:
                cmd["batches"] = warmup_batches
            for path in round_order(order, r):
                if path not in workers:
                    continue
                try:
                    res = workers[path].ask(cmd)
                except WorkerError as exc:
                    out["errors"][path] = str(exc)
                    del workers[path]
                    continue
                out["paths"][path]["warmup" if r < warmup else "passes"].append(res)
                time.sleep(SETTLE_S)
            print(f"  {tag}: round {r + 1}/{warmup + repeats} done (load {load()})", flush=True)
        for path, w in workers.items():
            logits = work / f"{tag}-{path}.npy"
            out["paths"][path].update(w.ask({"op": "finish", "logits": str(logits)}, READY_TIMEOUT_S),
                                      logits=str(logits))
    finally:
        for w in workers.values():
            w.stop()
    out["load_avg"].append(load())
    for path in out["errors"]:
        out["paths"].pop(path, None)
    return summarise(out, p)


def summarise(block: dict[str, Any], p: Prepared) -> dict[str, Any]:
    """Figures of every path in a block: spread, rows/s, relative time, GEMM fraction, logits vs the job's."""
    paths = block["paths"]
    job_logits = np.load(paths["job"]["logits"]) if "job" in paths else None
    block["gemm_kernels"] = {}
    for g, (_, label, _) in GEMM_REFERENCES.items():
        ref = paths.pop(g, None)
        if ref and ref["passes"]:
            rates = [x["gemm_flops"] / x["gemm_seconds"] for x in ref["passes"]]
            layouts = {name: float(np.median([x["gemm_flops"] / x["gemm_seconds_by_layout"][name]
                                              for x in ref["passes"]])) / 1e9
                       for name in ref["passes"][0].get("gemm_seconds_by_layout", {})}
            block["gemm_kernels"][label] = {"gflop_per_s_median": float(np.median(rates)) / 1e9,
                                            "gflop_per_s_max": max(rates) / 1e9,
                                            "gflop_per_s_by_layout": layouts,
                                            "peak_rss_mb": ref.get("peak_rss_mb"), "info": ref["info"]}
    if "MKL" in block["gemm_kernels"]:
        block["gemm"] = block["gemm_kernels"]["MKL"]
    gemm_rate = block["gemm"]["gflop_per_s_median"] * 1e9 if "gemm" in block else None
    for path, r in paths.items():
        walls = [x["wall"] for x in r["passes"]]
        if not walls:
            continue
        r["time"] = spread(walls)
        r["rows_per_s"] = p.rows / r["time"]["median"]
        r["warmup_s"] = [round(x["wall"], 3) for x in r["warmup"]]
        r["useful_gemm_fraction"] = (gemm_fraction(p.useful_flops, r["time"]["median"], gemm_rate, 1.0)
                                     if gemm_rate else None)
        logits = np.load(r["logits"])
        r["logits_vs_job"] = None if job_logits is None or path == "job" else logit_difference(logits, job_logits)
        # each batch's median over the timed passes: where a path gains or loses against another (the
        # job's paths, whose batches may run at once, give one figure: the pass's)
        r["batch_walls_median"] = np.median([x.pop("batch_walls") for x in r["passes"]], axis=0).round(5).tolist()
        for x in r["warmup"]:
            x.pop("batch_walls", None)
    if "job" in paths and "time" in paths["job"]:
        ref = paths["job"]["time"]["median"]
        for r in paths.values():
            if "time" in r:
                r["relative_to_job"] = r["time"]["median"] / ref
    return block


def warmup_batches(p: Prepared, n: int | None) -> list[int] | None:
    """n batches for a warm-up pass, spread from the longest to the shortest (None: all of them)."""
    with np.load(p.batches) as z:
        count = sum(1 for k in z.files if k.startswith("ids_"))
    if n is None or n >= count:
        return None
    return sorted({int(i) for i in np.linspace(0, count - 1, n).round()})


def threads_used(r: dict[str, Any]) -> str:
    return str(r["info"].get("threads", "?"))


def by_layout(kernel: dict[str, Any]) -> str:
    """A kernel's rate in each thread layout where it ran in more than one: one product on every
    thread, and as many products at once as threads, one thread each (the job's layout)."""
    rates = kernel.get("gflop_per_s_by_layout", {})
    if len(rates) < 2:
        return ""
    return (f" (one product on every thread {rates['operators']:.1f}, "
            f"one product a thread at once {rates['batches']:.1f})")


def report(blocks: list[dict[str, Any]], prepared: dict[str, Prepared]) -> str:
    """The markdown tables: one per model and instruction-set setting, then the thread default."""
    parts = []
    for model in dict.fromkeys(b["model"] for b in blocks):
        for isa in dict.fromkeys(b["isa"] for b in blocks if b["model"] == model):
            rows = []
            for b in (b for b in blocks if b["model"] == model and b["isa"] == isa):
                gemm = b.get("gemm", {}).get("gflop_per_s_median")
                for path, r in b["paths"].items():
                    if "time" not in r:
                        continue
                    t = r["time"]
                    frac = r["useful_gemm_fraction"]
                    rows.append([path, f"{b['threads']} ({threads_used(r)})", f"{t['median']:.2f}",
                                 f"{t['min']:.2f}–{t['max']:.2f}", f"{r['rows_per_s']:.1f}",
                                 f"{r.get('relative_to_job', float('nan')):.2f}",
                                 f"{frac:.1%}" if frac else "-", f"{gemm:.1f}" if gemm else "-",
                                 f"{r['peak_rss_mb']:.0f}", fmt_diff(r["logits_vs_job"])])
                for path, err in b["errors"].items():
                    rows.append([path, b["threads"], "failed", err, *["-"] * 6])
            kernels = [f"threads {b['threads']}: " + ", ".join(
                f"{k} {v['gflop_per_s_median']:.1f}{by_layout(v)}" for k, v in b.get("gemm_kernels", {}).items())
                for b in blocks if b["model"] == model and b["isa"] == isa and b.get("gemm_kernels")]
            p = prepared[model]
            load_range = [x for b in blocks if b["model"] == model and b["isa"] == isa for x in b["load_avg"]]
            parts.append(f"### {model}, {isa}: {p.rows} rows, {p.useful_flops / 1e9:.1f} useful GFLOP; "
                         f"load average {min(load_range):.2f}–{max(load_range):.2f}\n\n" + markdown_table(
                             ["path", "threads (used)", "median s", "min–max s", "rows/s", "vs job", "useful/GEMM",
                              "GEMM GFLOP/s", "peak RSS MB", "largest logit diff vs job"], rows)
                         + ("\n\nGEMM rate of each kernel on the job's shapes, GFLOP/s (median of the passes; "
                            "useful/GEMM is over MKL's, batch by batch the faster of its layouts): "
                            + "; ".join(kernels) if kernels else ""))
    rows = []
    for model in dict.fromkeys(b["model"] for b in blocks):
        for isa in dict.fromkeys(b["isa"] for b in blocks if b["model"] == model):
            job = {b["threads"]: b["paths"].get("job") for b in blocks if b["model"] == model and b["isa"] == isa}
            one, default = job.get("1"), job.get("default")
            if one and default and "time" in one and "time" in default:
                diff = logit_difference(np.load(default["logits"]), np.load(one["logits"]))
                rows.append([model, isa, threads_used(default), f"{one['time']['median']:.2f}",
                             f"{default['time']['median']:.2f}",
                             f"{default['time']['median'] / one['time']['median']:.2f}", fmt_diff(diff)])
    if rows:
        parts.append("### the job's thread default against 1 thread\n\n" + markdown_table(
            ["model", "isa", "default threads", "1 thread s", "default s", "default / 1 thread",
             "logits default vs 1 thread"], rows))
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["full", "standin"], choices=("full", "standin"))
    ap.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
    ap.add_argument("--threads", nargs="+", default=["1", "default"],
                    help="thread settings: counts, or `default` (each library's own; the job's ThreadChoice)")
    ap.add_argument("--isa", nargs="+", default=["native", "avx2"], choices=tuple(ISA_ENV))
    ap.add_argument("--repeats", type=int, default=3, help="timed passes of every path per block")
    ap.add_argument("--warmup", type=int, default=1, help="untimed passes first (torch.compile compiles in them)")
    ap.add_argument("--warmup-batches", type=int, default=None,
                    help="warm-up passes run only this many batches, longest to shortest (default: all)")
    ap.add_argument("--batches", type=int, default=None, help="only this many of the job's batches (smoke runs)")
    ap.add_argument("--peer-python", default=str(REPO / ".bench-venv" / "bin" / "python"),
                    help="Python of `make bench-peers-env` for ort and openvino; `none` leaves them out")
    ap.add_argument("--seed", type=int, default=0, help="seed of the full-size model's weights")
    ap.add_argument("--model-dir", type=Path, default=REPO / "out" / "bench" / "model",
                    help="where the full-size model is built (reused)")
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench" / "peers.json")
    args = ap.parse_args(argv)

    if not REAL_CONFIG.is_dir() or not PARQUET.is_file() or ("standin" in args.models and not STANDIN.is_dir()):
        print(f"error: the fixtures are missing under {FIXTURES}; put ../shared/fixtures beside the repository.",
              file=sys.stderr)
        return 2
    if args.repeats < 1 or args.warmup < 0 or any(t != "default" and not t.isdigit() for t in args.threads):
        print("error: --repeats must be at least 1, --warmup at least 0, and --threads counts or `default`.",
              file=sys.stderr)
        return 2
    paths = list(args.paths)
    notes: list[str] = []
    if any(p in ONNX_PATHS for p in paths) and (args.peer_python == "none" or not Path(args.peer_python).exists()):
        paths = [p for p in paths if p not in ONNX_PATHS]
        notes.append("ort and openvino left out: no benchmark environment (run `make bench-peers-env`).")
        print(f"note: {notes[-1]}", file=sys.stderr)
    python = {p: worker_python(p, args.peer_python) for p in [*paths, *gemm_paths(paths)]}

    t0 = time.perf_counter()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="peers-", dir=args.out.parent))
    print(f"load average {load()}; work files in {work}", flush=True)
    dirs = {"full": lambda: full_size_model(args.model_dir, args.seed), "standin": lambda: STANDIN}
    prepared = {}
    for name in args.models:
        prepared[name] = p = prepare(name, dirs[name](), work, args.batches)
        if any(x in ONNX_PATHS for x in paths):
            p.onnx = export_onnx(p, args.peer_python, args.out.parent / "onnx")
    blocks = []
    for name in args.models:
        for isa in args.isa:
            for threads in args.threads:
                print(f"{name}, {isa}, threads {threads}: {', '.join([*paths, *gemm_paths(paths)])}", flush=True)
                blocks.append(run_block(prepared[name], isa, threads, paths, python, args.warmup, args.repeats, work,
                                        warmup_batches(prepared[name], args.warmup_batches)))
    from job.runtime import physical_cores, usable_cpus

    text = report(blocks, prepared)
    doc = {"machine": {"cpu": cpu_model(), "logical_cpus": os.cpu_count(),
                       "physical_cores": physical_cores(usable_cpus())},
           "models": {n: {"dir": str(p.model_dir), "rows": p.rows, "useful_gflop": p.useful_flops / 1e9}
                      for n, p in prepared.items()},
           "settings": {"repeats": args.repeats, "warmup": args.warmup, "warmup_batches": args.warmup_batches,
                        "batches": args.batches,
                        "isa_env": {k: ISA_ENV[k] for k in args.isa}},
           "notes": notes, "blocks": blocks, "wall_s": round(time.perf_counter() - t0, 1)}
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(text)
    print(f"\n{doc['machine']['cpu']}, {doc['machine']['physical_cores']} physical cores\n\n{text}")
    print(f"written: {args.out}, {args.out.with_suffix('.md')} ({doc['wall_s']} s)")
    failed = [e for b in blocks for e in b["errors"].values()]
    for e in failed:
        print(f"error: {e}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
