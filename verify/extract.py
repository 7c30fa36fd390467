"""Safe extraction of a bundle archive (.tar.gz): regular files and folders only, no absolute
paths, no `..`, no links or devices, no duplicate names, bounded sizes, and nothing after the
end-of-archive marker but zero padding, so that what is verified is exactly what `tar -xzif`
(which reads past the marker) would extract. Only names and bytes are taken from the archive:
modes, owners and times never are (files are written 0600 by this process)."""

from __future__ import annotations

import errno
import os
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any, Final

from verify import limits
from verify.result import Failed, InputError

MAX_MEMBERS: Final = limits.MAX_ENTRIES
MAX_FILE_BYTES: Final = limits.MAX_FILE_BYTES
MAX_TOTAL_BYTES: Final = limits.MAX_TOTAL_BYTES
_READ_ERRORS: Final = (tarfile.TarError, OSError, EOFError, zlib.error)

_ALLOWED_TYPES: Final = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE)


def is_archive(path: Path) -> bool:
    """True when `path` is a file (a bundle archive) rather than a bag folder."""
    return path.is_file()


def _safe_name(name: str) -> PurePosixPath:
    if not name or "\x00" in name or "\\" in name:
        raise Failed(f"archive member name {name!r} is empty or holds a NUL or a backslash; "
                     "the archive was not written by the job.")
    path = PurePosixPath(name)
    if path.is_absolute() or name.startswith("/"):
        raise Failed(f"archive member {name!r} has an absolute path; refusing to extract it.")
    parts = [p for p in path.parts if p != "."]
    if not parts or any(p == ".." for p in parts):
        raise Failed(f"archive member {name!r} escapes the extraction folder with '..'; "
                     "refusing to extract it.")
    if len(parts[0]) >= 2 and parts[0][1] == ":":
        raise Failed(f"archive member {name!r} starts with a drive letter; refusing to extract it.")
    encoded = [os.fsencode(p) for p in parts]
    if any(len(p) > limits.MAX_NAME_BYTES for p in encoded) or (
            sum(len(p) + 1 for p in encoded) > limits.MAX_PATH_BYTES):
        raise Failed(f"archive member {name[:60]!r}… has a name over {limits.MAX_NAME_BYTES} bytes "
                     f"or a path over {limits.MAX_PATH_BYTES}; the archive was not written by the "
                     "job.")
    return PurePosixPath(*parts)


def _check_end(tar: tarfile.TarFile, archive: Path) -> None:
    """Require only zero bytes (at most MAX_TRAILING_ZERO_BYTES) after the end-of-archive
    marker: `tar -i` reads members placed after it, which this reader would not see."""
    fileobj: Any = tar.fileobj
    if fileobj is None:
        return
    try:
        fileobj.seek(tar.offset)
        seen = 0
        while True:
            chunk = fileobj.read(64 * 1024)
            if not chunk:
                return
            if chunk.count(0) != len(chunk):
                raise Failed(f"{archive.name} holds non-zero data after its end-of-archive marker "
                             "(a second archive appended?); tar -i would extract members this "
                             "verifier did not check, refusing it.")
            seen += len(chunk)
            if seen > limits.MAX_TRAILING_ZERO_BYTES:
                raise Failed(f"{archive.name} holds over {limits.MAX_TRAILING_ZERO_BYTES} bytes of "
                             "padding after its end-of-archive marker; refusing it.")
    except _READ_ERRORS as exc:
        raise Failed(f"{archive.name} is corrupt after its end-of-archive marker ({exc}); "
                     "refusing it.") from exc


