"""Deterministic .tar.gz of a bundle: the same bag gives the same bytes on the same zlib.

Entries sorted by path under one top-level folder (the bag's name); mtime SOURCE_DATE_EPOCH or 0;
uid/gid 0, empty owner names; mode 0644 for files, 0755 for directories; ustar (no pax headers);
gzip header with mtime 0 and no file name. Links and special files are refused.
"""

from __future__ import annotations

import errno
import gzip
import os
import secrets
import tarfile
from pathlib import Path

from bundle import layout
from bundle.errors import BundleError, OutputExistsError
from job.publishing.dates import archive_mtime
from job.publishing.publish import rename_noreplace
from job.publishing.walk import walk_regular


def _entries(bag: Path) -> list[tuple[str, Path, bool]]:
    """(relative POSIX path, full path, is_dir) of everything under bag, in tree order."""
    return sorted(walk_regular(bag, bag), key=lambda entry: entry[0].split("/"))


def _info(name: str, *, is_dir: bool, size: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.mode = 0o755 if is_dir else 0o644
    info.size = 0 if is_dir else size
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def archive(bag_dir: Path, out_tar_gz: Path | None = None) -> Path:
    """Write bag_dir as a deterministic .tar.gz (default: beside it, NAME.tar.gz); return the path."""
    bag = Path(os.path.abspath(bag_dir))
    if bag.is_symlink() or not bag.is_dir():
        raise BundleError(f"{bag_dir} is not a directory; pass the bundle directory.")
    if not (bag / layout.BAGIT_TXT).is_file():
        raise BundleError(
            f"{bag_dir} has no {layout.BAGIT_TXT}, so it is not a bundle; pass the "
            "directory the job wrote."
        )
    out = Path(os.path.abspath(out_tar_gz)) if out_tar_gz else bag.with_name(bag.name + ".tar.gz")
    if os.path.lexists(out):
        raise OutputExistsError(f"Archive {out} already exists; choose a new --out or remove it.", path=str(out))
    if out == bag or bag in out.parents:
        raise BundleError(f"Archive {out} would be inside the bundle; write it elsewhere.")
    mtime = archive_mtime()
    entries = _entries(bag)
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}-{secrets.token_hex(4)}")
    created = False
    try:
        with open(partial, "xb") as raw:
            created = True
            with (
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz,
                tarfile.open(
                    fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT, encoding="utf-8"
                ) as tar,
            ):
                tar.addfile(_info(bag.name, is_dir=True, size=0, mtime=mtime))
                for rel, full, is_dir in entries:
                    name = f"{bag.name}/{rel}"
                    if is_dir:
                        tar.addfile(_info(name, is_dir=True, size=0, mtime=mtime))
                        continue
                    with open(full, "rb") as fh:
                        size = os.fstat(fh.fileno()).st_size
                        tar.addfile(_info(name, is_dir=False, size=size, mtime=mtime), fh)
            raw.flush()
            os.fsync(raw.fileno())
        rename_noreplace(partial, out)
        created = False
    except (ValueError, tarfile.TarError) as exc:
        raise BundleError(
            f"Cannot archive {bag} ({exc}); shorten or rename the offending path."
        ) from exc
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise OutputExistsError(
                f"Archive {out} already exists; choose a new --out or remove it.", path=str(out)
            ) from exc
        raise BundleError(f"Cannot write {out} ({exc.strerror}); choose a writable --out.") from exc
    finally:
        if created:
            partial.unlink(missing_ok=True)
    return out
