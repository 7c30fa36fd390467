"""The edges every command line of the job and the bundle tool shares: a path argument is never
empty, and output survives a closed stdout or a terminal that cannot encode it.

`python -m job` and `python -m bundle` call `tolerant_stdio()` first and `finish_stdout()` last:
what can be written is written (characters the encoding lacks as backslash escapes), nothing is
raised when stdout is closed or its reader has gone, and the exit code is the command's own. The
verifier, which imports only definitions from bundle/, has the same few lines in
verify/__main__.py."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def nonempty_path(text: str) -> Path:
    """argparse type for a path: "" would silently mean the current folder, so it is refused."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names no file; pass a path")
    return Path(text)


def tolerant_stdio() -> None:
    """Let stdout and stderr write characters their encoding lacks as backslash escapes (for
    example under PYTHONIOENCODING=ascii) instead of raising. A closed stream is None: print()
    then writes nothing, which is what a closed stdout asks for."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (OSError, ValueError):
                pass


def finish_stdout() -> None:
    """Flush stdout; when its reader has gone (a closed pipe or descriptor), drop the rest quietly,
    so that the interpreter's own flush at exit has nothing left to complain about."""
    stream = sys.stdout
    if stream is None:
        return
    try:
        stream.flush()
    except (OSError, ValueError):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
