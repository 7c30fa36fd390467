"""Pages of a memory-mapped model file as this process holds them: whether a tensor still reads the
file's own bytes, and handing such a tensor's pages back once nothing needs them resident."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any

import numpy as np

_MADV_DONTNEED = 4  # Linux <sys/mman.h>


def file_backing(t: Any) -> tuple[Path, int] | None:
    """(file, byte offset) when CPU tensor `t` is a private mapping of a file that this process
    has not written to: each of its pages is either not faulted in yet or still the file's own page
    (no copy-on-write copy, nothing swapped). None otherwise or where /proc cannot tell (not Linux)."""
    if t.device.type != "cpu" or not t.is_contiguous():
        return None
    start, nbytes = t.data_ptr(), t.numel() * t.element_size()
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.rstrip("\n").split(maxsplit=5)
                lo, hi = (int(a, 16) for a in fields[0].split("-"))
                if lo <= start and start + nbytes <= hi:
                    break
            else:
                return None
        if len(fields) < 6 or not fields[5].startswith("/"):
            return None
        path, offset, inode = Path(fields[5]), int(fields[2], 16) + start - lo, int(fields[4])
        st = path.stat()
        if st.st_ino != inode or st.st_size < offset + nbytes:
            return None  # replaced or deleted since it was mapped
        page = os.sysconf("SC_PAGE_SIZE")
        first, last = start // page, (start + nbytes - 1) // page
        with open("/proc/self/pagemap", "rb") as pm:
            pm.seek(first * 8)
            flags = np.frombuffer(pm.read((last - first + 1) * 8), dtype=np.uint64)
    except (OSError, ValueError, IndexError):
        return None
    one = np.uint64(1)
    present, swapped, file_page = ((flags >> np.uint64(b)) & one for b in (63, 62, 61))
    if len(flags) != last - first + 1 or ((present & (one - file_page)) | swapped).any():
        return None
    return path, offset


def release_file_pages(t: Any) -> bool:
    """Drop the resident pages that lie wholly inside CPU tensor `t` when `t` is a private mapping of
    a file this process has not written to (file_backing); a later read faults them in again from
    the file, the same bytes. True when pages were handed back, False where `t` is not such a
    mapping or madvise refused."""
    if file_backing(t) is None:
        return False
    page = os.sysconf("SC_PAGE_SIZE")
    start, end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    first, last = -(-start // page) * page, end // page * page
    if last <= first:
        return False
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return bool(madvise(first, last - first, _MADV_DONTNEED) == 0)
