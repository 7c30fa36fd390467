"""The verifier's command line on hostile paths, arguments and files: never a traceback.

Whatever it is given, `python -m verify` ends with exit 1 (a check failed, the report names it)
or 2 (one line on stderr saying what is wrong and what to do), or 0/3 for a genuine bundle.
A few cases run the real command in a subprocess; the many generated ones call
`verify.__main__.main` in-process, where an exception escaping it is what a user would see as a
traceback. Faults a root user cannot provoke with chmod or a small disk (unreadable files, a
full temporary folder, memory) are raised by monkeypatched `os` functions."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from job.publishing.archive import archive
from tests.cli import run_verify
from tests.synthetic import REPO
from tests.verify.tamper import Keys, copy_bag, synthetic_bag, verify_keys  # noqa: F401
from verify import tree as bagtree

TRACEBACK = "Traceback (most recent call last)"
NAME_MAX = 255
PATH_MAX = 4096


def run_main(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `main(argv)` in-process; argparse's SystemExit is an exit."""
    ran = run_verify(argv)
    return ran.code, ran.out, ran.err


def run_process(argv: list[str | bytes], cwd: Path = REPO) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the real `python -m verify`; bytes arguments pass as is."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "verify", *argv], cwd=cwd, env=env,
                            capture_output=True, timeout=60, check=False)
    return (result.returncode, result.stdout.decode("utf-8", "replace"),
            result.stderr.decode("utf-8", "replace"))


def assert_clean(result: tuple[int, str, str], allowed: tuple[int, ...] = (1, 2)) -> int:
    """No traceback, an allowed exit code, and for exit 2 exactly one line on stderr."""
    code, _, err = result
    assert TRACEBACK not in err, err
    assert code in allowed, (code, err)
    if code == 2:
        assert len(err.splitlines()) == 1 and err.startswith("verify: "), err
    return code


@pytest.fixture
def bag(synthetic_bag: Path, tmp_path: Path) -> Path:  # noqa: F811
    """A writable copy of the genuine synthetic bundle."""
    return copy_bag(synthetic_bag, tmp_path / "bag")


@pytest.fixture
def pub(verify_keys: Keys, tmp_path: Path) -> Path:  # noqa: F811
    """The public key PEM that signed the synthetic bundle."""
    path = tmp_path / "real.pub.pem"
    path.write_bytes(verify_keys.real.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return path


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _deep(base: Path, total: int) -> Path:
    """A chain of folders under `base` whose absolute path is over `total` bytes, built one
    level at a time relative to an open folder (no call ever sees the whole path)."""
    name = "d" * (NAME_MAX - 5)
    depth = (total - len(os.fsencode(base))) // (len(name) + 1) + 1
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)
    return base.joinpath(*[name] * depth)


