"""A strict reader of the one tar dialect `job archive` writes, and nothing else.

`job archive` writes a single gzip member holding POSIX ustar headers (magic "ustar\\0",
version "00") for regular files (type '0') and folders (type '5', name ending in one '/'), mode
0644 or 0755, uid and gid 0, empty owner names, no link name, octal numbers, then two zero
blocks and zero padding. This module reads exactly that subset, block by block, and refuses
everything else at the header that shows it, before reading or allocating for what the header
announces: pax and GNU extensions (types x, g, L, K, S and every other type), links, devices,
FIFOs, sparse members, base-256 or non-octal numbers, bad checksums, other magic. Every header it
accepts means the same member to GNU tar (FORMAT.md, "Archives"), which is why the rules are
narrow: anything tar would read differently from a plain reading of these fields is refused.

The gzip layer is inflated with zlib in bounded steps (at most CHUNK bytes out per call), so a
header that announces gigabytes costs nothing until its size has been checked against the caps.
Nothing here imports `tarfile`: no attacker byte reaches its pax or GNU parsers.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import BinaryIO, Final

BLOCK: Final = 512
CHUNK: Final = 1024 * 1024
"""Most bytes inflated at once, and the largest read the extractor asks for."""
_READ: Final = 64 * 1024
_ZERO_BLOCK: Final = bytes(BLOCK)
MAGIC: Final = b"ustar\x0000"
FILE_MODE: Final = 0o644
DIR_MODE: Final = 0o755

_KINDS: Final = {
    b"1": "a hard link", b"2": "a symbolic link", b"3": "a character device",
    b"4": "a block device", b"6": "a FIFO", b"7": "a contiguous file (type 7)",
    b"x": "a pax extended header", b"g": "a pax global header",
    b"L": "a GNU long-name header", b"K": "a GNU long-link header", b"S": "a GNU sparse file",
    b"\x00": "an old-style regular file (type NUL)",
}

FOREIGN: Final = ("; an archive from another tool must be extracted with tar and the folder "
                  "verified instead")
"""Appended to every refusal of a header `job archive` would never write."""


class Refused(ValueError):
    """The archive is not in the dialect `job archive` writes; the message is one sentence."""


class Unreadable(ValueError):
    """The archive is not gzip at all, or is truncated or corrupt; the message is one sentence."""


@dataclass(frozen=True)
class Header:
    """One accepted member header: its name as tar extracts it, and its data size."""

    name: str
    """Relative POSIX path with no trailing '/', as tar joins prefix and name."""
    is_dir: bool
    size: int


def _octal(field: bytes, what: str, name: str) -> int:
    """An octal number as GNU tar reads it, restricted to digits then NUL/space padding."""
    digits = field.rstrip(b"\x00 ")
    if not digits or any(c < 0x30 or c > 0x37 for c in digits):
        raise Refused(f"archive member {name!r} has a {what} field {field!r} that is not plain "
                      f"octal (base-256 or text){FOREIGN}.")
    return int(digits, 8)


def _text(field: bytes, what: str, name: str) -> bytes:
    """A NUL-terminated field: the bytes before the first NUL, which must be followed only by
    NULs (tar stops at the first NUL; anything after it would be a second meaning)."""
    head, _, tail = field.partition(b"\x00")
    if tail.strip(b"\x00"):
        raise Refused(f"archive member {name!r} has bytes after the NUL that ends its {what}"
                      f"{FOREIGN}.")
    return head


def parse_header(block: bytes) -> Header:
    """The member a 512-byte non-zero header block describes: Unreadable when its checksum is
    wrong (not tar, or corrupt), Refused for anything outside the dialect (the checksum, magic and
    type are checked before any other field is trusted)."""
    raw_name = block[:100].split(b"\x00", 1)[0]
    shown = raw_name.decode("utf-8", "replace")[:80]
    stored = block[148:156]
    digits = stored.rstrip(b"\x00 ")
    total = sum(block[:148]) + 8 * 0x20 + sum(block[156:])
    if not digits or any(c < 0x30 or c > 0x37 for c in digits) or int(digits, 8) != total:
        raise Unreadable(f"the archive's header at member {shown!r} has a bad checksum, so it "
                         "is not a tar archive or is corrupt; fetch the archive again.")
    if block[257:265] != MAGIC:
        raise Refused(f"archive member {shown!r} is not a POSIX ustar header (magic "
                      f"{block[257:265]!r}){FOREIGN}.")
    kind = block[156:157]
    if kind not in (b"0", b"5"):
        what = _KINDS.get(kind, f"of tar type {kind!r}")
        raise Refused(f"archive member {shown!r} is {what}; a bundle archive holds only regular "
                      f"files and folders{FOREIGN}.")
    is_dir = kind == b"5"
    name_b = _text(block[:100], "name", shown)
    prefix = _text(block[345:500], "name prefix", shown)
    if not name_b:
        raise Refused(f"archive member after {shown!r} has an empty name{FOREIGN}.")
    full = prefix + b"/" + name_b if prefix else name_b
    try:
        name = full.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(f"archive member {shown!r} has a name that is not UTF-8{FOREIGN}.") from None
    if is_dir != name.endswith("/"):
        raise Refused(f"archive member {name[:80]!r} is a {'folder' if is_dir else 'regular file'} "
                      f"whose name {'lacks' if is_dir else 'ends in'} a '/', which tar would "
                      f"extract as {'a file' if is_dir else 'a folder'}{FOREIGN}.")
    name = name[:-1] if is_dir else name
    mode = _octal(block[100:108], "mode", name)
    want = DIR_MODE if is_dir else FILE_MODE
    if mode != want:
        raise Refused(f"archive member {name[:80]!r} has mode {mode:o}, not {want:o}{FOREIGN}.")
    owner = (_octal(block[108:116], "uid", name), _octal(block[116:124], "gid", name),
             _text(block[265:297], "owner name", name), _text(block[297:329], "group name", name))
    if owner != (0, 0, b"", b""):
        raise Refused(f"archive member {name[:80]!r} has an owner other than uid 0, gid 0 with "
                      f"empty names{FOREIGN}.")
    if block[157:257].strip(b"\x00") or block[329:345].strip(b"\x00") or block[500:].strip(b"\x00"):
        raise Refused(f"archive member {name[:80]!r} carries a link name, device numbers or "
                      f"trailing header bytes{FOREIGN}.")
    size = _octal(block[124:136], "size", name)
    _octal(block[136:148], "mtime", name)
    if is_dir and size:
        raise Refused(f"archive folder {name[:80]!r} announces {size} bytes of data{FOREIGN}.")
    return Header(name, is_dir, size)


class GzipBlocks:
    """The inflated bytes of one gzip member read from `fh`, in order, in bounded steps.

    `read(n)` returns exactly n bytes (n <= CHUNK) or raises Unreadable; `rest_is_zero(cap)` reads
    to the end and says whether it held at most `cap` zero bytes and nothing else; a second gzip
    member or any byte after the first one's trailer is Refused (GNU tar would read it)."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh = fh
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._buf = bytearray()
        self.offset = 0
        """Inflated bytes handed out so far."""

    def _more(self) -> bool:
        """Inflate up to CHUNK more bytes into the buffer; False at the end of the member."""
        z = self._z
        while True:
            if z.eof:
                if z.unused_data or self._fh.read(1):
                    raise Refused("the archive holds data after the end of its gzip stream (a "
                                  f"second gzip member or trailing bytes){FOREIGN}.")
                return False
            data = z.unconsumed_tail or self._fh.read(_READ)
            if not data:
                raise Unreadable("the archive ends inside its gzip stream (truncated); fetch "
                                 "the archive again.")
            try:
                out = z.decompress(data, CHUNK)
            except zlib.error as exc:
                raise Unreadable(f"the archive's gzip stream is corrupt ({exc}); fetch the archive "
                                 "again.") from None
            if out:
                self._buf += out
                return True

    def read(self, n: int) -> bytes:
        """Exactly the next n inflated bytes; Unreadable when the stream ends first."""
        while len(self._buf) < n:
            if not self._more():
                raise Unreadable(f"the archive ends after {self.offset + len(self._buf)} bytes, "
                                 "inside a member or before its end-of-archive blocks "
                                 "(truncated); fetch the archive again.")
        out = bytes(self._buf[:n])
        del self._buf[:n]
        self.offset += n
        return out

    def rest_is_zero(self, cap: int) -> int:
        """Read to the end of the stream; the number of bytes left, all of them zero. Refused when
        a non-zero byte or more than `cap` bytes follow."""
        seen = 0
        while True:
            if self._buf.count(0) != len(self._buf):
                raise Refused("the archive holds non-zero data after its end-of-archive blocks "
                              "(a second archive appended?), which `tar -i` would extract; "
                              "refusing it.")
            seen += len(self._buf)
            self._buf.clear()
            if seen > cap:
                raise Refused(f"the archive holds over {cap:,} bytes of padding after its "
                              "end-of-archive blocks; refusing it.")
            if not self._more():
                return seen


def is_zero_block(block: bytes) -> bool:
    return block == _ZERO_BLOCK
