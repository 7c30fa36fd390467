"""Reading a small file that a user names on the command line (a key, a protocol, a resource
lock, a trusted key): a regular file of bounded size, or one sentence saying why not.

The file is opened with O_NONBLOCK, so a FIFO never blocks, and checked with fstat before a byte
is read, so a device such as /dev/zero or an oversized file costs nothing. The job's and the
verifier's commands read every file a user names through here, each raising its own error class;
the caps are bundle.limits'."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

from bundle.errors import BundleError


def describe(exc: BaseException) -> str:
    """A short reason for an error at the input's edges, without a traceback."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.strerror or errno.errorcode.get(exc.errno, str(exc.errno))
    if isinstance(exc, MemoryError):
        return "out of memory"
    if isinstance(exc, UnicodeError):
        return "a name or text that is not valid UTF-8"
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def read_user_file(path: os.PathLike[str] | str, what: str, cap: int,
                   error: Callable[..., Exception] = BundleError) -> bytes:
    """The bytes of the regular file at `path`, at most `cap` of them; raise `error` (one sentence
    naming `what` and the path; keywords `path` and `reason`, one of "empty-path", "missing",
    "unopenable", "folder", "not-regular", "too-large", "unreadable") for a missing or unreadable
    file, a folder, a FIFO, a device or socket, or a file over `cap` bytes. `error` is an error
    class of the shape bundle/errors.py describes (BundleError, KeyFileError, job.errors.JobError,
    verify.result.InputError)."""
    name = os.fsdecode(path)
    if not name:
        raise error(f"The {what} path is empty; pass the path of the file.", path=name, reason="empty-path")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"The {what} {name} does not exist; pass the right path.", path=name, reason="missing") from None
    except (OSError, ValueError) as exc:
        why = describe(exc) if isinstance(exc, OSError) else "the path holds a NUL byte"
        raise error(f"Cannot open the {what} {name} ({why}); pass a readable file.", path=name,
                    reason="unopenable") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"The {what} {name} is a folder, not a file; pass the file itself.", path=name,
                        reason="folder")
        if not stat.S_ISREG(st.st_mode):
            raise error(f"The {what} {name} is not a regular file (a FIFO, device or socket); "
                        "pass the file itself.", path=name, reason="not-regular")
        if st.st_size > cap:
            raise error(f"The {what} {name} is {st.st_size:,} bytes, over the {cap:,}-byte limit; "
                        "pass the right file.", path=name, reason="too-large")
        chunks: list[bytes] = []
        size = 0
        while size <= cap:
            chunk = os.read(fd, cap + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise error(f"Cannot read the {what} {name} ({describe(exc)}); pass a readable file.", path=name,
                    reason="unreadable") from None
    finally:
        os.close(fd)
    if size > cap:  # grew while it was read
        raise error(f"The {what} {name} is over the {cap:,}-byte limit; pass the right file.", path=name,
                    reason="too-large")
    return b"".join(chunks)
