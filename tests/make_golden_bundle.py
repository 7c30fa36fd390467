#!/usr/bin/env python3
"""Write tests/goldens/bundle-v<N>/, a small signed bundle of the format this code writes
(bundle.layout.FORMAT_VERSION, N) that every later verifier must still accept
(tests/verify/test_golden_bundle.py), and its trusted public key tests/goldens/bundle-v<N>.pub.pem.

    .venv/bin/python -m tests.make_golden_bundle

The job runs on the tiny generated world of tests/factory.py (the unit tests' fixtures) with a
fresh Ed25519 key; the private half is generated in a temporary folder and deleted with it, so
nobody can sign another bundle as this one's signer. Regenerate only when format 1 itself is
meant to change: the point of the golden is that it does not. Goldens of earlier formats are never
rewritten.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bundle.layout import FORMAT_VERSION

GOLDEN = REPO / "tests" / "goldens" / f"bundle-v{FORMAT_VERSION}"
TRUSTED_KEY = REPO / "tests" / "goldens" / f"bundle-v{FORMAT_VERSION}.pub.pem"
SOURCE_DATE_EPOCH = "1767225600"  # 2026-01-01: the golden's Bagging-Date and datePublished
PUBLICATION = ["--license", "https://spdx.org/licenses/CC-BY-4.0",
               "--publisher", "calibration-runs <https://calibration-runs.example/>",
               "--author", "Golden Bundle <https://orcid.org/0000-0002-1825-0097>",
               "--contact", "calibration@example.org"]


def main() -> int:
    sys.path.insert(0, str(REPO))
    os.environ.update(HF_HUB_OFFLINE="1", SOURCE_DATE_EPOCH=SOURCE_DATE_EPOCH, PYTHONHASHSEED="0")
    from job.cli import main as job
    from job.publishing.signing_keys import PUBLIC_KEY_NAME, generate
    from tests.factory import make_world

    with tempfile.TemporaryDirectory(prefix="golden-bundle-") as tmp:
        protocol, lock = make_world(Path(tmp) / "world")
        keys = Path(tmp) / "keys"
        generate(keys)
        out = Path(tmp) / "bundle"
        rc = job(["run", "--protocol", str(protocol), "--resources", str(lock), "--out", str(out),
                  "--signing-key", str(keys / "signing-key.pem"), "--no-progress", *PUBLICATION])
        if rc != 0:
            return rc
        shutil.rmtree(GOLDEN, ignore_errors=True)
        shutil.copytree(out, GOLDEN)
        shutil.copyfile(keys / PUBLIC_KEY_NAME, TRUSTED_KEY)
    size = sum(p.stat().st_size for p in GOLDEN.rglob("*") if p.is_file())
    print(f"wrote {GOLDEN.relative_to(REPO)} ({size} bytes) and {TRUSTED_KEY.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
