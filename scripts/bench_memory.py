#!/usr/bin/env python3
"""Where a formal run's resident memory goes, stage by stage.

    .venv/bin/python scripts/bench_memory.py [--threads N] [--model-dir DIR] [--linear-kernels mkl|onednn]

Builds (or reuses) the full-size model that scripts/bench.py builds, then runs `python -m job run`
on it and the real SST-2 parquet in a child process under a tracer: at the start and end of every
stage (job.environment.StageClock's stages, plus the imports, the figures, the report and the
sealing), the child reads /proc/self/status (VmRSS, RssAnon, RssFile, VmHWM) and then resets the
kernel's high-water mark (`echo 5 > /proc/self/clear_refs`), so each row's peak is that step's
own. It prints one table (MB) and the whole run's peak, and writes it as JSON with --json. With
--linear-kernels the run's protocol is the formal one with that inference.linear_kernels.

The tracer changes nothing the run computes: it only reads /proc and wraps the stage clock.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bundle.layout import LINEAR_KERNELS  # the format's names (bundle imports no torch)
from scripts.generated_split import write_protocol

FIELDS = ("VmRSS", "RssAnon", "RssFile", "VmHWM")

# The child: wraps the stage clock and the steps after the last stage, then runs `job run`.
_CHILD = r"""
import json, os, sys, time
t_start = time.process_time()
marks = []

def status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in FIELDS:
                out[k] = round(int(v.split()[0]) / 1024, 1)
    return out

seen = set()
def mark(name):
    s = status()
    s["step"], s["modules"] = name, len(sys.modules)
    new = sorted(set(sys.modules) - seen)
    seen.update(new)
    tops = {}
    for m in new:
        tops[m.split(".")[0]] = tops.get(m.split(".")[0], 0) + 1
    s["new_packages"] = tops
    marks.append(s)
    with open("/proc/self/clear_refs", "w") as f:  # reset VmHWM: the next mark's peak is its step's own
        f.write("5")

FIELDS = %(fields)r
mark("interpreter")
import job.cli, job.environment, job.pipeline
mark("imports (job.cli)")
timed = job.environment._Timed
enter, exit_ = timed.__enter__, timed.__exit__
def t_enter(self):
    mark("between stages, before " + self.name)
    return enter(self)
def t_exit(self, *exc):
    mark(self.name)
    return exit_(self, *exc)
timed.__enter__, timed.__exit__ = t_enter, t_exit
for name in ("_figures", "_report", "_crate"):
    fn = getattr(job.pipeline, name)
    def wrapped(*a, _fn=fn, _name=name, **k):
        mark("before " + _name.strip("_"))
        r = _fn(*a, **k)
        mark(_name.strip("_"))
        return r
    setattr(job.pipeline, name, wrapped)
import importlib
for spec in filter(None, os.environ.get("MEMTRACE_EXTRA", "").split(",")):  # module:function, also marked
    mod_name, _, fn_name = spec.partition(":")
    mod = importlib.import_module(mod_name)
    fn = getattr(mod, fn_name)
    def wrapped(*a, _fn=fn, _name=fn_name, **k):
        mark("before " + _name)
        r = _fn(*a, **k)
        mark(_name)
        return r
    setattr(mod, fn_name, wrapped)
try:
    rc = job.cli.main(sys.argv[1:])
finally:
    mark("signing and the rest")
    with open(os.environ["MEMTRACE_OUT"], "w") as f:
        json.dump({"marks": marks, "cpu_s": time.process_time() - t_start,
                   "modules": sorted(sys.modules)}, f)
raise SystemExit(rc)
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=None, help="--threads of the run (default: the run's default)")
    ap.add_argument("--model-dir", type=Path, default=REPO / "out" / "bench" / "model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write the marks here")
    ap.add_argument("--extra", default="", help="also mark around these functions: module:function,...")
    ap.add_argument("--keep", type=Path, default=None, help="write the bundle here instead of a temporary folder")
    ap.add_argument("--linear-kernels", default=None, choices=list(LINEAR_KERNELS),
                    help="the protocol's inference.linear_kernels (default: left out, MKL's, as the formal protocol)")
    args = ap.parse_args(argv)

    from job.protocol import DEFAULT_PROTOCOL, load_protocol
    from scripts.bench import full_size_model, write_lock  # the model and lock bench.py's formal run uses

    protocol = load_protocol(DEFAULT_PROTOCOL)
    model_dir = full_size_model(args.model_dir, args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        lock = write_lock(Path(tmp) / "lock.json", model_dir, protocol.doc)
        protocol_path = DEFAULT_PROTOCOL
        if args.linear_kernels is not None:  # the formal protocol as loaded above, with those kernels
            protocol_path = write_protocol(Path(tmp) / "protocol.json", protocol.doc,
                                           {"linear_kernels": args.linear_kernels})
        out = args.keep or Path(tmp) / "run"
        trace = Path(tmp) / "trace.json"
        cmd = [sys.executable, "-c", _CHILD % {"fields": FIELDS}, "run", "--protocol", str(protocol_path),
               "--resources", str(lock), "--out", str(out), "--ephemeral-key", "--no-progress",
               *(["--threads", str(args.threads)] if args.threads else [])]
        env = dict(os.environ, MEMTRACE_OUT=str(trace), MEMTRACE_EXTRA=args.extra,
                   PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        proc = subprocess.run(cmd, check=False, cwd=REPO, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stdout[-2000:], proc.stderr[-4000:], file=sys.stderr)
            return 1
        result: dict[str, Any] = json.loads(trace.read_text())
    marks = result["marks"]
    print(f"{'step':<48} {'RSS':>7} {'anon':>7} {'file':>7} {'peak in step':>12}  modules")
    for m in marks:
        print(f"{m['step']:<48} {m['VmRSS']:>7} {m['RssAnon']:>7} {m['RssFile']:>7} {m['VmHWM']:>12}  {m['modules']}")
    peak = max(m["VmHWM"] for m in marks)
    print(f"run's peak RSS {peak} MB ({next(m['step'] for m in marks if m['VmHWM'] == peak)}); "
          f"CPU {result['cpu_s']:.1f} s; load average {os.getloadavg()[0]:.1f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
