"""Time the browser verifier (web/dist/verify.html) in headless Debian chromium on a 50,000-row bundle,
next to the Python verifier on the same archive, and print the page's size gzipped.

    python -m tests.web.bench_web [--rows 50000] [--repeat 3] [--bootstrap]

The bundle is synthetic (tests/synthetic.py): the repository's protocol with an empty explore pool
and the rows split evenly between the calibration and the audit pool, signed with a fresh key and
archived by `job archive`. Without --bootstrap the protocol's bootstrap and stability sections are
dropped: the page does not perform those checks, and the synthetic writer's bootstrap over 25,000
rows takes minutes. Prints, per run, the page's own time from the archive chosen to the verdict
(`seconds`) and the time until the verdict was read back (`wall`). Not a test: timings depend on the
machine. Needs chromium and web/node_modules (make web)."""

from __future__ import annotations

import argparse
import gzip
import json
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
    return (json.dumps(doc, indent=2) + "\n").encode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--bootstrap", action="store_true", help="keep the protocol's bootstrap and stability")
    args = parser.parse_args()

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from bundle.keys import public_key_pem
    from job.publishing.archive import archive
    from tests.synthetic import make_bundle
    from verify.api import verify_path
    from verify.context import Trust

    page = REPO / "web" / "dist" / "verify.html"
    print(f"page: {page.stat().st_size:,} bytes, {len(gzip.compress(page.read_bytes(), 9)):,} bytes gzipped (-9)")
    key = Ed25519PrivateKey.generate()
    with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        bag = make_bundle(tmp / "bag", key, protocol=_protocol(args.rows, args.bootstrap))
        tarball = archive(bag, tmp / "bundle.tar.gz")
        print(f"bundle: {args.rows:,} rows, archive {tarball.stat().st_size:,} bytes, built in "
              f"{time.perf_counter() - t0:.1f} s")

        t0 = time.perf_counter()
        outcome = verify_path(tarball, Trust(key=key.public_key(), source="key"))
        print(f"python -m verify: exit {outcome.exit_code} in {time.perf_counter() - t0:.2f} s")

        cases = [{"name": f"run{i}", "kind": "archive", "path": str(tarball), "key": public_key_pem(key).decode(),
                  "fingerprint": None, "timeoutMs": 300_000} for i in range(args.repeat)]
        job = {"chromium": "/usr/bin/chromium", "userDataDir": str(tmp / "profile"), "cases": cases}
        (tmp / "job.json").write_text(json.dumps(job))
        drive = REPO / "web" / "test" / "drive.mjs"
        subprocess.run(["node", str(drive), str(tmp / "job.json"), str(tmp / "out.jsonl")], check=True, timeout=1800)
        seconds = []
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
                  f"page {result['seconds']:.2f} s, wall {found['wall']:.2f} s, requests {len(found['requests'])}")
            slowest = sorted(result["checks"], key=lambda c: -c.get("ms", 0))[:4]
            print("  slowest checks: " + ", ".join(f"{c['id']} {c.get('ms', 0)} ms" for c in slowest))
        print(f"page median: {statistics.median(seconds):.2f} s over {len(seconds)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
