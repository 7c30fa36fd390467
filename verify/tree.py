"""A bag read into memory once: every regular file with its bytes, and the entries a bag may not
hold (links, devices, FIFOs, sockets, oversized files), recorded rather than followed or opened.

Sizes are bounded before anything is read (verify/limits.py): the folder is walked with lstat
only, data/protocol.json (at most MAX_PROTOCOL_BYTES) gives each file its cap, and a file over
its cap, or past the total, is recorded as oversized and never read. A FIFO is never opened, so
a reader cannot block on one."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bundle import layout, limits
from bundle.canonical import loads_strict
from bundle.errors import CanonicalJSONError, ProtocolOutOfBounds
from verify.result import Failed, InputError

MAX_FILE_BYTES: Final = limits.MAX_FILE_BYTES
MAX_ENTRIES: Final = limits.MAX_ENTRIES


@dataclass
class BagTree:
    """Every entry under the bag root: regular files with their bytes, and what is not allowed."""

    root: Path
    files: dict[str, bytes] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    special: list[str] = field(default_factory=list)
    oversized: list[str] = field(default_factory=list)
    """Regular files over their cap, each as "path (size bytes, over the cap of N)"; not read."""
    _sha256: dict[str, str] = field(default_factory=dict)
    _protocol: tuple[bytes, Any, CanonicalJSONError | None] | None = field(default=None, repr=False)

    def protocol(self) -> Any:
        """data/protocol.json parsed as strict JSON, once for every reader of this bag: the file
        caps while the bag is read, the payload the format expects, and json.protocol. Raises
        CanonicalJSONError when it is not strict JSON, KeyError when the bag holds no protocol."""
        return self.parse_protocol(self.files[layout.PROTOCOL_JSON])

    def parse_protocol(self, raw: bytes) -> Any:
        """`raw` (the protocol's bytes) parsed by bundle.canonical.loads_strict; the parse is kept,
        so the same bytes are parsed once whoever asks."""
        if self._protocol is None or self._protocol[0] is not raw:
            try:
                self._protocol = (raw, loads_strict(raw, source=layout.PROTOCOL_JSON), None)
            except CanonicalJSONError as exc:
                self._protocol = (raw, None, exc)
        _, doc, error = self._protocol
        if error is not None:
            raise error
        return doc

    def sha256(self, rel: str) -> str:
        if rel not in self._sha256:
            self._sha256[rel] = hashlib.sha256(self.files[rel]).hexdigest()
        return self._sha256[rel]

    def payload(self) -> list[str]:
        return sorted(p for p in self.files if p.startswith("data/"))


def read_tree(root: Path) -> BagTree:
    """Read every regular file under `root` within its size cap, without following links.

    InputError (exit 2) when the folder or a file in it cannot be read (permissions, names the
    filesystem refuses, memory); Failed when the folder holds more than MAX_ENTRIES entries or
    a name longer than the format allows."""
    try:
        st = os.lstat(root)
    except (OSError, ValueError) as exc:
        raise InputError(f"{root} cannot be read ({_why(exc)}); pass a bag folder or "
                         "a bundle .tar.gz.") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{root} is not a folder; pass a bag folder or a bundle .tar.gz.")
    tree = BagTree(root=root)
    try:
        regular = _walk(root, tree)
        _read(root, tree, regular)
    except OSError as exc:
        raise InputError(f"{exc.filename or root} cannot be read ({_why(exc)}); make every file "
                         "of the bag readable, or pass its .tar.gz.") from exc
    except MemoryError as exc:
        raise InputError(f"{root} does not fit in memory; a bundle is a few megabytes, pass the "
                         "bag folder the job wrote.") from exc
    return tree


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.strerror or errno.errorcode.get(exc.errno, str(exc.errno))
    return str(exc)[:200]


def _walk(root: Path, tree: BagTree) -> dict[str, int]:
    """lstat every entry (never open one); return the regular files with their sizes."""
    regular: dict[str, int] = {}
    stack = [""]
    count = 0
    while stack:
        rel_dir = stack.pop()
        with os.scandir(root / rel_dir if rel_dir else root) as it:
            for entry in it:
                count += 1
                if count > MAX_ENTRIES:
                    raise Failed(f"the bag holds more than {MAX_ENTRIES} entries; a bundle holds "
                                 "about 25.")
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                _check_name(rel)
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    tree.links.append(rel)
                elif stat.S_ISDIR(st.st_mode):
                    tree.dirs.append(rel)
                    stack.append(rel)
                elif stat.S_ISREG(st.st_mode):
                    regular[rel] = st.st_size
                else:
                    tree.special.append(rel)
    return regular


def _check_name(rel: str) -> None:
    encoded = os.fsencode(rel)
    if len(encoded) > limits.MAX_PATH_BYTES or any(
            len(part) > limits.MAX_NAME_BYTES for part in encoded.split(b"/")):
        raise Failed(f"the bag holds a path of {len(encoded)} bytes ({rel[:60]!r}…), over the "
                     f"format's {limits.MAX_NAME_BYTES} bytes a name and {limits.MAX_PATH_BYTES} "
                     "a path.")


def _file_caps(tree: BagTree, protocol: bytes | None) -> dict[str, int]:
    """Each file's cap for a bag whose data/protocol.json holds `protocol`: from the protocol's
    dimensions when it parses and lies within the format's bounds, else the fixed caps (a protocol
    that does not parse fails json.protocol later). Never raises."""
    if protocol is None:
        return limits.file_caps(None)
    try:
        return limits.file_caps(limits.dimensions(tree.parse_protocol(protocol)))
    except (ProtocolOutOfBounds, CanonicalJSONError, ValueError, TypeError, RecursionError, MemoryError):
        return limits.file_caps(None)


def _read(root: Path, tree: BagTree, regular: dict[str, int]) -> None:
    """Read the files within their caps: the protocol first, because it sets the others'."""
    protocol = None
    if regular.get(layout.PROTOCOL_JSON, limits.MAX_PROTOCOL_BYTES + 1) <= limits.MAX_PROTOCOL_BYTES:
        protocol = _read_file(root, layout.PROTOCOL_JSON, limits.MAX_PROTOCOL_BYTES)
    caps = _file_caps(tree, protocol)
    total = 0
    for rel in sorted(regular):
        size, cap = regular[rel], limits.cap(caps, rel)
        if size > cap or total + size > limits.MAX_TOTAL_BYTES:
            limit = cap if size > cap else limits.MAX_TOTAL_BYTES - total
            tree.oversized.append(f"{rel} ({size:,} bytes, over the cap of {limit:,})")
            continue
        data = protocol if rel == layout.PROTOCOL_JSON else _read_file(root, rel, cap)
        if data is None:
            tree.special.append(rel)
            continue
        if len(data) > cap:
            tree.oversized.append(f"{rel} (grew past the cap of {cap:,} bytes while read)")
            continue
        total += len(data)
        tree.files[rel] = data


def _read_file(root: Path, rel: str, cap: int) -> bytes | None:
    """At most cap + 1 bytes of the regular file `rel`; None when it is no longer a regular file
    (replaced since the walk). O_NONBLOCK keeps a FIFO swapped in from blocking the open."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(root / rel, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        left = cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
