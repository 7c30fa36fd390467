"""Goldens: what a run may not move on any machine, and the exact bits of the CPU kinds that wrote them.

tests/goldens/<run>.json holds, for one run of the job:

- `rows`: per pool, each row of the predictions Parquet in file order as [idx, pred, logit_0, ...],
  the float32 logits written with the fewest digits that read back to the same float32;
- `figures`: every value of temperature.json, metrics.json, bootstrap.json and stability.json
  (the published records) except their sha256 fields, by path (`pools.audit.raw.ece`);
- `exact`: the sha256 of the pinned payload files, each set next to the CPU kind that wrote it
  (vendor, model and instruction set as `cpu_kind` names them).

A run matches when every row has the same idx and predicted class and each logit is within
LOGIT_TOLERANCE of the golden's, every figure that is a float is within FIGURE_TOLERANCE and every
other figure (counts, flags, verdicts, names) is equal, and, only on a CPU of a kind recorded in
`exact`, the files have that kind's digests. Float32 GEMMs round differently on other CPUs and
instruction sets, so the exact bits hold only where they were written; both tolerances are chosen
from measurement (tests/goldens/CHANGELOG.md).

`pytest --update-goldens=REASON` rewrites a golden that differs (or records the digests of a CPU
kind not yet in it) and appends REASON to tests/goldens/CHANGELOG.md, so no golden changes without
a recorded why.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bundle.digests import sha256_file

GOLDEN_DIR = Path(__file__).resolve().parent / "goldens"
REPO = GOLDEN_DIR.parent.parent
PREDICTIONS = {"calibration": "data/predictions/calibration.parquet", "audit": "data/predictions/audit.parquet"}
FIGURES = ("data/temperature.json", "data/metrics.json", "data/bootstrap.json", "data/stability.json")
EXACT = (*PREDICTIONS.values(), *FIGURES)
"""Payload files whose bytes are pinned next to the CPU kind that wrote them, relative to the bundle."""

LOGIT_TOLERANCE = 2e-5
"""Largest absolute difference of a logit from its golden. Measured honest differences: 6.9e-6 on
the stand-in (oneDNN and ATen limited to SSE4.1/default), 5.7e-6 (limited to AVX2), 6e-8 on the
tiny world from Intel Xeon to AMD EPYC; scaling the classifier head of either model by 1 + 1e-3
moves a logit by 2.9e-4 (tiny) and 3.5e-3 (stand-in)."""

FIGURE_TOLERANCE = 2e-6
"""Largest absolute difference of a float figure from its golden: two units of the 6th decimal that
report.md publishes. Measured honest differences: up to 8.7e-7 (a temperature of the stand-in's
stability study under AVX2; the tiny world's T from Intel to AMD), which can move the 6th decimal
by one."""

ISA_LIMITS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")
"""Environment variables that change which instructions oneDNN and MKL use."""


@dataclass(frozen=True)
class Difference:
    """One way a run left its golden: the payload file, the value's place in it, golden and found."""

    file: str
    where: str
    expected: object
    found: object
    exact_only: bool = False
    """True when the tolerances hold and only this CPU kind's recorded digest differs."""

    def sentence(self) -> str:
        return f"{self.file} {self.where}: golden {self.expected}, found {self.found}"


def cpu_kind() -> dict[str, str]:
    """The CPU kind this process computes on: vendor and model from /proc/cpuinfo, and the
    instruction set as ATen reports it, with any oneDNN/MKL limits set in the environment."""
    import torch

    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    limits = [f"{name}={os.environ[name]}" for name in ISA_LIMITS if os.environ.get(name)]
    isa = str(torch.backends.cpu.get_cpu_capability()) + (f" ({', '.join(limits)})" if limits else "")
    return {"vendor": info.get("vendor_id", "unknown"), "model": info.get("model name", "unknown"), "isa": isa}


def describe(kind: dict[str, Any]) -> str:
    return f"{kind.get('vendor')} {kind.get('model')}, {kind.get('isa') or 'instruction set not recorded'}"


def _shortest(x: float) -> float:
    """The float32 value x as the Python float with the fewest decimal digits that reads back to it."""
    import numpy as np

    return float(np.format_float_positional(np.float32(x), unique=True, trim="-"))


def read_rows(bundle: Path) -> dict[str, list[list[float | int]]]:
    """{pool: [[idx, pred, logit_0, ...], ...]} of the bundle's predictions files, in file order."""
    import pyarrow.parquet as pq

    rows: dict[str, list[list[float | int]]] = {}
    for pool, rel in PREDICTIONS.items():
        table = pq.read_table(bundle / rel)
        names = sorted((c for c in table.column_names if c.startswith("logit_")), key=lambda c: int(c[6:]))
        columns = [table.column(c).to_pylist() for c in ("idx", "pred", *names)]
        rows[pool] = [[int(r[0]), int(r[1]), *(_shortest(v) for v in r[2:])] for r in zip(*columns, strict=True)]
    return rows


def _flatten(value: object, where: str) -> Iterator[tuple[str, object]]:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            if not key.endswith("sha256"):  # digests of files that differ bit for bit between CPUs
                yield from _flatten(item, f"{where}.{key}" if where else key)
    elif isinstance(value, list) and value:
        for i, item in enumerate(value):
            yield from _flatten(item, f"{where}[{i}]")
    else:
        yield where, value


def read_figures(bundle: Path) -> dict[str, dict[str, object]]:
    """{file: {path: value}} of every published figure of the bundle (sha256 fields left out)."""
    return {rel: dict(_flatten(json.loads((bundle / rel).read_text(encoding="utf-8")), ""))
            for rel in FIGURES}


def observe(bundle: Path) -> dict[str, Any]:
    """The rows and figures of `bundle`, as a golden holds them."""
    return {"rows": read_rows(bundle), "figures": read_figures(bundle)}


def digests(bundle: Path) -> dict[str, str]:
    """sha256 of each exactly pinned file of `bundle` (a bag directory)."""
    return {rel: sha256_file(bundle / rel) for rel in EXACT}


def _figure_holds(expected: object, found: object) -> bool:
    """Floats (an int on the other side counts as a number) within FIGURE_TOLERANCE; all else equal."""
    numbers = (isinstance(expected, int | float) and isinstance(found, int | float)
               and not isinstance(expected, bool) and not isinstance(found, bool))
    if numbers and (isinstance(expected, float) or isinstance(found, float)):
        return math.isclose(expected, found, rel_tol=0.0, abs_tol=FIGURE_TOLERANCE)
    return type(expected) is type(found) and expected == found


def row_differences(golden: dict[str, Any], found: dict[str, Any]) -> list[Difference]:
    """Rows whose idx or predicted class changed, or with a logit beyond LOGIT_TOLERANCE."""
    out: list[Difference] = []
    for pool, rel in PREDICTIONS.items():
        want, got = golden.get("rows", {}).get(pool, []), found["rows"][pool]
        if len(want) != len(got):
            out.append(Difference(rel, "rows", len(want), len(got)))
            continue
        for n, (a, b) in enumerate(zip(want, got, strict=True)):
            if a[:2] != b[:2] or len(a) != len(b):
                out.append(Difference(rel, f"row {n} [idx, pred]", a[:2], b[:2]))
            elif any(not abs(x - y) <= LOGIT_TOLERANCE for x, y in zip(a[2:], b[2:], strict=True)):  # NaN fails
                worst = max((abs(x - y) for x, y in zip(a[2:], b[2:], strict=True)),
                            key=lambda d: math.inf if math.isnan(d) else d)
                out.append(Difference(rel, f"row {n} (idx {a[0]}) logits, {worst:.3g} apart (tolerance "
                                           f"{LOGIT_TOLERANCE:g})", a[2:], b[2:]))
    return out


def figure_differences(golden: dict[str, Any], found: dict[str, Any]) -> list[Difference]:
    """Figures missing on either side, floats beyond FIGURE_TOLERANCE, anything else not equal."""
    out: list[Difference] = []
    for rel in FIGURES:
        want, got = golden.get("figures", {}).get(rel, {}), found["figures"][rel]
        for where in sorted(set(want) | set(got)):
            a, b = want.get(where, "absent"), got.get(where, "absent")
            if where not in want or where not in got or not _figure_holds(a, b):
                out.append(Difference(rel, where, a, b))
    return out


def exact_differences(golden: dict[str, Any], bundle: Path, kind: dict[str, str]) -> list[Difference]:
    """Files whose sha256 differs from the one recorded for this very CPU kind (none recorded: none)."""
    for entry in golden.get("exact", []):
        if entry["cpu"] == kind:
            return [Difference(rel, f"sha256 on {describe(kind)}", digest, sha256_file(bundle / rel), True)
                    for rel, digest in sorted(entry["sha256"].items()) if sha256_file(bundle / rel) != digest]
    return []


def differences(golden: dict[str, Any], bundle: Path, kind: dict[str, str]) -> list[Difference]:
    """Every way `bundle` leaves `golden` on a CPU of `kind`: rows, figures, then exact digests."""
    found = observe(bundle)
    tolerant = row_differences(golden, found) + figure_differences(golden, found)
    return tolerant or exact_differences(golden, bundle, kind)


def _message(run: str, path: Path, found: list[Difference]) -> str:
    files = list(dict.fromkeys(d.file for d in found))
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return (f"{', '.join(files)} of the {run} run differ from {path}: {found[0].sentence()}{more}; "
            "if the change is intended, rerun with --update-goldens='why it changed'.")


def dumps(doc: dict[str, Any]) -> str:
    """The golden as JSON with one row per line, so that a change reads as a diff of rows."""
    rows = ",\n".join(
        f'    "{pool}": [\n' + ",\n".join("      " + json.dumps(r) for r in doc["rows"][pool]) + "\n    ]"
        for pool in sorted(doc["rows"]))
    rest = {k: v for k, v in doc.items() if k != "rows"}
    body = json.dumps(rest, indent=2, sort_keys=True)
    return body[:-2] + ',\n  "rows": {\n' + rows + "\n  }\n}\n"


def compare(run: str, bundle: Path, update_reason: str | None, golden_dir: Path = GOLDEN_DIR,
            kind: dict[str, str] | None = None) -> None:
    """Fail the test unless `bundle` (a bag directory, or any folder holding its data/) matches golden `run`.

    kind: the CPU kind that computed the bundle (default: this process's, `cpu_kind()`).
    With `update_reason`, a golden that differs (or is missing, or lacks this kind's digests) is
    rewritten instead, and one line naming the run, the changed files and the reason is appended to
    the changelog. A change beyond the tolerances drops the digests recorded for other CPU kinds:
    they are of the old outputs."""
    kind = kind or cpu_kind()
    path = golden_dir / f"{run}.json"
    golden: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    found = differences(golden, bundle, kind)
    recorded = any(entry["cpu"] == kind for entry in golden.get("exact", []))
    if not found and (recorded or update_reason is None):
        return
    if update_reason is None:
        pytest.fail(_message(run, path, found), pytrace=False)
    entry = {"cpu": kind, "sha256": digests(bundle)}
    if any(not d.exact_only for d in found):
        golden = {**observe(bundle), "exact": [entry]}
        what = ", ".join(dict.fromkeys(d.file for d in found))
    else:
        golden["exact"] = [e for e in golden.get("exact", []) if e["cpu"] != kind] + [entry]
        what = f"exact digests on {describe(kind)}"
    path.write_text(dumps(golden), encoding="utf-8")
    day = datetime.datetime.now(datetime.UTC).date().isoformat()
    with (golden_dir / "CHANGELOG.md").open("a", encoding="utf-8") as log:
        log.write(f"- {day} `{run}` ({what}): {update_reason.strip()}\n")


_CHILD = ("import json, sys\n"
          "from job.cli import main\n"
          "rc = main(sys.argv[2:])\n"
          "from tests.goldens import cpu_kind\n"
          "open(sys.argv[1], 'w', encoding='utf-8').write(json.dumps(cpu_kind()))\n"
          "sys.exit(rc)\n")


def run_in_child(job_args: list[str], out: Path, env: dict[str, str], timeout: float = 600) -> dict[str, str]:
    """`python -m job run JOB_ARGS --out OUT` in a fresh interpreter with `env` added (for example
    oneDNN and ATen limited to AVX2, which both read their settings once at start); returns the CPU
    kind the child computed on. Fails the test, with the child's stderr, unless the run succeeds."""
    kind_file = out.parent / f"{out.name}.cpu.json"
    done = subprocess.run([sys.executable, "-c", _CHILD, str(kind_file), "run", *job_args, "--out", str(out)],
                          cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode != 0:
        pytest.fail(f"the job under {env} exited {done.returncode}: {done.stderr[-2000:]}", pytrace=False)
    kind: dict[str, str] = json.loads(kind_file.read_text(encoding="utf-8"))
    return kind
