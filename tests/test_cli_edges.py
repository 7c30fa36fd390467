"""The edges of both command lines (`python -m verify`, `python -m job`): an operator file that
is a FIFO, a device, too large or two PEM blocks gets one sentence and exit 2, quickly; an empty path
is a usage error (both in this process, tests/cli.py); a closed stdout or an ASCII-only one never
turns into a traceback and never changes the exit code (run as a user runs them, in a child
process, since only a process has its own stdout and encoding)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from job.publishing.archive import archive
from job.publishing.signing_keys import generate
from tests.cli import Ran, run_job, run_verify
from tests.verify.tamper import Keys, copy_bag, synthetic_bag, verify_keys  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], *, close_stdout: bool = False, broken_pipe: bool = False,
         env: dict[str, str] | None = None) -> tuple[int, str, str, float]:
    """(exit code, stdout, stderr, seconds) of `python ARGS`; with close_stdout, fd 1 is closed;
    with broken_pipe, fd 1 is a pipe nobody reads (its read end closed before the child starts),
    written unbuffered so that the first print() meets the closed pipe."""
    command = [sys.executable, *args]
    if close_stdout:
        command = ["bash", "-c", 'exec "$@" >&-', "_", *command]
    stdout: int | None = subprocess.PIPE
    if close_stdout:
        stdout = None
    elif broken_pipe:
        read_end, stdout = os.pipe()
        os.close(read_end)
        env = {**(env or {}), "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, text=True,
                              timeout=120, check=False,
                              env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    finally:
        if broken_pipe and stdout is not None:
            os.close(stdout)
    return done.returncode, done.stdout or "", done.stderr, time.perf_counter() - start


def _one_sentence(err: str) -> str:
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines, err
    return lines[-1]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, synthetic_bag: Path,  # noqa: F811
          verify_keys: Keys) -> dict[str, Path]:  # noqa: F811
    work = tmp_path_factory.mktemp("edges")
    bag = copy_bag(synthetic_bag, work / "run\u00e9")
    generate(work / "k")
    pem = (work / "k" / "signing-key.pem").read_bytes()
    pub = (work / "k" / "signing-key.pub.pem").read_bytes()
    (work / "two.pem").write_bytes(pem + pem)
    (work / "two.pub.pem").write_bytes(pub + pub)
    os.mkfifo(work / "fifo")
    with open(work / "big", "wb") as fh:
        fh.truncate(10**9)
    return {"bag": bag, "tar": archive(bag, work / "run.tar.gz"), "key": work / "k/signing-key.pem",
            "two": work / "two.pem", "two-pub": work / "two.pub.pem", "fifo": work / "fifo",
            "big": work / "big", "zero": Path("/dev/zero"), "work": work}


_KEY_OPTIONS = ("job cosign", "job reproduce --signing-key", "verify --trusted-key")
_DOCUMENT_OPTIONS = ("job reproduce --resources", "job run --protocol")


@pytest.mark.parametrize(("command", "bad"), [
    *((c, b) for c in _KEY_OPTIONS for b in ("zero", "fifo", "big", "two")),
    *((c, b) for c in _DOCUMENT_OPTIONS for b in ("zero", "fifo", "big")),
])
def test_operator_files_refused_in_one_sentence(command: str, bad: str,
                                                world: dict[str, Path]) -> None:
    path = str(world["two-pub" if bad == "two" and command.startswith("verify") else bad])
    out = str(world["work"] / f"out-{command.replace(' ', '-')}-{bad}")
    run, args = {
        "job cosign": (run_job, ["cosign", str(world["bag"]), "--signing-key", path]),
        "job reproduce --signing-key": (run_job, ["reproduce", str(world["tar"]), "--out", out,
                                                  "--signing-key", path]),
        "job reproduce --resources": (run_job, ["reproduce", str(world["tar"]), "--out", out,
                                                "--signing-key", str(world["key"]), "--resources", path]),
        "job run --protocol": (run_job, ["run", "--protocol", path, "--out", out, "--ephemeral-key"]),
        "verify --trusted-key": (run_verify, [str(world["tar"]), "--trusted-key", path]),
    }[command]
    start = time.perf_counter()
    ran: Ran = run(args, timeout=60)
    seconds = time.perf_counter() - start
    line = _one_sentence(ran.err)
    assert ran.code == 2, ran.err
    words = {"zero": "regular file", "fifo": "regular file", "big": "bytes",
             "two": "more than one PEM block"}[bad]
    assert words in line, line
    assert seconds < 20, seconds
    assert not os.path.lexists(out)


@pytest.mark.parametrize(("run", "args"), [
    (run_verify, [""]),
    (run_job, ["archive", ""]),
    (run_job, ["cosign", "", "--signing-key", "k.pem"]),
    (run_job, ["reproduce", "", "--out", "a.json", "--signing-key", "k.pem"]),
])
def test_empty_path_is_a_usage_error(run: Callable[[list[str]], Ran], args: list[str]) -> None:
    ran = run(args)
    assert ran.code == 2 and ran.out == ""
    assert "empty path" in _one_sentence(ran.err)


@pytest.mark.parametrize("edge", ["closed", "broken-pipe", "ascii"])
def test_verify_output_edges_keep_the_exit_code(edge: str, world: dict[str, Path]) -> None:
    code, out, err, _ = _run(["-m", "verify", str(world["tar"])], close_stdout=edge == "closed",
                             broken_pipe=edge == "broken-pipe",
                             env={"PYTHONIOENCODING": "ascii"} if edge == "ascii" else None)
    assert err == "" and code == 3, err  # intact, no trusted key given
    if edge == "ascii":
        assert "INTEGRITY HOLDS" in out and out.isascii()


@pytest.mark.parametrize("edge", ["closed", "broken-pipe", "ascii"])
def test_bundle_output_edges_keep_the_exit_code(edge: str, world: dict[str, Path]) -> None:
    target = world["work"] / f"r\u00e9-{edge}.tar.gz"
    code, out, err, _ = _run(["-m", "job", "archive", str(world["bag"]), "--out", str(target)],
                             close_stdout=edge == "closed", broken_pipe=edge == "broken-pipe",
                             env={"PYTHONIOENCODING": "ascii"} if edge == "ascii" else None)
    assert err == "" and code == 0 and target.is_file(), err
    if edge == "ascii":
        assert out.isascii() and "r\\xe9" in out


def test_job_output_edges_keep_the_exit_code(world: dict[str, Path]) -> None:
    """The job's errors name the paths given, whatever the terminal can show."""
    for closed, env in ((True, None), (False, {"PYTHONIOENCODING": "ascii"})):
        code, _, err, _ = _run(["-m", "job", "reproduce", str(world["work"] / "missing\u00e9"),
                                "--out", str(world["work"] / "a.json"), "--signing-key",
                                str(world["key"])], close_stdout=closed, env=env)
        assert code == 2 and "does not exist" in _one_sentence(err)


@pytest.mark.parametrize("edge", ["closed", "broken-pipe", "ascii"])
def test_job_data_output_edges_keep_the_exit_code(edge: str,
                                                  tiny_world: tuple[Path, Path]) -> None:
    """`prepare` prints a line per checked file: it still checks them all and exits 0."""
    protocol, lock = tiny_world
    code, out, err, _ = _run(["-m", "job", "prepare", "--protocol", str(protocol), "--resources",
                              str(lock)], close_stdout=edge == "closed",
                             broken_pipe=edge == "broken-pipe",
                             env={"PYTHONIOENCODING": "ascii"} if edge == "ascii" else None)
    assert "Traceback" not in err and code == 0, err
    if edge == "ascii":
        assert out.isascii() and out.startswith("ok  ")
