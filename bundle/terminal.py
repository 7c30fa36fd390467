"""The edges every command line shares (`python -m job`, `python -m verify`): a path argument is
never empty, and output survives a closed stdout or a terminal that cannot encode it.

Each runs inside `tolerant_stdout()`: what can be written is written (characters the encoding
lacks as backslash escapes), nothing is raised when stdout is closed or its reader has gone, and
the exit code is the command's own."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO


def nonempty_path(text: str) -> Path:
    """argparse type for a path: "" would silently mean the current folder, so it is refused."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names no file; pass a path")
    return Path(text)


class _Forgiving:
    """stdout that writes what it can: once its reader has gone (a closed pipe or descriptor), the
    rest is dropped silently instead of raising from whichever print() came next."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._gone = False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                self._stream.write(text)
            except (OSError, ValueError):
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._drop()

    def _drop(self) -> None:
        """Point the descriptor at /dev/null, so that the interpreter's own flush at exit of
        whatever is still buffered has nothing to complain about."""
        self._gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def tolerant_stdout() -> Iterator[None]:
    """Run a command whose output survives its terminal: characters the encoding lacks (for
    example under PYTHONIOENCODING=ascii) are written as backslash escapes, a closed stdout (None)
    makes print() write nothing, and a reader that goes away mid-run costs the rest of the output,
    never the exit code."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (OSError, ValueError):
                pass
    original = sys.stdout
    if original is None or isinstance(original, _Forgiving):
        yield
        return
    forgiving = _Forgiving(original)
    sys.stdout = forgiving
    try:
        yield
    finally:
        forgiving.flush()
        sys.stdout = original
