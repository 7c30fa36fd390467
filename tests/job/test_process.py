"""The process's memory settings are applied once, at process start, and recorded as applied."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.factory import REPO


def test_the_cli_applies_the_settings_before_anything_else_and_once() -> None:
    code = (
        "import json, sys\n"
        "import job.process as p\n"
        "calls = []\n"
        "real = p._use_system_arrow_pool\n"
        "p._use_system_arrow_pool = lambda: calls.append(1) or real()\n"
        "from job.cli import main\n"
        "try:\n"
        "    main(['run', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "by_cli = len(calls)\n"
        "import pyarrow as pa\n"
        "from job.runtime import Settings, configure_torch\n"
        "from job.protocol import load_protocol\n"
        "info = configure_torch(Settings.from_protocol(load_protocol().inference, 1))\n"
        "print(json.dumps({'by_cli': by_cli, 'calls': len(calls), 'pool': pa.default_memory_pool().backend_name,"
        " 'allocator': info['allocator'], 'same': p.configure_process() is p.configure_process()}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                         check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["by_cli"] == got["calls"] == 1 and got["same"]  # applied by the CLI's start, not again later
    assert got["pool"] == got["allocator"]["arrow_memory_pool"] == "system"
    assert got["allocator"]["malloc"] in {"glibc", "default (no glibc mallopt)", "default (mallopt refused)"}
