"""BagIt 1.0 checks (RFC 8493 as profiled by bundle/FORMAT.md): declaration, layout, manifests,
tag manifests and bag-info.txt. The bag is read once into memory; nothing follows a link.

Read as the RFC allows: any whitespace between digest and path, either hex case, any line order,
LF, CR or CRLF line ends, extra manifests and tag manifests for any algorithm (checked when
hashlib has it), extra tag files and bag-info.txt labels. What the format does not sign (extra
tag files, labels, External-Description) becomes a note of the report, never a verdict."""

from __future__ import annotations

import hashlib
import re
from pathlib import PurePosixPath
from typing import Final

from bundle import layout
from bundle.errors import CanonicalJSONError
from verify.context import Context
from verify.result import DigestMismatch, Failed
from verify.tree import BagTree

_REQUIRED_TAGS: Final = frozenset({layout.BAGIT_TXT, layout.BAG_INFO, layout.MANIFEST_SHA256,
                                   layout.MANIFEST_SHA512, layout.TAGMANIFEST_SHA256})
_UNSIGNED_LABELS: Final = frozenset({layout.INFO_DESCRIPTION})
"""Format labels that only describe the bag: shown as notes, never checked or trusted."""


def manifests(tree: BagTree, tag: bool) -> dict[str, str]:
    """name -> algorithm of every (tag)manifest-<alg>.txt at the bag root."""
    found = {}
    for name in tree.files:
        match = layout.MANIFEST_FILE_RE.fullmatch(name)
        if match is not None and bool(match.group(1)) == tag:
            found[name] = match.group(2)
    return dict(sorted(found.items()))


def hashlib_name(algorithm: str) -> str | None:
    """hashlib's name for a BagIt algorithm (sha256, SHA-512, sha3_256), or None when this
    Python cannot compute it."""
    name = algorithm.lower().replace("-", "")
    name = {"sha3224": "sha3_224", "sha3256": "sha3_256", "sha3384": "sha3_384",
            "sha3512": "sha3_512"}.get(name, name)
    return name if name in hashlib.algorithms_available else None


def digest(tree: BagTree, path: str, algorithm: str) -> str:
    """Hex digest of the file at `path` (sha256 cached by the tree)."""
    if algorithm == "sha256":
        return tree.sha256(path)
    return hashlib.new(algorithm, tree.files[path]).hexdigest()


def check_declaration(tree: BagTree) -> str:
    data = tree.files.get(layout.BAGIT_TXT)
    if data is None:
        raise Failed("bagit.txt is missing; this folder is not a BagIt bag.")
    if data != layout.BAGIT_TXT_CONTENT.encode():
        raise Failed(f"bagit.txt is {data[:120]!r}, expected "
                     f"{layout.BAGIT_TXT_CONTENT.encode()!r}.")
    return "BagIt-Version 1.0, UTF-8 tag files"


def check_layout(tree: BagTree, notes: list[str]) -> str:
    problems = []
    if tree.links:
        problems.append(f"symbolic links {sorted(tree.links)[:5]}")
    if tree.special:
        problems.append(f"special files {sorted(tree.special)[:5]}")
    if tree.oversized:
        problems.append(f"files over their size cap {sorted(tree.oversized)[:5]}")
    top_files = {p for p in tree.files if "/" not in p}
    top_dirs = {d for d in tree.dirs if "/" not in d}
    manifest_names = set(manifests(tree, tag=False)) | set(manifests(tree, tag=True))
    extra = sorted(p for p in tree.files if not p.startswith(layout.DATA_DIR + "/")
                   and p not in layout.TAG_FILES and p not in manifest_names)
    notes.extend(f"extra tag file {p} (not signed; ignored)" for p in extra[:20])
    if len(extra) > 20:
        notes.append(f"and {len(extra) - 20} more extra tag files (not signed; ignored)")
    missing = sorted(_REQUIRED_TAGS - top_files)
    if missing:
        problems.append(f"missing tag files {missing}")
    if layout.DATA_DIR not in top_dirs:
        problems.append("no data/ folder")
    signed = {layout.PROVENANCE, layout.SIGNER_PUB} & top_files
    if len(signed) == 1:
        problems.append(f"{signed.pop()} without its partner (a signed bag has both "
                        f"{layout.PROVENANCE} and {layout.SIGNER_PUB})")
    if problems:
        raise Failed("the bag layout is wrong: " + "; ".join(problems) + ".")
    return (f"{len(top_files)} tag files and data/, no links, no special files"
            + (f", {len(extra)} extra tag files (noted)" if extra else ""))


