"""The two command lines run in this process, the way a user runs them but without starting an
interpreter (and importing torch) for each call: `run_job` and `run_verify` call the
command's `main(argv)` with stdout and stderr captured, and return what a child process would have
shown: the exit status, the text on stdout and the text on stderr.

argparse's exit (a usage error, `--help`) is an exit status like any other. `cwd` runs the command
from another folder and `env` adds (or, with None, removes) environment variables for the call
only; both are restored afterwards. `timeout` turns a call that would block (a FIFO opened for
reading) into a failed test instead of a hung run. The commands are looked up here and nowhere else, so a command
that moves to another module is followed in one place.

What this cannot show is what only a process has: a closed or broken stdout, the interpreter's
own encoding of its streams, signals, the environment read once at start (oneDNN's ISA limits),
which modules an import pulls in. Tests of those start a child (`python -m ...`) on purpose."""

from __future__ import annotations

import contextlib
import io
import os
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Ran:
    """What a command left: its exit status and everything it wrote to stdout and stderr."""

    code: int
    out: str
    err: str


@contextlib.contextmanager
def _environment(env: Mapping[str, str | None]) -> Iterator[None]:
    """os.environ with `env` applied (None removes a variable), restored on the way out."""
    saved = {name: os.environ.get(name) for name in env}
    try:
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Timeout(BaseException):
    """The command ran past the `timeout` it was given (a BaseException, so that no `except
    Exception` on the way turns it into an ordinary error message)."""


@contextlib.contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    """Raise Timeout in the main thread once `seconds` have passed (SIGALRM interrupts a blocking
    open or read, which a child's timeout would have killed)."""
    if seconds is None:
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise Timeout(f"the command ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _run(main: Callable[[list[str]], int], args: Sequence[str | Path], cwd: Path | None,
         env: Mapping[str, str | None] | None, timeout: float | None) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_deadline(timeout))
        stack.enter_context(_environment(env or {}))
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return Ran(code, out.getvalue(), err.getvalue())


def run_job(args: Sequence[str | Path], *, cwd: Path | None = None,
            env: Mapping[str, str | None] | None = None, timeout: float | None = None) -> Ran:
    """`python -m job ARGS` (the calibration-job command), in this process."""
    from job.cli import main

    return _run(main, args, cwd, env, timeout)


def run_verify(args: Sequence[str | Path], *, cwd: Path | None = None,
               env: Mapping[str, str | None] | None = None, timeout: float | None = None) -> Ran:
    """`python -m verify ARGS`, in this process."""
    from verify.__main__ import main

    return _run(main, args, cwd, env, timeout)
