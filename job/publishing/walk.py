"""Walking a bundle's files: regular files and directories only, never links or devices."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from bundle.errors import BundleError


def walk_regular(top: Path, base: Path) -> Iterator[tuple[str, Path, bool]]:
    """(POSIX path relative to base, full path, is_dir) of everything under top; refuse links
    and special files with a BundleError naming the path (details: `path`, relative to base, and
    `reason`, "symlink" or "not-regular")."""
    for root, dirs, files in os.walk(top):
        for name in sorted(dirs + files):
            full = Path(root, name)
            rel = full.relative_to(base).as_posix()
            mode = full.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise BundleError(f"{rel} in {base} is a symbolic link; a bundle holds regular "
                                  "files only, so replace it with the file.", path=rel, reason="symlink")
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise BundleError(f"{rel} in {base} is not a regular file or directory; remove it.",
                                  path=rel, reason="not-regular")
            yield rel, full, stat.S_ISDIR(mode)
