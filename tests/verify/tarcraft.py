"""Hand-made tar headers and archive surgery for the archive tests: what an attacker writes with a
hex editor, not with `tarfile` (which would refuse or normalise most of it).

`header(...)` builds one 512-byte block with any field; `splice(genuine, extra)` inserts members
before a genuine .tar.gz's end-of-archive blocks; `ATTACKS` builds every named attack on a
genuine bundle archive, each at a size scaled by a float (1: the sizes that cost the unbounded
reader gigabytes or minutes). The huge ones are streamed into gzip, never held in memory."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from bundle import layout

BLOCK = 512
_ZERO = bytes(BLOCK)


def _num(value: int, width: int) -> bytes:
    return b"%0*o\x00" % (width - 1, value)


def header(name: bytes | str, *, kind: bytes = b"0", size: int = 0, mode: int | None = None,
           uid: int = 0, gid: int = 0, mtime: int = 0, linkname: bytes = b"",
           magic: bytes = b"ustar\x0000", prefix: bytes = b"", uname: bytes = b"",
           gname: bytes = b"", raw: dict[int, bytes] | None = None,
           checksum: bool = True) -> bytes:
    """One ustar header block; `raw` overwrites byte ranges (offset -> bytes) before the checksum
    is computed (unless `checksum` is False, which leaves a wrong one)."""
    name_b = name.encode() if isinstance(name, str) else name
    if mode is None:
        mode = 0o755 if kind == b"5" else 0o644
    block = bytearray(BLOCK)
    block[0:len(name_b[:100])] = name_b[:100]
    block[100:108] = _num(mode, 8)
    block[108:116] = _num(uid, 8)
    block[116:124] = _num(gid, 8)
    block[124:136] = _num(size, 12) if size < 8**11 else b"\x80" + size.to_bytes(11, "big")
    block[136:148] = _num(mtime, 12)
    block[148:156] = b" " * 8
    block[156:157] = kind
    block[157:157 + len(linkname)] = linkname
    block[257:265] = magic
    block[265:265 + len(uname)] = uname
    block[297:297 + len(gname)] = gname
    block[345:345 + len(prefix)] = prefix
    for offset, data in (raw or {}).items():
        block[offset:offset + len(data)] = data
    total = sum(block)
    if not checksum:
        total += 1
    block[148:156] = b"%06o\x00 " % total
    return bytes(block)


def member(name: str, data: bytes, **fields: object) -> bytes:
    """A regular-file member: header, data, zero padding."""
    return header(name, size=len(data), **fields) + data + bytes(-len(data) % BLOCK)  # type: ignore[arg-type]


def pax(records: bytes, kind: bytes = b"x") -> bytes:
    """A pax extended header member holding `records` verbatim."""
    return member("PaxHeader", records, kind=kind) if kind else b""


def pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    n = len(body) + 1
    while len(str(n).encode()) + len(body) != n:
        n += 1
    return str(n).encode() + body


def tar_body(genuine: Path) -> bytes:
    """The genuine archive's tar stream without its end-of-archive blocks and padding."""
    plain = zlib.decompress(genuine.read_bytes(), 16 + zlib.MAX_WBITS)
    end = len(plain)
    while end >= BLOCK and plain[end - BLOCK:end] == _ZERO:
        end -= BLOCK
    return plain[:end]


def gzip_stream(parts: Iterable[bytes], out: Path) -> Path:
    """Write the concatenation of `parts` as one gzip member (level 1), part by part."""
    z = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    with open(out, "wb") as fh:
        fh.writelines(z.compress(part) for part in parts)
        fh.write(z.flush())
    return out


def end_blocks() -> bytes:
    """Two zero blocks and padding to tar's 10,240-byte record, as tar writes them."""
    return bytes(2 * BLOCK) + bytes(10240 - 2 * BLOCK)


def splice(genuine: Path, extra: Iterable[bytes], out: Path, *, end: bytes | None = None) -> Path:
    """The genuine archive with `extra` inserted before its end-of-archive blocks."""
    return gzip_stream([tar_body(genuine), *extra, end_blocks() if end is None else end], out)


def _zeros(total: int, fill: bytes = b"\x00") -> Iterator[bytes]:
    chunk = fill * (1 << 20)
    while total > 0:
        yield chunk[:total]
        total -= len(chunk)


def _huge(name: str, kind: bytes, size: int, fill: bytes, lead: bytes = b"") -> Iterator[bytes]:
    yield header(name, kind=kind, size=size)
    yield lead
    yield from _zeros(size - len(lead), fill)
    yield bytes(-size % BLOCK)


def _root(genuine: Path) -> str:
    return genuine.name.removesuffix(".tar.gz")


