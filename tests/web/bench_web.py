"""Time the browser verifier (web/dist/verify.html) in headless Debian chromium on a 50,000-row bundle, next to
the Python verifier on the same archive, and print the page's size gzipped.

    python -m tests.web.bench_web [--rows 50000] [--repeat 3] [--bootstrap] [--workdir DIR]
    python -m tests.web.bench_web --archive BUNDLE.tar.gz --public-key signer.pub.pem [--repeat 3] [--no-python]

The bundle is synthetic (tests/synthetic.py): the repository's protocol with an empty explore pool and the
rows split evenly between the calibration and the audit pool, signed with a fresh key and archived by `job
archive`. Without --bootstrap the protocol's bootstrap and stability sections (and the estimators' bootstrap
intervals) are dropped: the synthetic writer's bootstrap over 25,000 rows takes minutes (reuse it with
--workdir), and the page's recomputation of a 2,000 x 25,000 resample matrix is timed apart that way.
Prints, per run, the page's own time from the archive chosen to the verdict (`seconds`), the time until
the verdict was read back (`wall`) and the renderer's CPU time over it (all its threads, and its main
thread), which a loaded machine inflates far less than the wall time. Not a test:
timings depend on the machine. Needs chromium and web/node_modules (make web). With --workdir the bundle, its
archive and its key are kept in DIR and reused by the next run with the same DIR (to time the page alone,
again). With --archive and --public-key, a given archive (e.g. a bundle of the job, as the slow browser test
makes it) is timed instead, signed by the key in that PEM; --no-python leaves the Python verifier out."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def _protocol(rows: int, bootstrap: bool) -> bytes:
    doc = json.loads((REPO / "provenance.json").read_bytes())
    sizes = (0, rows // 2, rows - rows // 2)
    for pool, size in zip(doc["split"]["pools"], sizes, strict=True):
        pool["size"] = size
    doc["resources"]["dataset"]["rows"] = rows
    if not bootstrap:
        doc.pop("bootstrap", None)
        doc.pop("stability", None)
        for estimator in doc["metrics"].get("estimators", []):
            estimator.pop("interval", None)  # a paired-bootstrap interval needs the bootstrap section
    return (json.dumps(doc, indent=2) + "\n").encode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--bootstrap", action="store_true", help="keep the protocol's bootstrap and stability")
    parser.add_argument("--workdir", type=Path, help="keep (and reuse) the bundle, archive and key here")
    parser.add_argument("--archive", type=Path, help="time this bundle archive instead of a synthetic one")
    parser.add_argument("--public-key", type=Path, help="the PEM of the archive's signer (with --archive)")
    parser.add_argument("--no-python", action="store_true", help="do not time the Python verifier")
    args = parser.parse_args()
    if (args.archive is None) != (args.public_key is None):
        parser.error("--archive and --public-key go together")
    if args.archive is not None:
        with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp_name:
            return run_given(args, Path(tmp_name))
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        return run(args, args.workdir)
    with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp_name:
        return run(args, Path(tmp_name))


def _print_page_size() -> None:
    page = REPO / "web" / "dist" / "verify.html"
    print(f"page: {page.stat().st_size:,} bytes, {len(gzip.compress(page.read_bytes(), 9)):,} bytes gzipped (-9)")


def run_given(args: argparse.Namespace, tmp: Path) -> int:
    """Time Python once (unless --no-python) and the page args.repeat times on a given archive and key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from verify.api import verify_path
    from verify.context import Trust

    _print_page_size()
    pem = args.public_key.read_bytes()
    public = serialization.load_pem_public_key(pem)
    assert isinstance(public, Ed25519PublicKey)
    print(f"bundle: {args.archive} ({args.archive.stat().st_size:,} bytes)")
    if not args.no_python:
        t0 = time.perf_counter()
        outcome = verify_path(args.archive, Trust(key=public, source="key"))
        print(f"python -m verify: exit {outcome.exit_code} in {time.perf_counter() - t0:.2f} s")
    return time_page(args, tmp, args.archive, pem.decode())


def run(args: argparse.Namespace, tmp: Path) -> int:
    """Build (or reuse) the bundle in tmp, time Python once and the page args.repeat times."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from bundle.keys import public_key_pem
    from job.publishing.archive import archive
    from tests.synthetic import make_bundle
    from verify.api import verify_path
    from verify.context import Trust

    _print_page_size()
    tarball, key_file = tmp / "bundle.tar.gz", tmp / "key.pem"
    if tarball.is_file() and key_file.is_file():
        loaded = serialization.load_pem_private_key(key_file.read_bytes(), None)
        assert isinstance(loaded, Ed25519PrivateKey)
        key = loaded
        print(f"bundle: reused {tarball} ({tarball.stat().st_size:,} bytes)")
    else:
        key = Ed25519PrivateKey.generate()
        t0 = time.perf_counter()
        bag = make_bundle(tmp / "bag", key, protocol=_protocol(args.rows, args.bootstrap))
        archive(bag, tarball)
        key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        print(f"bundle: {args.rows:,} rows, archive {tarball.stat().st_size:,} bytes, built in "
              f"{time.perf_counter() - t0:.1f} s")

    if not args.no_python:
        t0 = time.perf_counter()
        outcome = verify_path(tarball, Trust(key=key.public_key(), source="key"))
        print(f"python -m verify: exit {outcome.exit_code} in {time.perf_counter() - t0:.2f} s")
    return time_page(args, tmp, tarball, public_key_pem(key).decode())


def time_page(args: argparse.Namespace, tmp: Path, tarball: Path, pem: str) -> int:
    """Time the page args.repeat times on the archive under the public key's PEM; print each run."""
    cases = [{"name": f"run{i}", "kind": "archive", "path": str(tarball), "key": pem,
              "fingerprint": None, "timeoutMs": 300_000} for i in range(args.repeat)]
    job = {"chromium": "/usr/bin/chromium", "userDataDir": str(tmp / "profile"), "cases": cases}
    (tmp / "job.json").write_text(json.dumps(job))
    drive = REPO / "web" / "test" / "drive.mjs"
    subprocess.run(["node", str(drive), str(tmp / "job.json"), str(tmp / "out.jsonl")], check=True, timeout=1800)
    seconds, cpu = [], []
    for line in (tmp / "out.jsonl").read_text().splitlines():
        found = json.loads(line)
        if found["name"] == "__control__":
            continue
        result = found["result"]
        if "error" in result:
            print(f"{found['name']}: the page could not read it: {result['error']}")
            return 1
        failed = [c["id"] for c in result["checks"] if c["status"] == "fail"]
        seconds.append(result["seconds"])
        print(f"{found['name']}: {result['verdict']}, {len(result['checks'])} checks ({len(failed)} failed), "
              f"page {result['seconds']:.2f} s (reading the archive {result.get('readSeconds', 0):.2f} s), "
              f"wall {found['wall']:.2f} s, renderer CPU {found['cpuSeconds']['process']:.2f} s "
              f"(main thread {found['cpuSeconds']['thread']:.2f} s), requests {len(found['requests'])}")
        cpu.append(found["cpuSeconds"]["process"])
        slowest = sorted(result["checks"], key=lambda c: -c.get("ms", 0))[:4]
        print("  slowest checks: " + ", ".join(f"{c['id']} {c.get('ms', 0)} ms" for c in slowest))
    print(f"page median: {statistics.median(seconds):.2f} s, renderer CPU median {statistics.median(cpu):.2f} s, "
          f"over {len(seconds)} runs; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