def _write(target: Path, data: bytes, name: str) -> None:
    """Write a member's bytes as a new file with this process's default mode (0600 at most)."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                     0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise InputError(f"the temporary folder is full or read-only while extracting "
                             f"{name!r} ({exc.strerror}); free space or set TMPDIR to a folder "
                             "with room.") from exc
        raise Failed(f"archive member {name!r} cannot be written ({exc.strerror}); the archive "
                     "was not written by the job.") from exc


def extract_archive(archive: Path, dest: Path) -> str:
    """Extract `archive` into the empty folder `dest`; return a one-line summary.

    Raises Failed when the archive holds something unsafe (a tamper finding, exit 1) and
    InputError when it cannot be read as a gzip-compressed tar at all (exit 2).
    """
    seen: set[PurePosixPath] = set()
    total = 0
    count = 0
    try:
        tar = tarfile.open(archive, mode="r:gz")  # noqa: SIM115 - closed by the with below
    except _READ_ERRORS as exc:
        raise InputError(f"{archive} is neither a bag folder nor a readable .tar.gz archive "
                         f"({exc}); pass the bag folder or the archive the job wrote.") from exc
    try:
        with tar:
            while True:
                try:
                    member = tar.next()
                except _READ_ERRORS as exc:
                    raise InputError(f"{archive} is truncated or corrupt after {count} members "
                                     f"({exc}); fetch the archive again.") from exc
                if member is None:
                    _check_end(tar, archive)
                    break
                count += 1
                if count > MAX_MEMBERS:
                    raise Failed(f"archive holds more than {MAX_MEMBERS} members; a bundle holds "
                                 "about 25, refusing to extract it.")
                rel = _safe_name(member.name)
                if member.type not in _ALLOWED_TYPES:
                    kind = ("a symbolic link" if member.issym() else "a hard link" if member.islnk()
                            else "a device or special file")
                    raise Failed(f"archive member {member.name!r} is {kind}; a bundle holds only "
                                 "regular files and folders.")
                if rel in seen:
                    raise Failed(f"archive member {member.name!r} appears twice; a later copy "
                                 "would silently replace the first, refusing to extract it.")
                seen.add(rel)
                target = dest.joinpath(*rel.parts)
                if member.isdir():
                    try:
                        target.mkdir(mode=0o700, parents=True, exist_ok=True)
                    except OSError as exc:
                        raise Failed(f"archive folder {member.name!r} clashes with a file of the "
                                     f"same name ({exc.strerror}).") from exc
                    continue
                if member.size > MAX_FILE_BYTES:
                    raise Failed(f"archive member {member.name!r} is {member.size} bytes, over the "
                                 f"{MAX_FILE_BYTES}-byte limit for one file.")
                total += member.size
                if total > MAX_TOTAL_BYTES:
                    raise Failed(f"archive expands to more than {MAX_TOTAL_BYTES} bytes; "
                                 "refusing to extract it.")
                try:
                    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                except OSError as exc:
                    raise Failed(f"archive member {member.name!r} goes through a path that is "
                                 f"not a folder ({exc.strerror}).") from exc
                if not os.path.realpath(target).startswith(os.path.realpath(dest) + os.sep):
                    raise Failed(f"archive member {member.name!r} would be written outside the "
                                 "extraction folder; refusing to extract it.")
                if target.exists():
                    raise Failed(f"archive member {member.name!r} clashes with a folder of the "
                                 "same name.")
                src = tar.extractfile(member)
                if src is None:
                    raise Failed(f"archive member {member.name!r} cannot be read as a file.")
                try:
                    data = src.read()
                except _READ_ERRORS as exc:
                    raise InputError(f"{archive} is truncated or corrupt inside "
                                     f"{member.name!r} ({exc}); fetch the archive again.") from exc
                if len(data) != member.size:
                    raise InputError(f"{archive} is truncated inside {member.name!r}; "
                                     "fetch the archive again.")
                _write(target, data, member.name)
    except MemoryError as exc:
        raise InputError(f"{archive} does not fit in memory while extracting; pass the archive "
                         "the job wrote.") from exc
    except (tarfile.TarError, zlib.error, EOFError) as exc:
        raise InputError(f"{archive} could not be read ({exc}); fetch the archive again.") from exc
    return f"{count} members extracted, {total} bytes, no links, no absolute or '..' paths"


def find_bag_root(dest: Path) -> Path:
    """The bag inside an extracted archive: `dest` itself or its single top-level folder."""
    if (dest / "bagit.txt").is_file():
        return dest
    entries = list(dest.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    names = sorted(e.name for e in entries)
    raise Failed(f"archive holds {names[:5]} at its top level, not one bag folder with "
                 "bagit.txt; pass the archive the job wrote.")