@contextlib.contextmanager
def failing(monkeypatch: pytest.MonkeyPatch, name: str, exc: BaseException,
            when: Callable[[Any], bool]) -> Iterator[None]:
    """os.`name` raises `exc` for the paths `when` selects, and behaves as usual otherwise."""
    real = getattr(os, name)

    def fake(path: Any, *args: Any, **kwargs: Any) -> Any:
        if when(path):
            raise exc
        return real(path, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(os, name, fake)
        yield


# -- the real command ------------------------------------------------------------------------

def test_genuine_bundle_through_the_real_command(synthetic_bag: Path, pub: Path) -> None:  # noqa: F811
    assert assert_clean(run_process([str(synthetic_bag), "--trusted-key", str(pub)]), (0,)) == 0
    assert assert_clean(run_process([str(synthetic_bag)]), (3,)) == 3


@pytest.mark.parametrize("case", ["long-name", "protocol-zero", "key-fifo", "json-fifo", "loop",
                                  "contradictory", "newline-name"])
def test_hostile_arguments_through_the_command_line(case: str, synthetic_bag: Path,  # noqa: F811
                                                    pub: Path, fifo: Path, tmp_path: Path) -> None:
    """The cases that once hung or printed several lines, through the command's main (a FIFO that
    blocks is a timeout here, as it was in a child)."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    argv = {
        "long-name": [str(tmp_path / ("x" * (NAME_MAX + 1)))],
        "protocol-zero": [str(synthetic_bag), "--protocol", "/dev/zero"],
        "key-fifo": [str(synthetic_bag), "--trusted-key", str(fifo)],
        "json-fifo": [str(synthetic_bag), "--json", str(fifo)],
        "loop": [str(loop)],
        "contradictory": [str(synthetic_bag), "--trusted-key", str(pub), "--trusted-fingerprint",
                          "00" * 32],
        "newline-name": [str(tmp_path / "two\nlines")],
    }[case]
    ran = run_verify(argv, timeout=60)
    assert assert_clean((ran.code, ran.out, ran.err)) == 2


def test_non_utf8_report_path_through_the_real_command(synthetic_bag: Path,  # noqa: F811
                                                       tmp_path: Path) -> None:
    report = os.fsencode(tmp_path) + b"/report-\xff.json"
    assert_clean(run_process([str(synthetic_bag), "--json", report]), (3,))
    assert os.path.getsize(report) > 0


# -- hostile paths and files, in-process -----------------------------------------------------

def test_path_component_over_name_max(tmp_path: Path) -> None:
    assert assert_clean(run_main([str(tmp_path / ("x" * (NAME_MAX + 1)))])) == 2
    assert assert_clean(run_main([str(tmp_path / ("x" * (NAME_MAX + 1)) / "bag")])) == 2


def test_archive_member_name_over_name_max(tmp_path: Path) -> None:
    tar = _tar(tmp_path / "long.tar.gz", {"bag/bagit.txt": b"BagIt-Version: 1.0\n",
                                          "bag/data/" + "x" * (NAME_MAX + 1): b"x"})
    code, out, _ = run_main([str(tar)])
    assert assert_clean((code, out, "")) == 1 and "FAIL    archive.safe" in out


def test_folder_nested_past_path_max(bag: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "deep-root").mkdir()
    deep = _deep(tmp_path / "deep-root", PATH_MAX)
    assert len(os.fsencode(deep)) > PATH_MAX
    assert assert_clean(run_main([str(deep)])) == 2  # the bundle's own path is too long

    inside = _deep(bag / "data", PATH_MAX)  # inside the bag: refused by the format's limit
    code, out, err = run_main([str(bag)])
    assert assert_clean((code, out, err)) == 1 and "FAIL    bag.layout" in out
    shutil.rmtree(bag / "data" / inside.relative_to(bag / "data").parts[0])

    # a genuine bag whose absolute path is over PATH_MAX still verifies from a folder near it
    monkeypatch.chdir(tmp_path)  # the working folder is restored at teardown
    for part in deep.relative_to(tmp_path).parts:
        os.chdir(part)
    os.rename(bag, deep.name + "-bag")
    assert assert_clean(run_main([deep.name + "-bag"]), (3,)) == 3


def test_non_utf8_json_path(synthetic_bag: Path, tmp_path: Path) -> None:  # noqa: F811
    report = os.fsdecode(os.fsencode(tmp_path) + b"/r\xff\xfe.json")
    assert assert_clean(run_main([str(synthetic_bag), "--json", report]), (3,)) == 3
    assert os.path.getsize(os.fsencode(report)) > 0


@pytest.mark.parametrize("option", ["--protocol", "--trusted-key", "--reproduction",
                                    "--trusted-reproducer"])
@pytest.mark.parametrize("target", ["/dev/zero", "/dev/null", "fifo", "folder", "empty", "nul"])
def test_command_line_files_that_are_not_files(option: str, target: str, synthetic_bag: Path,  # noqa: F811
                                               fifo: Path, tmp_path: Path) -> None:
    path = {"fifo": str(fifo), "folder": str(tmp_path), "empty": str(tmp_path / "empty"),
            "nul": "a\x00b"}.get(target, target)
    (tmp_path / "empty").write_bytes(b"")
    # an empty file is a protocol or an attestation that fails its check; anything else is unusable
    expected = (1,) if target == "empty" and option in ("--protocol", "--reproduction") else (2,)
    assert_clean(run_main([str(synthetic_bag), option, path]), expected)


@pytest.mark.parametrize("target", ["fifo", "/dev/null", "/dev/zero", "loop", "empty", "not-gzip",
                                    "gzip-not-tar", "missing", "nul"])
def test_bundle_that_is_not_a_bundle(target: str, fifo: Path, tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "not-gzip").write_bytes(b"PK\x03\x04 not a tar.gz" * 40)
    import gzip

    (tmp_path / "gzip-not-tar").write_bytes(gzip.compress(b"\x01" * 5000))
    path = {"fifo": str(fifo), "nul": "a\x00b"}.get(target, str(tmp_path / target))
    if target.startswith("/"):
        path = target
    assert assert_clean(run_main([path])) == 2


@pytest.mark.parametrize("cut", [0.1, 0.5, 0.97])
def test_truncated_and_corrupt_archives(synthetic_bag: Path, tmp_path: Path, cut: float) -> None:  # noqa: F811
    tar = archive(copy_bag(synthetic_bag, tmp_path / "run"), tmp_path / "run.tar.gz")
    data = tar.read_bytes()
    short = tmp_path / "short.tar.gz"
    short.write_bytes(data[: int(len(data) * cut)])
    assert_clean(run_main([str(short)]))
    middle = bytearray(data)
    i = int(len(data) * cut)
    middle[i: i + 64] = bytes(64)
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(bytes(middle))
    assert_clean(run_main([str(broken)]))


@pytest.mark.parametrize("entry", ["fifo", "loop", "folder-as-file"])
def test_hostile_entries_inside_the_bag(entry: str, bag: Path) -> None:
    target = bag / "data" / "metrics.json"
    target.unlink()
    if entry == "fifo":
        os.mkfifo(target)
    elif entry == "loop":
        target.symlink_to(target)
    else:
        target.mkdir()
    code, out, err = run_main([str(bag)])
    assert assert_clean((code, out, err)) == 1 and "FAIL" in out


def test_json_report_destinations(synthetic_bag: Path, fifo: Path, tmp_path: Path,  # noqa: F811
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for dest in (tmp_path / "missing" / "r.json", tmp_path, fifo, "a\x00b.json",
                 tmp_path / ("r" * (NAME_MAX + 1))):
        assert assert_clean(run_main([str(synthetic_bag), "--json", str(dest)])) == 2
    assert assert_clean(run_main([str(synthetic_bag), "--json", "/dev/null"]), (3,)) == 3
    read_only = tmp_path / "ro" / "r.json"
    read_only.parent.mkdir()
    rofs = OSError(errno.EROFS, "Read-only file system", str(read_only))
    with failing(monkeypatch, "open", rofs, lambda p: str(p) == str(read_only)):
        assert assert_clean(run_main([str(synthetic_bag), "--json", str(read_only)])) == 2


@pytest.mark.parametrize("argv,expected", [
    (["BAG", "--trusted-key", "PUB", "--trusted-fingerprint", "00"], 2),
    (["BAG", "--trusted-key", "PUB", "--trusted-key", "PUB", "--threshold", "2"], 2),
    (["BAG", "--threshold", "0"], 2),
    (["BAG", "--threshold", "-3"], 2),
    (["BAG", "--threshold", "many"], 2),
    (["BAG", "BAG"], 2),
    (["BAG", "--json"], 2),
    (["BAG", "--unknown"], 2),
    ([], 2),
    (["BAG", "--json", "OUT/a.json", "--json", "OUT/b.json"], 3),
    (["BAG", "--trusted-fingerprint", "00" * 32, "--trusted-fingerprint", "FP"], 0),
    (["BAG", "--reproduction", "PUB"], 1),
    (["BAG", "--trusted-reproducer", "PUB"], 3),
    (["--", "BAG"], 3),
])
def test_repeated_and_contradictory_options(argv: list[str], expected: int, synthetic_bag: Path,  # noqa: F811
                                            pub: Path, verify_keys: Keys, tmp_path: Path) -> None:  # noqa: F811
    from bundle.keys import fingerprint

    fp = fingerprint(verify_keys.real.public_key())
    subst = {"BAG": str(synthetic_bag), "PUB": str(pub), "FP": fp}
    argv = [subst.get(a, a).replace("OUT", str(tmp_path)) for a in argv]
    assert assert_clean(run_main(argv), (expected,)) == expected
    if expected == 3 and "--json" in argv:
        assert not (tmp_path / "a.json").exists() and (tmp_path / "b.json").exists()


# -- faults of the machine, simulated ----------------------------------------------------------

@pytest.mark.parametrize("what", ["data/metrics.json", "data/predictions", "bagit.txt"])
def test_unreadable_file_or_folder_in_the_bag(what: str, bag: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """As root chmod stops nothing, so the refusal comes from os.open / os.scandir."""
    denied = PermissionError(errno.EACCES, "Permission denied", str(bag / what))
    name = "scandir" if (bag / what).is_dir() else "open"
    with failing(monkeypatch, name, denied, lambda p: str(p) == str(bag / what)):
        code, _, err = run_main([str(bag)])
    assert assert_clean((code, "", err)) == 2 and "Permission denied" in err


@pytest.mark.parametrize("call", ["open", "mkdir"])
def test_full_temporary_folder_while_extracting(call: str, synthetic_bag: Path, tmp_path: Path,  # noqa: F811
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    tar = archive(copy_bag(synthetic_bag, tmp_path / "run"), tmp_path / "run.tar.gz")
    full = OSError(errno.ENOSPC, "No space left on device")
    with failing(monkeypatch, call, full, lambda p: "verify-" in str(p) and "data" in str(p)):
        code, _, err = run_main([str(tar)])
    assert assert_clean((code, "", err)) == 2 and "No space left" in err


def test_full_disk_before_extracting(synthetic_bag: Path, tmp_path: Path,  # noqa: F811
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    tar = archive(copy_bag(synthetic_bag, tmp_path / "run"), tmp_path / "run.tar.gz")
    full = OSError(errno.ENOSPC, "No space left on device")
    with failing(monkeypatch, "mkdir", full, lambda p: "verify-" in str(p)):
        assert assert_clean(run_main([str(tar)])) == 2


def test_memory_error_while_reading_the_tree(bag: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_memory(*_: Any) -> bytes:
        raise MemoryError

    monkeypatch.setattr(bagtree, "_read_file", no_memory)
    code, _, err = run_main([str(bag)])
    assert assert_clean((code, "", err)) == 2 and "memory" in err


# -- generated -------------------------------------------------------------------------------

OPTIONS = ["--trusted-key", "--trusted-fingerprint", "--threshold", "--protocol", "--json",
           "--reproduction", "--trusted-reproducer", "--", "-x", "--bogus"]
JUNK_PATHS = ["/dev/zero", "/dev/null", "FIFO", "LOOP", "EMPTY", "TMP", "MISSING/x", "LONG",
              "NONUTF8", "a\nb", "", "-", "00" * 32, "2", "0", "BAG/data"]
REAL_PATHS = ["BAG", "PUB", "PROTOCOL", "ARCHIVE", "OTHERPUB"]


def test_random_command_lines(synthetic_bag: Path, pub: Path, fifo: Path, tmp_path: Path,  # noqa: F811
                              verify_keys: Keys, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Random argv lists mixing real and junk paths and options; run from tmp_path, so that a
    relative --json lands there, and every real file is restored before each example."""
    real = {"PUB": pub.read_bytes(), "PROTOCOL": (synthetic_bag / "data" / "protocol.json").read_bytes(),
            "OTHERPUB": verify_keys.other.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)}
    files = {name: tmp_path / name.lower() for name in real}
    arch = archive(copy_bag(synthetic_bag, tmp_path / "run"), tmp_path / "run.tar.gz")
    arch_bytes = arch.read_bytes()
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    subst = {"BAG": str(synthetic_bag), "ARCHIVE": str(arch), "FIFO": str(fifo),
             "LOOP": str(tmp_path / "loop"), "EMPTY": str(tmp_path / "empty"), "TMP": str(tmp_path),
             "MISSING/x": str(tmp_path / "missing" / "x"), "LONG": "y" * (NAME_MAX + 1),
             "NONUTF8": os.fsdecode(b"r\xff.json"), "BAG/data": str(synthetic_bag / "data"),
             **{name: str(path) for name, path in files.items()}}
    monkeypatch.chdir(tmp_path)
    token = st.one_of(st.sampled_from(OPTIONS), st.sampled_from(JUNK_PATHS + REAL_PATHS),
                      st.text(st.characters(blacklist_characters="-", blacklist_categories=("Cs",)),
                              max_size=12))

    @settings(max_examples=60, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(token, max_size=8))
    def check(tokens: list[str]) -> None:
        for name, data in real.items():
            files[name].write_bytes(data)
        arch.write_bytes(arch_bytes)
        (tmp_path / "empty").write_bytes(b"")
        argv = [subst.get(t, t) for t in tokens]
        assert_clean(run_main(argv), (0, 1, 2, 3))

    check()


