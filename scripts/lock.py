#!/usr/bin/env python3
"""Regenerate requirements.lock and requirements-dev.lock (exact versions + sha256).

    python3.11 scripts/lock.py                    # re-lock, keeping the versions already locked
    python3.11 scripts/lock.py --upgrade          # re-resolve everything to the newest allowed
    python3.11 scripts/lock.py --upgrade-package rich --upgrade-package numpy
    python3.11 scripts/lock.py --check            # exit 1 if the files on disk would change

Target: CPython 3.11 on linux x86_64 (glibc >= 2.34: cryptography is manylinux_2_34), runtime wheels only.
Run it with such an interpreter (the host's python3.11); its pip configuration must reach the CPU torch wheel
(find-links /opt/wheels here). torch is pinned to the ``+cpu`` local version, so pip can never
fall back to the multi-GB CUDA build from PyPI.

How: one resolution of runtime + dev requirements together (``pip install --dry-run
--ignore-installed --report``), then a second resolution of the runtime requirements alone,
constrained to the versions of the first. requirements.lock gets the second set;
requirements-dev.lock gets the rest. So the two files never pin one package twice and can be
installed together with ``pip install --require-hashes -r requirements.lock -r
requirements-dev.lock``. Each hash is the sha256 of the exact file the resolver chose (from the
index's ``#sha256=`` fragment, re-computed by reading the file when it is local or has none).
Output is sorted and carries no timestamps: the same inputs give the same bytes.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import tomllib
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME_LOCK = ROOT / "requirements.lock"
DEV_LOCK = ROOT / "requirements-dev.lock"
# Dev/test tools that are not in pyproject's [test] extra (used by the tests and CI only).
EXTRA_DEV = ["roc-validator", "ruff==0.17.6", "mypy==2.4.1", "types-jsonschema==4.26.0.20261006",
             "check-jsonschema==0.39.0",
             # The calibration estimators' reference implementations, for the agreement tests only
             # (tests/job/test_estimator_references.py); never a dependency of the job or the verifier.
             "relplot==1.0.3", "uncertainty-calibration==0.1.4", "netcal==1.4.0", "torchmetrics==1.9.0",
             "scikit-learn==1.9.1"]
# Dev packages allowed (and only these) as sdists: bagit's last wheel (1.8.1) imports
# pkg_resources, which current setuptools no longer ships; 1.9.0 is an sdist only. uncertainty-calibration
# (Kumar et al.'s reference code) was only ever published as an sdist.
# Runtime packages are always wheels (the image builds offline from the wheelhouse).
DEV_SDIST_OK = ["bagit", "uncertainty-calibration"]
TORCH_LOCAL = "+cpu"
FORBIDDEN = re.compile(r"^(nvidia-.*|triton|cuda-.*)$")  # CUDA build leaking in


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def inputs() -> tuple[list[str], list[str]]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = []
    for req in meta["dependencies"]:
        m = re.fullmatch(r"\s*torch\s*==\s*([0-9][0-9.]*)\s*", req)
        runtime.append(f"torch=={m.group(1)}{TORCH_LOCAL}" if m else req)
    if not any(canon(re.split(r"[<>=!~;\[ ]", r)[0]) == "torch" and TORCH_LOCAL in r for r in runtime):
        sys.exit("lock.py: pyproject.toml must pin torch==X.Y.Z (it becomes X.Y.Z+cpu here)")
    dev = list(meta.get("optional-dependencies", {}).get("test", [])) + EXTRA_DEV
    return runtime, dev


def read_pins(path: Path) -> dict[str, str]:
    pins = {}
    if path.exists():
        for line in path.read_text().splitlines():
            m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", line)
            if m:
                pins[canon(m.group(1))] = f"{m.group(1)}=={m.group(2)}"
    return pins


def resolve(reqs: list[str], constraints: list[str], tmp: Path, tag: str,
            sdist_ok: list[str] = ()) -> dict[str, dict]:
    """Resolve with pip; return {canonical name: report item}."""
    req_file, con_file, report = tmp / f"{tag}.in", tmp / f"{tag}.constraints", tmp / f"{tag}.json"
    req_file.write_text("\n".join(reqs) + "\n")
    con_file.write_text("\n".join(constraints) + "\n")
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
           "--only-binary=:all:", *[f"--no-binary={n}" for n in sdist_ok],
           "--quiet", "--disable-pip-version-check",
           "--report", str(report), "-r", str(req_file), "-c", str(con_file)]
    print("lock.py:", " ".join(cmd[2:]), file=sys.stderr)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    for line in proc.stdout.splitlines():  # drop this machine's noise about absent index dirs
        if not re.match(r"WARNING: Location 'file:.*' is ignored", line):
            print(line, file=sys.stderr)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    items = json.loads(report.read_text())["install"]
    return {canon(it["metadata"]["name"]): it for it in items}


def sha256_of(item: dict) -> str:
    info = item["download_info"]
    url = info["url"]
    if url.startswith("file:"):
        path = urllib.request.url2pathname(urllib.parse.urlparse(url).path)
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    archive = info.get("archive_info", {})
    hashes = archive.get("hashes") or {}
    if "sha256" in hashes:
        return hashes["sha256"]
    if archive.get("hash", "").startswith("sha256="):
        return archive["hash"].split("=", 1)[1]
    h = hashlib.sha256()  # index gave no hash: read the file once
    with urllib.request.urlopen(url) as r:
        for block in iter(lambda: r.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def min_glibc(items: dict[str, dict]) -> str:
    """The newest manylinux_2_X that some chosen wheel needs (its lowest listed tag)."""
    need = (2, 17)
    for it in items.values():
        fname = it["download_info"]["url"].rsplit("/", 1)[-1]
        tags = re.findall(r"manylinux_(\d+)_(\d+)", fname)
        tags += [("2", "17")] * ("manylinux2014" in fname) + [("2", "12")] * ("manylinux2010" in fname)
        if tags:
            need = max(need, min((int(a), int(b)) for a, b in tags))
    return f"{need[0]}.{need[1]}"


def kinds(items: dict[str, dict]) -> str:
    sdists = sorted(canon(it["metadata"]["name"]) for it in items.values()
                    if not it["download_info"]["url"].split("#")[0].endswith(".whl"))
    return "wheels only" if not sdists else "wheels except the sdist of " + ", ".join(sdists)


def render(items: dict[str, dict], header: str) -> str:
    header = header.replace("{glibc}", min_glibc(items)).replace("{kinds}", kinds(items))
    lines = [header.rstrip("\n"), ""]
    for key in sorted(items):
        it = items[key]
        name, version = it["metadata"]["name"], it["metadata"]["version"]
        fname = urllib.parse.unquote(it["download_info"]["url"].rsplit("/", 1)[-1].split("#")[0])
        lines.append(f"{canon(name)}=={version} \\")
        lines.append(f"    --hash=sha256:{sha256_of(it)}")
        lines.append(f"    # {fname}")
    return "\n".join(lines) + "\n"


HEADER = """\
# {what}
# Generated by scripts/lock.py (`make lock`); do not edit by hand.
# Target: CPython 3.11, linux x86_64 (glibc >= {{glibc}}), {{kinds}}. torch is the +cpu build.
# Install: pip install --require-hashes -r requirements.lock{dev}
# Inputs: {inputs}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upgrade", action="store_true", help="ignore the versions already locked")
    ap.add_argument("--upgrade-package", action="append", default=[], metavar="NAME",
                    help="let NAME move to the newest allowed version (repeatable)")
    ap.add_argument("--seed-from", metavar="REQS",
                    help="prefer the versions in this pip-freeze file (e.g. of .venv) when they fit")
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if the locks would change")
    args = ap.parse_args()

    if sys.version_info[:2] != (3, 11) or sys.platform != "linux" or platform.machine() != "x86_64":
        sys.exit(f"lock.py: run me with CPython 3.11 on linux x86_64 (this is "
                 f"{platform.python_version()} {sys.platform} {platform.machine()})")
    runtime, dev = inputs()

    keep: dict[str, str] = {}
    if args.seed_from:
        keep.update(read_pins(Path(args.seed_from)))
    if not args.upgrade:
        keep.update(read_pins(RUNTIME_LOCK))
        keep.update(read_pins(DEV_LOCK))
    for name in args.upgrade_package:
        keep.pop(canon(name), None)
    keep.pop("torch", None)  # torch always follows pyproject (as +cpu)

    with tempfile.TemporaryDirectory(prefix="lock-") as t:
        tmp = Path(t)
        try:
            both = resolve(runtime + dev, sorted(keep.values()), tmp, "all", DEV_SDIST_OK)
        except subprocess.CalledProcessError:
            if not keep:
                raise
            # A kept pin no longer fits (e.g. pyproject changed or a seed version conflicts):
            # keep only the pins that the requirements alone allow, one by one is too slow,
            # so retry without the seed first, then without any kept pin.
            print("lock.py: kept versions do not resolve; retrying with the locked pins only",
                  file=sys.stderr)
            keep = {} if args.upgrade else {**read_pins(RUNTIME_LOCK), **read_pins(DEV_LOCK)}
            for name in args.upgrade_package + ["torch"]:
                keep.pop(canon(name), None)
            try:
                both = resolve(runtime + dev, sorted(keep.values()), tmp, "all", DEV_SDIST_OK)
            except subprocess.CalledProcessError:
                print("lock.py: retrying with no kept versions (like --upgrade)", file=sys.stderr)
                both = resolve(runtime + dev, [], tmp, "all", DEV_SDIST_OK)
        pins = [f"{it['metadata']['name']}=={it['metadata']['version']}" for it in both.values()]
        rt = resolve(runtime, pins, tmp, "runtime")

        for key, it in rt.items():
            if both[key]["metadata"]["version"] != it["metadata"]["version"]:
                sys.exit(f"lock.py: {key} resolved differently alone ({it['metadata']['version']})")
        bad = sorted(k for k in both if FORBIDDEN.match(k))
        if bad:
            sys.exit(f"lock.py: CUDA packages in the resolution: {bad}; is the +cpu torch wheel reachable?")
        if not both["torch"]["metadata"]["version"].endswith(TORCH_LOCAL):
            sys.exit("lock.py: torch did not resolve to the +cpu wheel")
        devonly = {k: v for k, v in both.items() if k not in rt}

        out = {
            RUNTIME_LOCK: render(rt, HEADER.format(
                what="Runtime dependencies of calibration-runs (job/, bundle/, verify/).",
                dev="", inputs="pyproject.toml [project.dependencies]")),
            DEV_LOCK: render(devonly, HEADER.format(
                what="Test/dev tools; install together with requirements.lock (no overlap).",
                dev=" -r requirements-dev.lock",
                inputs="pyproject.toml [project.optional-dependencies].test + " + ", ".join(EXTRA_DEV))),
        }

    changed = [p for p, text in out.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for p in changed:
            print(f"lock.py: {p.name} is out of date (run `make lock`)", file=sys.stderr)
        return 1 if changed else 0
    for p, text in out.items():
        tmpf = p.with_suffix(p.suffix + ".tmp")
        tmpf.write_text(text)
        os.replace(tmpf, p)
    print(f"lock.py: {len(rt)} runtime + {len(devonly)} dev packages; "
          f"{'updated ' + ', '.join(p.name for p in changed) if changed else 'no change'}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
