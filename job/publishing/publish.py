"""Atomic output: a bundle is assembled in a sibling `.NAME.partial-PID-RANDOM` directory and
renamed to NAME only once complete, so NAME is either absent or a complete bag.

A process killed with SIGKILL may leave a `.NAME.partial-*` directory behind (clearly named as
partial); `cleanup_stale_partials` removes those whose process is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import secrets
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from bundle.errors import BundleError, OutputExistsError

_PARTIAL = re.compile(r"^\.(?P<name>.+)\.partial-(?P<pid>[0-9]+)-[0-9a-f]+$")
_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


def _exists_error(out: Path) -> OutputExistsError:
    return OutputExistsError(
        f"Output directory {out} already exists; choose a new --out or remove it.", path=str(out)
    )


def refuse_existing(out: Path) -> None:
    """OutputExistsError when anything, a link included, is at `out`: the one check that a bundle is
    never written over something, made here before staging and by a command before its work starts."""
    if os.path.lexists(out):
        raise _exists_error(out)


def staging_dir(out: Path) -> Path:
    """Create and return the empty staging directory `.<out.name>.partial-<pid>-<random>` beside out."""
    out = Path(os.path.abspath(out))
    if not out.name or out.name in {".", ".."}:
        raise BundleError(f"Output path {out} has no directory name; pass --out NEW_DIR.")
    refuse_existing(out)
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BundleError(
            f"Cannot create the parent directory {parent} of the output "
            f"({exc.strerror}); choose an --out in a writable place."
        ) from exc
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BundleError(
            f"Directory {parent} is not writable; choose an --out in a writable directory."
        )
    staging = parent / f".{out.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        staging.mkdir(mode=0o755)
    except OSError as exc:
        raise BundleError(
            f"Cannot create {staging} ({exc.strerror}); choose an --out in a writable directory."
        ) from exc
    return staging


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot fsync directories
        pass
    finally:
        os.close(fd)


def rename_noreplace(src: Path, dst: Path) -> None:
    """rename(2) that fails with EEXIST if dst exists (renameat2 RENAME_NOREPLACE when available)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        renameat2 = None
    if renameat2 is not None:
        result = renameat2(
            _AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE
        )
        if result == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), str(dst))
    if os.path.lexists(dst):  # fallback: small race window, but never replaces a finished bag
        raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
    os.rename(src, dst)


def write_atomic(path: Path, data: bytes, *, replace: bool) -> None:
    """Write `data` at `path` all at once or not at all: into a hidden sibling
    (`.NAME.partial-PID-HEX`), flushed to disk, then renamed into place, over an existing file when
    `replace`, else with rename_noreplace (FileExistsError when `path` exists). The sibling is
    removed on any failure; the folder must exist."""
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with open(partial, "xb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(partial, path)
        else:
            rename_noreplace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def publish(staging: Path, out: Path) -> Path:
    """fsync everything under staging, then rename it to `out`; never replace an existing path."""
    out = Path(os.path.abspath(out))
    _fsync_tree(staging)
    try:
        rename_noreplace(Path(staging), out)
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise _exists_error(out) from exc
        raise BundleError(
            f"Cannot move {staging} to {out} ({exc.strerror}); keep both on the "
            "same file system and retry."
        ) from exc
    _fsync_dir(out.parent)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale_partials(parent: Path, name: str | None = None) -> list[Path]:
    """Remove `.NAME.partial-PID-*` directories in parent whose process no longer runs."""
    removed: list[Path] = []
    try:
        entries = sorted(Path(parent).iterdir())
    except FileNotFoundError:
        return removed
    for entry in entries:
        match = _PARTIAL.match(entry.name)
        if not match or (name is not None and match["name"] != name):
            continue
        if entry.is_symlink() or not entry.is_dir() or _alive(int(match["pid"])):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


_HANDLED = (signal.SIGTERM, signal.SIGHUP)
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def _raise_exit(signum: int, _frame: FrameType | None) -> None:
    for other in _HANDLED:  # a second signal must not interrupt the cleanup
        signal.signal(other, signal.SIG_IGN)
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def assembling(out: Path) -> Iterator[Path]:
    """Yield a fresh staging directory; publish it to `out` on success, remove it on any failure.

    Inside the context SIGTERM and SIGHUP raise SystemExit (in the main thread), so a terminated
    run cleans up like an interrupted one and leaves nothing at `out`.
    """
    previous: dict[signal.Signals, _Handler] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in _HANDLED:
            previous[signum] = signal.signal(signum, _raise_exit)
    try:
        staging = staging_dir(out)
        try:
            yield staging
            publish(staging, out)
        except BaseException:
            for ignored in previous:
                signal.signal(ignored, signal.SIG_IGN)
            shutil.rmtree(staging, ignore_errors=True)
            raise
    finally:
        for restored, handler in previous.items():
            signal.signal(restored, handler)