def _corrupt(data: bytes, op: str, at: float, value: int) -> bytes:
    i = min(int(at * len(data)), max(len(data) - 1, 0))
    if op == "flip" and data:
        return data[:i] + bytes([data[i] ^ value]) + data[i + 1:]
    if op == "truncate":
        return data[:i]
    if op == "insert":
        return data[:i] + bytes([value]) * value + data[i:]
    return bytes(len(data))  # zeroed


CORRUPTION = (st.sampled_from(["flip", "truncate", "insert", "zero"]),
              st.floats(0.0, 1.0, allow_nan=False), st.integers(1, 255))


def test_random_corruptions_of_a_genuine_bundle(tiny_bundle: Path, signing_key_dir: Path,
                                                tmp_path: Path) -> None:
    """Byte-level corruptions of one file of the job's real bundle, through the command line
    with its trusted key: a payload file changed in any way is rejected (exit 1); a tag file
    may change only in ways RFC 8493 allows or nothing signs (then it still verifies)."""
    names = sorted(p.relative_to(tiny_bundle).as_posix() for p in tiny_bundle.rglob("*") if p.is_file())
    key = str(signing_key_dir / "signing-key.pub.pem")
    report = tmp_path / "report.json"

    @settings(max_examples=60, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(names), *CORRUPTION)
    def check(name: str, op: str, at: float, value: int) -> None:
        bag = tmp_path / "bag"
        shutil.rmtree(bag, ignore_errors=True)
        copy_bag(tiny_bundle, bag)
        original = (bag / name).read_bytes()
        changed = _corrupt(original, op, at, value)
        (bag / name).write_bytes(changed)
        allowed = (1,) if name.startswith("data/") and changed != original else (0, 1)
        code = assert_clean(run_main([str(bag), "--trusted-key", key, "--json", str(report)]), allowed)
        assert code == 2 or report.stat().st_size > 0

    check()


def test_random_corruptions_of_a_genuine_archive(synthetic_bag: Path, pub: Path,  # noqa: F811
                                                 tmp_path: Path) -> None:
    """Byte-level corruptions of the bundle's .tar.gz: rejected (exit 1) or unreadable (exit 2),
    except in the gzip header's time and OS bytes and the deflate stream's last byte (padding
    bits), which leave the extracted bytes as they were."""
    data = archive(copy_bag(synthetic_bag, tmp_path / "run"), tmp_path / "run.tar.gz").read_bytes()
    target = tmp_path / "corrupt.tar.gz"

    @settings(max_examples=60, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(*CORRUPTION)
    def check(op: str, at: float, value: int) -> None:
        changed = _corrupt(data, op, at, value)
        target.write_bytes(changed)
        i = min(int(at * len(data)), len(data) - 1)
        harmless = op == "flip" and (4 <= i < 10 or i == len(data) - 9)
        assert_clean(run_main([str(target), "--trusted-key", str(pub)]),
                     (0, 1, 2, 3) if harmless or changed == data else (1, 2))

    check()