def _altered_report(root: str) -> bytes:
    return member(f"{root}/{layout.REPORT_MD}", b"# Audit: all is well\n\nApproved.\n")


def slash_file_carrying_header(genuine: Path, out: Path, scale: float) -> Path:
    """A type-0 member `notes.txt/` whose data is a tar header and an altered report.md: GNU tar
    makes a folder of the name and reads the data as the next member."""
    root = _root(genuine)
    hidden = _altered_report(root)
    return splice(genuine, [member(f"{root}/notes.txt/", hidden)], out)


def slash_report(genuine: Path, out: Path, scale: float) -> Path:
    """report.md stored a second time as `data/report.md/` (GNU tar makes a folder)."""
    root = _root(genuine)
    return splice(genuine, [member(f"{root}/{layout.REPORT_MD}/", b"shadow\n")], out)


def pax_without_newline(genuine: Path, out: Path, scale: float) -> Path:
    """A pax record that lacks its final newline, renaming the next member onto report.md."""
    root = _root(genuine)
    record = pax_record("path", f"{root}/{layout.REPORT_MD}")[:-1] + b"x"
    return splice(genuine, [pax(record), member(f"{root}/data/extra.txt", b"# Approved\n")], out)


def pax_long_length(digits: int) -> Callable[[Path, Path, float], Path]:
    def build(genuine: Path, out: Path, scale: float) -> Path:
        record = b"0" * (digits - 2) + b"99 path=x\n"
        return splice(genuine, [pax(record), member(f"{_root(genuine)}/data/x", b"x")], out)
    build.__doc__ = f"A pax record whose length field has {digits:,} digits."
    return build


def pax_sparse(key: str, value: str) -> Callable[[Path, Path, float], Path]:
    def build(genuine: Path, out: Path, scale: float) -> Path:
        records = pax_record("GNU.sparse.major", "1") + pax_record(key, value)
        return splice(genuine, [pax(records), member(f"{_root(genuine)}/data/x", b"x")], out)
    build.__doc__ = f"A pax header with {key}={value}."
    return build


def huge_pax(genuine: Path, out: Path, scale: float) -> Path:
    """A pax header of 512 MiB (one comment record), streamed."""
    size = max(int((512 << 20) * scale), 1 << 20)
    lead = f"{size} comment=".encode()
    return gzip_stream([tar_body(genuine), *_huge("PaxHeader", b"x", size, b"a", lead),
                        member(f"{_root(genuine)}/data/x", b"x"), end_blocks()], out)


def huge_long_name(genuine: Path, out: Path, scale: float) -> Path:
    """A GNU long-name member of 512 MiB, streamed."""
    size = max(int((512 << 20) * scale), 1 << 20)
    return gzip_stream([tar_body(genuine), *_huge("././@LongLink", b"L", size, b"n"),
                        member(f"{_root(genuine)}/data/x", b"x"), end_blocks()], out)


def huge_sparse_map(genuine: Path, out: Path, scale: float) -> Path:
    """An old-GNU sparse member whose map runs on for 4 million entries in extension blocks."""
    entries = max(int(4_000_000 * scale), 10_000)
    ext = bytearray(BLOCK)
    for i in range(21):
        ext[i * 24:i * 24 + 12] = _num(i * 2, 12)
        ext[i * 24 + 12:i * 24 + 24] = _num(1, 12)
    ext[504] = ord("1")
    blocks = entries // 21
    head = header(f"{_root(genuine)}/data/sparse", kind=b"S", size=0,
                  raw={482: b"1", 483: _num(0, 12)})
    last = bytes(ext[:504]) + b"\x00" + bytes(7)
    return gzip_stream([tar_body(genuine), head, *(bytes(ext) * min(blocks - 1 - i, 2048)
                                                   for i in range(0, blocks - 1, 2048)),
                        last, end_blocks()], out)


ATTACKS: dict[str, Callable[[Path, Path, float], Path]] = {
    "archive-slash-file-header": slash_file_carrying_header,
    "archive-slash-report": slash_report,
    "archive-pax-no-newline": pax_without_newline,
    "archive-pax-100k-digits": pax_long_length(100_000),
    "archive-pax-5000-digits": pax_long_length(5_000),
    "archive-sparse-size-abc": pax_sparse("GNU.sparse.size", "abc"),
    "archive-sparse-map-1x": pax_sparse("GNU.sparse.map", "1,x"),
    "archive-huge-pax": huge_pax,
    "archive-huge-long-name": huge_long_name,
    "archive-huge-sparse-map": huge_sparse_map,
}
"""Each named attack: (genuine .tar.gz, output path, scale) -> the hostile .tar.gz."""
