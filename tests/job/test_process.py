"""The process's memory settings are applied once, at process start, and recorded as applied."""

from __future__ import annotations

import json
import os
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


ARENAS = (
    "import ctypes, json, os, sys, threading\n"
    "import job.process as p\n"
    "from job.runtime import forward_pool\n"
    "record = dict(p.configure_process().malloc) if sys.argv[1] == 'tuned' else {}\n"
    "stats = getattr(ctypes.CDLL(None), 'malloc_stats', None)  # one 'Arena N:' paragraph per arena, on stderr\n"
    "if stats is None:\n"
    "    print(json.dumps({'malloc': 'not glibc'}))\n"
    "    sys.exit(0)\n"
    "import torch\n"
    "meet = threading.Barrier(4)\n"
    "def work(_):\n"
    "    block = torch.ones(1 << 20)  # 4 MiB from this thread's arena\n"
    "    meet.wait(timeout=60)  # all four alive at once, each holding its block\n"
    "    return float(block.sum())\n"
    "stats()\n"
    "os.write(2, b'-- the pool --\\n')\n"
    "with forward_pool(4) as pool:\n"
    "    list(pool.map(work, range(4)))\n"
    "stats()\n"
    "print(json.dumps(record), flush=True)\n")


def arenas_around_a_pool(how: str, **env: str) -> tuple[dict[str, object], int, int]:
    """The malloc record (empty when `how` is not 'tuned'), and glibc's arena count before and after
    four forward workers allocated at once, in a fresh process whose environment has `env` and no
    other arena setting."""
    environ = {k: v for k, v in os.environ.items() if k not in {"MALLOC_ARENA_MAX", "GLIBC_TUNABLES"}}
    out = subprocess.run([sys.executable, "-c", ARENAS, how], cwd=REPO, capture_output=True, text=True,
                         timeout=300, check=False, env={**environ, **env})
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout.strip().splitlines()[-1])
    if record.get("malloc") not in (None, "glibc"):
        pytest.skip(f"the allocator was left alone: {record['malloc']}")
    before, _, after = out.stderr.partition("-- the pool --")
    return record, before.count("Arena "), after.count("Arena ")


def test_the_forward_workers_make_no_heap_of_their_own() -> None:
    record, before, after = arenas_around_a_pool("tuned")
    assert record["arena_max"] == 1
    assert after == before  # they share the arenas made before (the main one, and those of earlier threads)


def test_without_the_setting_each_worker_makes_a_heap() -> None:  # the control: the test above can fail
    _, before, after = arenas_around_a_pool("untuned")
    assert after > before


def test_an_arena_count_from_the_environment_is_left_alone() -> None:
    record, before, after = arenas_around_a_pool("tuned", MALLOC_ARENA_MAX="3")
    assert record["arena_max"] == "environment"
    assert before <= 3 and after == 3  # glibc's limit, not the job's: the workers made new ones up to it
