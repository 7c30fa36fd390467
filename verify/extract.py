"""Extraction of a bundle archive (.tar.gz) into an empty folder, exactly as GNU tar would extract
it, or a refusal: the headers are read by the strict reader in verify/ustar.py (the dialect
`job archive` writes), and the names are checked here so that no two members can land on the
same path or on each other's folders, on a case-sensitive file system or not. Sizes and counts are
checked at each header, before its data is read; data is copied in bounded chunks. Only names and
bytes are taken from the archive: modes, owners and times never are (files are written 0600 by
this process)."""

from __future__ import annotations

import errno
import os
import stat
import unicodedata
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Final

from bundle import limits
from bundle.userfile import describe
from verify import ustar
from verify.context import Context
from verify.result import Failed, InputError, UnsafeArchive

MAX_MEMBERS: Final = limits.MAX_ENTRIES
MAX_FILE_BYTES: Final = limits.MAX_FILE_BYTES
MAX_TOTAL_BYTES: Final = limits.MAX_TOTAL_BYTES
MAX_ARCHIVE_BYTES: Final = limits.MAX_ARCHIVE_BYTES


def is_archive(path: Path) -> bool:
    """True when `path` is a file (a bundle archive) rather than a bag folder."""
    return path.is_file()


def _safe_name(name: str) -> PurePosixPath:
    """The member's relative path; Failed for an absolute path, '..', '.', an empty component, a
    NUL, a backslash, a drive letter or a name over the format's limits."""
    if not name or "\x00" in name or "\\" in name:
        raise UnsafeArchive(f"archive member name {name!r} is empty or holds a NUL or a backslash; "
                            "the archive was not written by the job.", member=name,
                            reason="empty name, NUL or backslash")
    if name.startswith("/"):
        raise UnsafeArchive(f"archive member {name!r} has an absolute path; refusing to extract it.",
                            member=name, reason="absolute path")
    parts = name.split("/")
    if any(p == ".." for p in parts):
        raise UnsafeArchive(f"archive member {name!r} escapes the extraction folder with '..'; "
                            "refusing to extract it.", member=name, reason="path escapes with ..")
    if any(p in ("", ".") for p in parts):
        raise UnsafeArchive(f"archive member {name!r} has an empty or '.' path component, which "
                            f"`job archive` never writes{ustar.FOREIGN}.", member=name,
                            reason="empty or . path component")
    if len(parts[0]) >= 2 and parts[0][1] == ":":
        raise UnsafeArchive(f"archive member {name!r} starts with a drive letter; refusing to extract "
                            "it.", member=name, reason="drive letter")
    encoded = [os.fsencode(p) for p in parts]
    if any(len(p) > limits.MAX_NAME_BYTES for p in encoded) or (
            sum(len(p) + 1 for p in encoded) > limits.MAX_PATH_BYTES):
        raise Failed(f"archive member {name[:60]!r}… has a name over {limits.MAX_NAME_BYTES} bytes "
                     f"or a path over {limits.MAX_PATH_BYTES}; the archive was not written by the "
                     "job.")
    return PurePosixPath(*parts)


def _fold(path: str) -> str:
    """The key under which two names land on the same file on a case-insensitive or
    normalising file system (macOS, Windows)."""
    return unicodedata.normalize("NFC", path).casefold()


class _Names:
    """Every path the archive has created so far (members and the folders tar makes for them),
    by folded name: a member may neither repeat a path, nor differ from one only in case or
    Unicode form, nor put a file where a folder is or under a file."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, bool, bool]] = {}  # folded -> (exact, is_dir, member)

    def add(self, rel: PurePosixPath, is_dir: bool) -> None:
        """Record the member at `rel` and the folders above it; Failed on any clash."""
        member = rel.as_posix()
        for i in range(1, len(rel.parts)):
            self._claim("/".join(rel.parts[:i]), True, member, explicit=False)
        self._claim(member, is_dir, member, explicit=True)

    def _claim(self, path: str, is_dir: bool, member: str, explicit: bool) -> None:
        key = _fold(path)
        seen = self._seen.get(key)
        if seen is None:
            self._seen[key] = (path, is_dir, explicit)
            return
        exact, was_dir, was_member = seen
        if exact != path:
            raise UnsafeArchive(f"archive member {member!r} differs from {exact!r} only in case or "
                                "Unicode form; on a case-insensitive file system one would "
                                "replace the other, refusing to extract it.", member=member,
                                reason="differs from another member only in case or Unicode form")
        if explicit and was_member:
            raise UnsafeArchive(f"archive member {member!r} appears twice; a later copy would silently "
                                "replace the first, refusing to extract it.", member=member,
                                reason="appears twice")
        if not was_dir:
            raise UnsafeArchive(f"archive member {member!r} goes through the file {exact!r}, which is "
                                "not a folder; refusing to extract it.", member=member,
                                reason="goes through a file")
        if not is_dir:
            raise UnsafeArchive(f"archive member {member!r} is a file where the archive already has a "
                                "folder; refusing to extract it.", member=member,
                                reason="file where a folder is")
        if explicit:
            self._seen[key] = (path, True, True)


def _check_room(exc: OSError, name: str) -> None:
    """InputError (exit 2) when `exc` says the temporary folder is full or read-only: the
    machine's problem, not the archive's."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        raise InputError(f"the temporary folder is full or read-only while extracting "
                         f"{name!r} ({exc.strerror}); free space or set TMPDIR to a folder "
                         "with room.") from exc


