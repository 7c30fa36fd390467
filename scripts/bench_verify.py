"""Time the standalone verifier on a full-size bundle (872 rows: 256 explore, 256 calibration,
360 audit, with the bootstrap and stability sections the protocol asks for).

    python scripts/bench_verify.py [BUNDLE] [--trusted-key PUB.pem] [--repeat N]

Without BUNDLE it runs the job on the stand-in resources (`python -m job run --resources
job/locks/standin.json --ephemeral-key`, which needs ../shared/fixtures) in a temporary
folder and verifies that bundle with the ephemeral key's public half. It
prints the import time, the first verification after imports (the figure the issue bounds at
1 s), and the median of the following runs. Not a test: timings depend on the machine."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", nargs="?", type=Path)
    parser.add_argument("--trusted-key", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    t0 = time.perf_counter()
    from verify.api import verify_path
    from verify.checks import Trust
    from verify.signature import load_trusted_key
    imports = time.perf_counter() - t0

    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        trust = Trust()
        if args.bundle is None:
            bundle = Path(tmp) / "standin"
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "job", "run", "--resources",
                            "job/locks/standin.json", "--out", str(bundle), "--ephemeral-key",
                            "--no-progress"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
            print(f"ran the job on the stand-in resources in {time.perf_counter() - t:.2f} s")
            pub = bundle.with_name(bundle.name + ".key") / "signing-key.pub.pem"
            trust = Trust(key=load_trusted_key(str(pub)), source=str(pub))
        else:
            bundle = args.bundle
            if args.trusted_key is not None:
                trust = Trust(key=load_trusted_key(str(args.trusted_key)),
                              source=str(args.trusted_key))
        t = time.perf_counter()
        first = verify_path(bundle, trust)
        cold = time.perf_counter() - t
        warm = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            verify_path(bundle, trust)
            warm.append(time.perf_counter() - t)
    rows = next((c.detail for c in first.checks if c.id == "pools.assignment"), "?")
    print(f"bundle: {bundle}")
    print(f"pools: {rows}")
    print(f"checks: {len(first.checks)}, exit code {first.exit_code}")
    print(f"{'phase':<36} {'seconds':>8}")
    print(f"{'import verify (numpy, pyarrow, ...)':<36} {imports:>8.3f}")
    print(f"{'first verification after imports':<36} {cold:>8.3f}")
    print(f"{f'median of {args.repeat} further runs':<36} {statistics.median(warm):>8.3f}")
    print("under 1 s after imports: " + ("yes" if cold < 1.0 else "NO"))
    return 0 if first.exit_code in (0, 3) else 1


if __name__ == "__main__":
    sys.exit(main())
