"""read_user_file: a regular file within its cap, or one sentence, quickly, whatever the path is."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bundle.errors import BundleError, KeyFileError
from bundle.userfile import read_user_file


def test_reads_a_regular_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    path.write_bytes(b"x" * 1000)
    assert read_user_file(path, "protocol", 1000) == b"x" * 1000
    (tmp_path / "empty").write_bytes(b"")
    assert read_user_file(tmp_path / "empty", "protocol", 10) == b""


@pytest.mark.parametrize(("target", "words"), [
    ("/dev/zero", "not a regular file"),
    ("/dev/null", "not a regular file"),
    ("fifo", "not a regular file"),
    ("folder", "is a folder"),
    ("big", "over the 1,000-byte limit"),
    ("missing", "does not exist"),
    ("", "path is empty"),
    ("nul", "NUL byte"),
])
def test_refuses_what_is_not_a_small_regular_file(target: str, words: str, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # nobody writes to it: opening it must not wait
    (tmp_path / "folder").mkdir()
    with open(tmp_path / "big", "wb") as fh:
        fh.truncate(10**9)  # sparse: a gigabyte that costs nothing unless read
    path = {"fifo": str(tmp_path / "fifo"), "folder": str(tmp_path / "folder"),
            "big": str(tmp_path / "big"), "missing": str(tmp_path / "missing"),
            "nul": "a\x00b"}.get(target, target)
    start = time.perf_counter()
    with pytest.raises(KeyFileError) as info:
        read_user_file(path, "signing key file", 1000, KeyFileError)
    assert time.perf_counter() - start < 1
    message = str(info.value)
    assert words in message and "\n" not in message and message.endswith(".")
    assert isinstance(info.value, BundleError)