def expected_payload(tree: BagTree) -> tuple[str, ...]:
    """The payload the format requires for the protocol in the bag (optional sections add files)."""
    if layout.PROTOCOL_JSON not in tree.files:
        return layout.PAYLOAD_FILES
    try:
        protocol = tree.protocol()
    except CanonicalJSONError as exc:
        raise Failed(f"the expected payload depends on the protocol, which cannot be read: "
                     f"{exc}") from exc
    if not isinstance(protocol, dict):
        raise Failed("data/protocol.json is not a JSON object.")
    return layout.expected_payload(protocol)


def check_payload_set(tree: BagTree) -> str:
    found = set(tree.payload())
    expected = set(expected_payload(tree))
    missing = sorted(expected - found)
    extra = sorted(found - expected)
    empty_dirs = sorted(d for d in tree.dirs if d.startswith("data/")
                        and not any(p.startswith(d + "/") for p in found))
    if missing or extra or empty_dirs:
        parts = []
        if missing:
            parts.append(f"missing {missing}")
        if extra:
            parts.append(f"not in the format for this protocol {extra}")
        if empty_dirs:
            parts.append(f"empty folders {empty_dirs}")
        raise Failed("data/ does not hold exactly the payload of bundle/FORMAT.md: "
                     + "; ".join(parts) + ".")
    return (f"exactly the {len(expected)} payload files format version {layout.FORMAT_VERSION} "
            "requires for this protocol")


def safe_bag_path(path: str, where: str) -> str:
    """Refuse absolute paths, `..`, `.`, empty parts, backslashes and NULs in a listed path."""
    if (not path or path.startswith("/") or "\\" in path
            or any(part in ("", ".", "..") for part in path.split("/"))):
        raise Failed(f"{where} lists the path {path!r}, which is absolute, empty or escapes the "
                     "bag (., .., //, backslash); the manifest has been tampered with.")
    if re.search(r"[\x00-\x1f\x7f%]", path):
        raise Failed(f"{where} lists the path {path!r}, which holds a control character or '%'; "
                     "the format never writes such names.")
    if PurePosixPath(path).as_posix() != path:
        raise Failed(f"{where} lists the path {path!r}, which is not in normal form.")
    return path


def tag_lines(text: str) -> list[str]:
    """The lines of a tag file, ended by LF, CR or CRLF as RFC 8493 allows (no other breaks);
    a missing final line end is accepted."""
    lines = layout.TAG_FILE_EOL.split(text)
    return lines[:-1] if lines and lines[-1] == "" else lines


