"""The process's memory settings are applied once, at process start, and recorded as applied."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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


def test_blocks_are_mapped_apart_only_within_the_block() -> None:
    # glibc's mallinfo2().hblkhd counts the bytes in blocks mapped on their own; a 1 MiB block is
    # below configure_process's threshold (from the heap) and above the block's (mapped apart). The
    # heap is trimmed first: a free top of the heap large enough serves a block whatever the threshold.
    code = (
        "import ctypes, json\n"
        "import job.process as p\n"
        "class Info(ctypes.Structure):\n"
        "    _fields_ = [(n, ctypes.c_size_t) for n in ('arena', 'ordblks', 'smblks', 'hblks', 'hblkhd',"
        " 'usmblks', 'fsmblks', 'uordblks', 'fordblks', 'keepcost')]\n"
        "libc = ctypes.CDLL(None)\n"
        "libc.mallinfo2.restype = Info\n"
        "libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)\n"
        "libc.free.argtypes = (ctypes.c_void_p,)\n"
        "def mapped(size=1 << 20):\n"
        "    libc.malloc_trim(0)\n"
        "    before = libc.mallinfo2().hblkhd\n"
        "    block = libc.malloc(size)\n"
        "    grew = libc.mallinfo2().hblkhd - before >= size\n"
        "    libc.free(block)\n"
        "    return grew\n"
        "tuned = dict(p.configure_process().malloc)['malloc'] == 'glibc'\n"
        "outside = mapped()\n"
        "with p.blocks_mapped_apart():\n"
        "    inside = mapped()\n"
        "print(json.dumps({'tuned': tuned, 'before': outside, 'inside': inside, 'after': mapped()}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                         check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if not got["tuned"]:
        pytest.skip("not glibc: the allocator is left alone")
    assert got == {"tuned": True, "before": False, "inside": True, "after": False}
