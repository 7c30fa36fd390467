#!/usr/bin/env python3
"""Where the job's forward and transformers' eager forward spend their time, operator by operator.

    .venv/bin/python scripts/bench_profile.py --model-dir out/bench/model --batches B.npz [--threads 1]

B.npz: batches as scripts/bench_peers.py writes them (`ids_<i>`, `mask_<i>`; its work folder keeps
one per model). Three forwards run in this process on the same batches: the job's, configured as a
run configures it (deterministic algorithms without their fill of uninitialised memory, allocator
settings); the same with that fill (torch.utils.deterministic, which writes NaN into every tensor
torch.empty makes: torch's default under deterministic algorithms; the logits are compared bit for
bit with the job's); and transformers' eager forward under torch's defaults. After a warm-up pass each is timed in CPU
seconds over --repeats passes (CPU time, so that other processes on a shared machine count less),
then profiled once with torch.profiler, whose table of self CPU time per operator is
printed. For finding why a peer is faster; not a benchmark (the profiler adds its own overhead)."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_peer_worker import load_batches, transformers_model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--batches", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows", type=int, default=15, help="operators shown per table")
    args = ap.parse_args(argv)

    import torch
    from torch.profiler import ProfilerActivity, profile

    from job.model import load_model
    from job.protocol import DEFAULT_PROTOCOL, load_protocol
    from job.runtime import Settings, configure_torch

    s = Settings.from_protocol(load_protocol(DEFAULT_PROTOCOL).inference, args.threads)
    configure_torch(s)
    batches = load_batches(args.batches)
    job = load_model(args.model_dir, s).forward
    eager = transformers_model(args.model_dir, "eager")

    import torch.utils.deterministic as det

    @contextlib.contextmanager
    def setting(deterministic: bool, fill: bool) -> Iterator[None]:
        """Deterministic algorithms and their fill of uninitialised memory, for one pass."""
        before = (torch.are_deterministic_algorithms_enabled(), det.fill_uninitialized_memory)
        torch.use_deterministic_algorithms(deterministic)
        det.fill_uninitialized_memory = fill
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(before[0])
            det.fill_uninitialized_memory = before[1]

    def run_job(fill: bool = False) -> Any:
        with setting(True, fill):
            return [job(ids, mask).numpy() for ids, mask in batches]

    def run_eager() -> Any:
        with setting(False, True):  # transformers as a user runs it: torch's defaults
            return [eager(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
                    for ids, mask in batches]

    paths: dict[str, Any] = {"job": run_job, "job, with the fill of uninitialised memory": lambda: run_job(True),
                             "eager": run_eager}
    cpu: dict[str, list[float]] = {name: [] for name in paths}
    with torch.inference_mode():
        logits = {name: fn() for name, fn in paths.items()}
        for _ in range(args.repeats):
            for name, fn in paths.items():
                c0 = time.process_time()
                fn()
                cpu[name].append(time.process_time() - c0)
        print(f"{len(batches)} batches, {args.threads} thread(s); CPU seconds per pass, median of {args.repeats}: "
              + ", ".join(f"{n} {statistics.median(v):.3f}" for n, v in cpu.items()))
        for name, out in logits.items():
            same = all(np.array_equal(a, b) for a, b in zip(out, logits["job"], strict=True))
            print(f"logits of {name}: {'bit-identical to' if same else 'differ from'} the job's")
        for name, fn in paths.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                fn()
            print(f"\n== {name}\n" + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
