"""Reading a small file that a user names on the command line (a key, a protocol, a resource
lock): a regular file of bounded size, or one sentence saying why not.

The file is opened with O_NONBLOCK, so a FIFO never blocks, and checked with fstat before a byte
is read, so a device such as /dev/zero or an oversized file costs nothing. The job's and the
bundle tool's commands read every operator file through here; the verifier, which stays free of
anything but the format, has the same rule in verify/limits.py."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import Final

from bundle.errors import BundleError

KEY_FILE_BYTES: Final = 64 * 1024
"""A PEM key is a few hundred bytes (an encrypted one under 1 KiB)."""
PROTOCOL_BYTES: Final = 1024 * 1024
"""A protocol: the cap a verifier puts on data/protocol.json, so no run writes one it refuses."""
DOCUMENT_BYTES: Final = 4 * 1024 * 1024
"""A resource lock or a pin file: kilobytes in practice."""


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def read_user_file(path: os.PathLike[str] | str, what: str, cap: int,
                   error: Callable[..., Exception] = BundleError) -> bytes:
    """The bytes of the regular file at `path`, at most `cap` of them; raise `error` (one sentence
    naming `what` and the path; keywords `path` and `reason`, one of "empty-path", "missing",
    "unopenable", "folder", "not-regular", "too-large", "unreadable") for a missing or unreadable
    file, a folder, a FIFO, a device or socket, or a file over `cap` bytes. `error` is an error
    class of the shape bundle/errors.py describes (BundleError, KeyFileError, job.errors.JobError)."""
    name = os.fsdecode(path)
    if not name:
        raise error(f"The {what} path is empty; pass the path of the file.", path=name, reason="empty-path")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"The {what} {name} does not exist; pass the right path.", path=name, reason="missing") from None
    except (OSError, ValueError) as exc:
        why = _why(exc) if isinstance(exc, OSError) else "the path holds a NUL byte"
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
        raise error(f"Cannot read the {what} {name} ({_why(exc)}); pass a readable file.", path=name,
                    reason="unreadable") from None
    finally:
        os.close(fd)
    if size > cap:  # grew while it was read
        raise error(f"The {what} {name} is over the {cap:,}-byte limit; pass the right file.", path=name,
                    reason="too-large")
    return b"".join(chunks)
