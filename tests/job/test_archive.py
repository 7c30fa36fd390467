"""archive(): byte-identical .tar.gz for the same bag, normalised metadata, no links."""

from __future__ import annotations

import gzip
import os
import tarfile
from pathlib import Path

import pytest

from bundle.errors import BundleError, OutputExistsError
from job.publishing.archive import archive
from tests.payload import seal_payload
from tests.synthetic import write_payload


def _bag(tmp_path: Path, name: str = "run-1") -> Path:
    bag = tmp_path / name
    protocol_sha256 = write_payload(bag / "data", profile="formal")
    seal_payload(bag, description="archive test", protocol_sha256=protocol_sha256, profile="formal")
    return bag


def test_archive_twice_is_byte_identical(tmp_path: Path) -> None:
    bag = _bag(tmp_path)
    first = archive(bag, tmp_path / "a.tar.gz")
    for path in bag.rglob("*"):  # times and modes on disk must not leak into the archive
        os.utime(path, (1_000_000_000, 1_000_000_000))
        path.chmod(0o700 if path.is_dir() else 0o600)
    second = archive(bag, tmp_path / "b.tar.gz")
    assert first.read_bytes() == second.read_bytes()


def test_archive_metadata_is_normalised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1715040000")
    bag = _bag(tmp_path)
    out = archive(bag)
    assert out == tmp_path / "run-1.tar.gz"
    raw = out.read_bytes()
    assert raw[:3] == b"\x1f\x8b\x08" and raw[3] == 0  # no FNAME flag
    assert raw[4:8] == b"\x00\x00\x00\x00"  # gzip mtime 0
    with tarfile.open(out, "r:gz") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names[0] == "run-1" and all(n.startswith("run-1/") for n in names[1:])
    assert names == sorted(names, key=lambda n: n.split("/"))
    for m in members:
        assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", 1715040000)
        assert m.mode == (0o755 if m.isdir() else 0o644)
        assert m.isdir() or m.isfile()
        assert not m.pax_headers
    assert "run-1/data/predictions/audit.parquet" in names
    with gzip.open(out) as fh:
        assert b"ustar" in fh.read(512)


def test_archive_refuses_symlinks_existing_output_and_non_bags(tmp_path: Path) -> None:
    bag = _bag(tmp_path)
    (bag / "data" / "link").symlink_to(bag / "bagit.txt")
    with pytest.raises(BundleError, match="symbolic link"):
        archive(bag, tmp_path / "x.tar.gz")
    assert not (tmp_path / "x.tar.gz").exists()
    (bag / "data" / "link").unlink()
    (tmp_path / "exists.tar.gz").write_bytes(b"")
    with pytest.raises(OutputExistsError, match="already exists"):
        archive(bag, tmp_path / "exists.tar.gz")
    (tmp_path / "plain").mkdir()
    with pytest.raises(BundleError, match="not a bundle"):
        archive(tmp_path / "plain")
    assert not list(tmp_path.glob(".*partial*"))


def test_archive_extracts_to_the_same_files(tmp_path: Path) -> None:
    bag = _bag(tmp_path)
    out = archive(bag)
    target = tmp_path / "extract"
    with tarfile.open(out, "r:gz") as tar:
        tar.extractall(target, filter="data")
    for path in bag.rglob("*"):
        copy = target / "run-1" / path.relative_to(bag)
        assert copy.is_dir() if path.is_dir() else copy.read_bytes() == path.read_bytes()