def parse_manifest(data: bytes, name: str, algorithm: str) -> dict[str, str]:
    """Parse a (tag) manifest as RFC 8493 writes it: `<hex> <path>` per line, one or more spaces
    or tabs between, either hex case, any order, LF, CR or CRLF line ends. Require the
    algorithm's digest length, safe paths, each path once; digests come back lowercase."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Failed(f"{name} is not UTF-8 (byte {exc.start}).") from exc
    hname = hashlib_name(algorithm)
    hex_len = hashlib.new(hname).digest_size * 2 if hname is not None else None
    entries: dict[str, str] = {}
    for number, line in enumerate(tag_lines(text), start=1):
        match = layout.MANIFEST_LINE_RE.fullmatch(line)
        if match is None or (hex_len is not None and len(match.group(1)) != hex_len):
            raise Failed(f"{name} line {number} is {line[:100]!r}, expected '<{hex_len or 'the'} "
                         "hex digits>', spaces or a tab, '<path>'.")
        path = safe_bag_path(match.group(3), f"{name} line {number}")
        if path in entries:
            raise Failed(f"{name} lists {path!r} twice (line {number}).")
        entries[path] = match.group(1).lower()
    return entries


def _compare(tree: BagTree, entries: dict[str, str], expected_paths: set[str], name: str,
             algorithm: str) -> None:
    listed = set(entries)
    missing = sorted(expected_paths - listed)
    absent = sorted(p for p in listed if p not in tree.files)
    if absent:
        raise Failed(f"{name} lists {absent[:5]}, which are not files in the bag.")
    if missing:
        raise Failed(f"{name} does not list {missing[:5]}, which are in the bag.")
    for path in sorted(listed):
        actual = digest(tree, path, algorithm)
        if actual != entries[path]:
            raise DigestMismatch(f"{algorithm} mismatch for {path!r}: {name} says "
                                 f"{entries[path][:16]}…, the file hashes to {actual[:16]}…; the "
                                 "file or the manifest was changed.", path=path, algorithm=algorithm,
                                 expected=entries[path], found=actual)


def check_manifest(tree: BagTree, name: str, algorithm: str) -> str:
    """A payload manifest lists exactly the payload files, each with its right digest."""
    if name not in tree.files:
        raise Failed(f"{name} is missing.")
    hname = hashlib_name(algorithm)
    if hname is None:
        raise Failed(f"{name} uses {algorithm!r}, which this Python cannot compute.")
    entries = parse_manifest(tree.files[name], name, algorithm)
    bad = [p for p in entries if not p.startswith(layout.DATA_DIR + "/")]
    if bad:
        raise Failed(f"{name} lists {bad[:5]} outside data/; a payload manifest lists only data/.")
    extra = sorted(set(entries) - set(tree.payload()))
    if extra:
        raise Failed(f"{name} lists {extra[:5]}, which are not files in the bag.")
    _compare(tree, entries, set(tree.payload()), name, hname)
    return f"{len(entries)} payload files listed, every {algorithm} matches"


def payload_manifest(tree: BagTree) -> dict[str, str]:
    return parse_manifest(tree.files[layout.MANIFEST_SHA256], layout.MANIFEST_SHA256, "sha256")


def check_tagmanifests(tree: BagTree, notes: list[str]) -> str:
    """Every tagmanifest-<alg>.txt: what it lists exists outside data/ with the right digest;
    tagmanifest-sha256.txt lists every tag file of the format the bag holds."""
    found = manifests(tree, tag=True)
    if layout.TAGMANIFEST_SHA256 not in found:
        raise Failed(f"{layout.TAGMANIFEST_SHA256} is missing.")
    ours = {p for p in tree.files if p in layout.TAG_FILES and p != layout.TAGMANIFEST_SHA256}
    checked = []
    for name, algorithm in found.items():
        hname = hashlib_name(algorithm)
        if hname is None:
            notes.append(f"{name} uses {algorithm!r}, which this Python cannot compute; not checked")
            continue
        entries = parse_manifest(tree.files[name], name, algorithm)
        inside = [p for p in entries if p.startswith(layout.DATA_DIR + "/")]
        if inside:
            raise Failed(f"{name} lists payload files {inside[:5]}; a tag manifest lists tag files.")
        required = ours if name == layout.TAGMANIFEST_SHA256 else set()
        _compare(tree, entries, required, name, hname)
        checked.append(f"{name} ({len(entries)} files)")
    return "every digest matches: " + ", ".join(checked)


def parse_bag_info(data: bytes) -> list[tuple[str, str]]:
    """(label, value) of every bag-info.txt entry in order: `Label: value` lines, continuation
    lines (leading space or tab) joined to the value with one space; labels may repeat."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Failed(f"bag-info.txt is not UTF-8 (byte {exc.start}).") from exc
    entries: list[tuple[str, str]] = []
    for number, line in enumerate(tag_lines(text), start=1):
        if line[:1] in (" ", "\t") and entries:
            label, value = entries[-1]
            entries[-1] = (label, f"{value} {line.strip()}".strip())
            continue
        label, sep, value = line.partition(":")
        if not sep or not label or label != label.strip():
            raise Failed(f"bag-info.txt line {number} is {line[:80]!r}, expected 'Label: value'.")
        entries.append((label, value.strip()))
    return entries


