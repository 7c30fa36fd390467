"""A bag read into memory once: every regular file with its bytes, and the entries a bag may not
hold (links, devices, oversized files), recorded rather than followed."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from verify.result import Failed, InputError

MAX_FILE_BYTES: Final = 256 * 1024 * 1024
MAX_ENTRIES: Final = 10_000


@dataclass
class BagTree:
    """Every entry under the bag root: regular files with their bytes, and what is not allowed."""

    root: Path
    files: dict[str, bytes] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    special: list[str] = field(default_factory=list)
    oversized: list[str] = field(default_factory=list)
    _sha256: dict[str, str] = field(default_factory=dict)

    def sha256(self, rel: str) -> str:
        if rel not in self._sha256:
            self._sha256[rel] = hashlib.sha256(self.files[rel]).hexdigest()
        return self._sha256[rel]

    def payload(self) -> list[str]:
        return sorted(p for p in self.files if p.startswith("data/"))


def read_tree(root: Path) -> BagTree:
    """Read every regular file under `root` without following links; record links and devices."""
    try:
        st = os.lstat(root)
    except OSError as exc:
        raise InputError(f"{root} cannot be read ({exc.strerror}); pass a bag folder or "
                         "a bundle .tar.gz.") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{root} is not a folder; pass a bag folder or a bundle .tar.gz.")
    tree = BagTree(root=root)
    try:
        _walk(root, tree)
    except OSError as exc:
        raise InputError(f"{exc.filename or root} cannot be read ({exc.strerror}); make every file "
                         "of the bag readable, or pass its .tar.gz.") from exc
    return tree


def _walk(root: Path, tree: BagTree) -> None:
    stack = [""]
    count = 0
    while stack:
        rel_dir = stack.pop()
        with os.scandir(root / rel_dir if rel_dir else root) as it:
            for entry in it:
                count += 1
                if count > MAX_ENTRIES:
                    raise Failed(f"the bag holds more than {MAX_ENTRIES} entries; a bundle holds "
                                 "about 20.")
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                mode = entry.stat(follow_symlinks=False).st_mode
                if stat.S_ISLNK(mode):
                    tree.links.append(rel)
                elif stat.S_ISDIR(mode):
                    tree.dirs.append(rel)
                    stack.append(rel)
                elif stat.S_ISREG(mode):
                    if entry.stat(follow_symlinks=False).st_size > MAX_FILE_BYTES:
                        tree.oversized.append(rel)
                        continue
                    with open(entry.path, "rb") as fh:
                        tree.files[rel] = fh.read()
                else:
                    tree.special.append(rel)