def _open_archive(archive: Path) -> BinaryIO:
    """The archive opened for reading, after checking it is a regular file within the cap."""
    try:
        fd = os.open(archive, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InputError(f"{archive} cannot be read ({describe(exc)}); pass the bag "
                         "folder or the archive the job wrote.") from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputError(f"{archive} is neither a bag folder nor a regular file; pass the bag "
                         "folder or the archive the job wrote.")
    if st.st_size > MAX_ARCHIVE_BYTES:
        os.close(fd)
        raise Failed(f"{archive.name} is {st.st_size:,} bytes, over the {MAX_ARCHIVE_BYTES:,}-byte "
                     "limit for a bundle archive; refusing it.")
    return os.fdopen(fd, "rb")


def _copy(blocks: ustar.GzipBlocks, target: Path, size: int, name: str) -> None:
    """Write the member's `size` bytes to a new file (0600, never through a link), chunk by chunk,
    then consume its zero padding to the next block."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                     0o600)
    except OSError as exc:
        _check_room(exc, name)
        raise Failed(f"archive member {name!r} cannot be written ({exc.strerror}); the archive "
                     "was not written by the job.") from exc
    with os.fdopen(fd, "wb") as out:
        left = size
        while left:
            chunk = blocks.read(min(left, ustar.CHUNK))
            try:
                out.write(chunk)
            except OSError as exc:
                _check_room(exc, name)
                raise Failed(f"archive member {name!r} cannot be written ({exc.strerror}); the "
                             "archive was not written by the job.") from exc
            left -= len(chunk)
    pad = -size % ustar.BLOCK
    if pad and blocks.read(pad).count(0) != pad:
        raise Failed(f"archive member {name!r} is followed by non-zero padding{ustar.FOREIGN}.")


def _member(blocks: ustar.GzipBlocks, header: ustar.Header, dest: Path, names: _Names,
            total: int) -> int:
    """Extract one accepted header's member under `dest`; the new running total of bytes."""
    rel = _safe_name(header.name)
    names.add(rel, header.is_dir)
    target = dest.joinpath(*rel.parts)
    if header.is_dir:
        try:
            target.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            _check_room(exc, header.name)
            raise Failed(f"archive folder {header.name!r} cannot be created ({exc.strerror}).") \
                from exc
        return total
    if header.size > MAX_FILE_BYTES:
        raise UnsafeArchive(f"archive member {header.name!r} is {header.size} bytes, over the "
                            f"{MAX_FILE_BYTES}-byte limit for one file.", member=header.name,
                            reason="over the size limit for one file")
    total += header.size
    if total > MAX_TOTAL_BYTES:
        raise Failed(f"archive expands to more than {MAX_TOTAL_BYTES} bytes; refusing to extract "
                     "it.")
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        _check_room(exc, header.name)
        raise Failed(f"archive member {header.name!r} goes through a path that is not a folder "
                     f"({exc.strerror}).") from exc
    _copy(blocks, target, header.size, header.name)
    return total


def extract_archive(archive: Path, dest: Path) -> str:
    """Extract `archive` into the empty folder `dest`; return a one-line summary.

    Raises Failed when the archive holds something unsafe or outside the dialect `job archive`
    writes (a finding, exit 1), and InputError when it cannot be read as gzip at all or is
    truncated or corrupt (exit 2)."""
    names = _Names()
    total = count = 0
    with _open_archive(archive) as fh:
        blocks = ustar.GzipBlocks(fh)
        try:
            while True:
                block = blocks.read(ustar.BLOCK)
                if ustar.is_zero_block(block):
                    if not ustar.is_zero_block(blocks.read(ustar.BLOCK)):
                        raise ustar.Refused("the archive has a lone zero block followed by more "
                                            "headers, which `tar -i` would extract; refusing it.")
                    padding = blocks.rest_is_zero(limits.MAX_TRAILING_ZERO_BYTES)
                    if padding % ustar.BLOCK:
                        raise ustar.Refused("the archive does not end on a 512-byte block; "
                                            "refusing it.")
                    break
                count += 1
                if count > MAX_MEMBERS:
                    raise Failed(f"archive holds more than {MAX_MEMBERS} members; a bundle holds "
                                 "about 25, refusing to extract it.")
                total = _member(blocks, ustar.parse_header(block), dest, names, total)
        except ustar.Refused as exc:
            raise Failed(str(exc)) from None
        except ustar.Unreadable as exc:
            raise InputError(f"{archive}: {exc}") from None
        except OSError as exc:
            raise InputError(f"{archive} cannot be read ({describe(exc)}); fetch the "
                             "archive again.") from exc
        except MemoryError as exc:
            raise InputError(f"{archive} does not fit in memory while extracting; pass the "
                             "archive the job wrote.") from exc
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


def safe(ctx: Context) -> str:
    """The archive was extracted and its bag read safely before the checks ran (verify.api)."""
    if ctx.reading.failure is not None:
        raise ctx.reading.failure
    return ctx.reading.detail