def check_bag_info(tree: BagTree, notes: list[str]) -> tuple[str, dict[str, str]]:
    if layout.BAG_INFO not in tree.files:
        raise Failed("bag-info.txt is missing.")
    entries = parse_bag_info(tree.files[layout.BAG_INFO])
    info: dict[str, str] = {}
    for label, value in entries:
        if label in layout.BAG_INFO_LABELS and label not in _UNSIGNED_LABELS:
            if label in info:
                raise Failed(f"bag-info.txt gives {label} twice.")
            info[label] = value
        else:
            notes.append(f"bag-info.txt {label}: {value[:200]!r} (not signed; shown as written)")
    required = [layout.INFO_BAGGING_DATE, layout.INFO_PAYLOAD_OXUM, layout.INFO_PROTOCOL_SHA256,
                layout.INFO_PROFILE]
    if layout.PROVENANCE in tree.files:
        required.append(layout.INFO_SIGNER_FINGERPRINT)
    missing = [label for label in required if label not in info]
    if missing:
        raise Failed(f"bag-info.txt lacks {missing}.")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", info[layout.INFO_BAGGING_DATE]):
        raise Failed(f"bag-info.txt Bagging-Date is {info[layout.INFO_BAGGING_DATE]!r}, "
                     "expected YYYY-MM-DD.")
    payload = tree.payload()
    oxum = f"{sum(len(tree.files[p]) for p in payload)}.{len(payload)}"
    if info[layout.INFO_PAYLOAD_OXUM] != oxum:
        raise Failed(f"bag-info.txt Payload-Oxum is {info[layout.INFO_PAYLOAD_OXUM]!r}, the "
                     f"payload is {oxum} (octets.files).")
    for label in (layout.INFO_PROTOCOL_SHA256, layout.INFO_SIGNER_FINGERPRINT):
        if label in info and not re.fullmatch(r"[0-9a-f]{64}", info[label]):
            raise Failed(f"bag-info.txt {label} is {info[label][:80]!r}, expected 64 lowercase "
                         "hex digits.")
    if info[layout.INFO_PROFILE] not in layout.PROFILES:
        raise Failed(f"bag-info.txt Profile is {info[layout.INFO_PROFILE]!r}, expected one of "
                     f"{list(layout.PROFILES)}.")
    return f"Payload-Oxum {oxum}, Bagging-Date {info[layout.INFO_BAGGING_DATE]}", info


# -- the checks (verify/checks.py lists them in order) ---------------------------------------

def declaration(ctx: Context) -> str:
    """bagit.txt is exactly the BagIt 1.0 declaration."""
    return check_declaration(ctx.bag())


def entries(ctx: Context) -> str:
    """A readable bag: the format's tag files and data/ at the root, no links or special files."""
    if ctx.tree is None:  # the folder could not be read as a bag at all (verify.api)
        raise ctx.reading.failure or Failed("the bag could not be read.")
    return check_layout(ctx.tree, ctx.notes)


def payload_set(ctx: Context) -> str:
    """data/ holds exactly the payload FORMAT.md requires for the protocol in the bag."""
    return check_payload_set(ctx.bag())


def manifest_sha256(ctx: Context) -> str:
    """manifest-sha256.txt lists every payload file once with its right digest."""
    tree = ctx.bag()
    detail = check_manifest(tree, layout.MANIFEST_SHA256, "sha256")
    ctx.manifest = payload_manifest(tree)
    return detail


def manifest_sha512(ctx: Context) -> str:
    """manifest-sha512.txt lists every payload file once with its right digest."""
    return check_manifest(ctx.bag(), layout.MANIFEST_SHA512, "sha512")


def manifest_other(ctx: Context) -> str:
    """Every other manifest-<alg>.txt the bag holds matches, for algorithms hashlib has."""
    tree = ctx.bag()
    others = {n: a for n, a in manifests(tree, tag=False).items()
              if n not in (layout.MANIFEST_SHA256, layout.MANIFEST_SHA512)}
    checked = []
    for name, algorithm in others.items():
        if hashlib_name(algorithm) is None:
            ctx.notes.append(f"{name} uses {algorithm!r}, which this Python cannot compute; "
                             "not checked")
            continue
        check_manifest(tree, name, algorithm)
        checked.append(name)
    return ("no other payload manifests" if not others
            else f"{len(checked)} other payload manifests match: {', '.join(checked) or 'none'}")


def tagmanifest(ctx: Context) -> str:
    """Every tagmanifest-<alg>.txt lists tag files with their right digests."""
    return check_tagmanifests(ctx.bag(), ctx.notes)


def info(ctx: Context) -> str:
    """bag-info.txt format labels, Payload-Oxum, date and hex formats; other labels noted."""
    detail, ctx.info = check_bag_info(ctx.bag(), ctx.notes)
    return detail
