"""BagIt 1.0 checks (RFC 8493 as profiled by bundle/FORMAT.md): declaration, layout, manifests,
tag manifest and bag-info.txt. The bag is read once into memory; nothing follows a link."""

from __future__ import annotations

import hashlib
import re
from pathlib import PurePosixPath
from typing import Final

from bundle import layout
from bundle.canonical import loads_strict
from bundle.errors import CanonicalJSONError
from verify.context import Context
from verify.result import Failed
from verify.tree import MAX_FILE_BYTES, BagTree

_HEX_LEN: Final = {"sha256": 64, "sha512": 128}
_REQUIRED_TAGS: Final = frozenset({layout.BAGIT_TXT, layout.BAG_INFO, layout.MANIFEST_SHA256,
                                   layout.MANIFEST_SHA512, layout.TAGMANIFEST_SHA256})


def check_declaration(tree: BagTree) -> str:
    data = tree.files.get(layout.BAGIT_TXT)
    if data is None:
        raise Failed("bagit.txt is missing; this folder is not a BagIt bag.")
    if data != layout.BAGIT_TXT_CONTENT.encode():
        raise Failed(f"bagit.txt is {data[:120]!r}, expected "
                     f"{layout.BAGIT_TXT_CONTENT.encode()!r}.")
    return "BagIt-Version 1.0, UTF-8 tag files"


def check_layout(tree: BagTree) -> str:
    problems = []
    if tree.links:
        problems.append(f"symbolic links {sorted(tree.links)[:5]}")
    if tree.special:
        problems.append(f"special files {sorted(tree.special)[:5]}")
    if tree.oversized:
        problems.append(f"files over {MAX_FILE_BYTES} bytes {sorted(tree.oversized)[:5]}")
    top_files = {p for p in tree.files if "/" not in p}
    top_dirs = {d for d in tree.dirs if "/" not in d}
    extra = sorted((top_files - set(layout.TAG_FILES)) | (top_dirs - {layout.DATA_DIR}))
    if extra:
        problems.append(f"unexpected entries at the bag root {extra[:5]}")
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
    return (f"{len(top_files)} tag files and data/, no links, no special files")


def expected_payload(tree: BagTree) -> tuple[str, ...]:
    """The payload the format requires for the protocol in the bag (optional sections add files)."""
    raw = tree.files.get(layout.PROTOCOL_JSON)
    if raw is None:
        return layout.PAYLOAD_FILES
    try:
        protocol = loads_strict(raw, source=layout.PROTOCOL_JSON)
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


def parse_manifest(data: bytes, name: str, algorithm: str) -> dict[str, str]:
    """Parse `<hex>  <path>` lines (exactly as the format writes them: two spaces); require
    lowercase hex, safe unique paths, sorted by path."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Failed(f"{name} is not UTF-8 (byte {exc.start}).") from exc
    if text and not text.endswith("\n"):
        raise Failed(f"{name} does not end with a newline; it has been truncated or edited.")
    entries: dict[str, str] = {}
    order: list[str] = []
    hex_len = _HEX_LEN[algorithm]
    line_re = re.compile(rf"([0-9a-f]{{{hex_len}}})  ([^ \t].*)")
    for number, line in enumerate(text.split("\n")[:-1], start=1):
        match = line_re.fullmatch(line)
        if match is None:
            raise Failed(f"{name} line {number} is {line[:100]!r}, expected '<{hex_len} lowercase "
                         f"hex digits>', two spaces, '<path>'.")
        digest, path = match.group(1), safe_bag_path(match.group(2), f"{name} line {number}")
        if path in entries:
            raise Failed(f"{name} lists {path!r} twice (line {number}).")
        entries[path] = digest
        order.append(path)
    if order != sorted(order):
        raise Failed(f"{name} is not sorted by path.")
    return entries


def _compare(tree: BagTree, entries: dict[str, str], expected_paths: set[str], name: str,
             algorithm: str) -> None:
    listed = set(entries)
    missing = sorted(expected_paths - listed)
    extra = sorted(listed - expected_paths)
    if extra:
        absent = [p for p in extra if p not in tree.files]
        raise Failed(f"{name} lists {extra[:5]}, which "
                     + ("are not files in the bag" if absent else "it must not list") + ".")
    if missing:
        raise Failed(f"{name} does not list {missing[:5]}, which are in the bag.")
    for path in sorted(listed):
        actual = (tree.sha256(path) if algorithm == "sha256"
                  else hashlib.new(algorithm, tree.files[path]).hexdigest())
        if actual != entries[path]:
            raise Failed(f"{algorithm} mismatch for {path!r}: {name} says {entries[path][:16]}…, "
                         f"the file hashes to {actual[:16]}…; the file or the manifest was changed.")


def check_manifest(tree: BagTree, algorithm: str) -> str:
    name = f"manifest-{algorithm}.txt"
    if name not in tree.files:
        raise Failed(f"{name} is missing.")
    entries = parse_manifest(tree.files[name], name, algorithm)
    if any(not p.startswith("data/") for p in entries):
        bad = [p for p in entries if not p.startswith("data/")]
        raise Failed(f"{name} lists {bad[:5]} outside data/; a payload manifest lists only data/.")
    _compare(tree, entries, set(tree.payload()), name, algorithm)
    return f"{len(entries)} payload files listed, every {algorithm} matches"


def payload_manifest(tree: BagTree) -> dict[str, str]:
    return parse_manifest(tree.files[layout.MANIFEST_SHA256], layout.MANIFEST_SHA256, "sha256")


def check_tagmanifest(tree: BagTree) -> str:
    name = layout.TAGMANIFEST_SHA256
    if name not in tree.files:
        raise Failed(f"{name} is missing.")
    entries = parse_manifest(tree.files[name], name, "sha256")
    tags = {p for p in tree.files if "/" not in p and p in layout.TAG_FILES and p != name}
    _compare(tree, entries, tags, name, "sha256")
    return f"{len(entries)} tag files listed, every sha256 matches"


def parse_bag_info(data: bytes) -> dict[str, str]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Failed(f"bag-info.txt is not UTF-8 (byte {exc.start}).") from exc
    info: dict[str, str] = {}
    last: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if line[:1] in (" ", "\t") and last is not None:
            info[last] += " " + line.strip()
            continue
        label, sep, value = line.partition(":")
        if not sep or not label or label != label.strip():
            raise Failed(f"bag-info.txt line {number} is {line[:80]!r}, expected 'Label: value'.")
        if label in info:
            raise Failed(f"bag-info.txt gives {label} twice.")
        info[label] = value.strip()
        last = label
    return info


def check_bag_info(tree: BagTree) -> tuple[str, dict[str, str]]:
    if layout.BAG_INFO not in tree.files:
        raise Failed("bag-info.txt is missing.")
    info = parse_bag_info(tree.files[layout.BAG_INFO])
    required = [layout.INFO_BAGGING_DATE, layout.INFO_PAYLOAD_OXUM, layout.INFO_DESCRIPTION,
                layout.INFO_PROTOCOL_SHA256, layout.INFO_PROFILE]
    if layout.PROVENANCE in tree.files:
        required.append(layout.INFO_SIGNER_FINGERPRINT)
    missing = [label for label in required if label not in info]
    if missing:
        raise Failed(f"bag-info.txt lacks {missing}.")
    extra = sorted(set(info) - set(layout.BAG_INFO_LABELS))
    if extra:
        raise Failed(f"bag-info.txt has labels {extra} that the format does not define.")
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
    """Only the format's tag files and data/ at the root; no links or special files."""
    return check_layout(ctx.bag())


def payload_set(ctx: Context) -> str:
    """data/ holds exactly the payload FORMAT.md requires for the protocol in the bag."""
    return check_payload_set(ctx.bag())


def manifest_sha256(ctx: Context) -> str:
    """manifest-sha256.txt lists every payload file once with its right digest."""
    tree = ctx.bag()
    detail = check_manifest(tree, "sha256")
    ctx.manifest = payload_manifest(tree)
    return detail


def manifest_sha512(ctx: Context) -> str:
    """manifest-sha512.txt lists every payload file once with its right digest."""
    return check_manifest(ctx.bag(), "sha512")


def tagmanifest(ctx: Context) -> str:
    """tagmanifest-sha256.txt lists every tag file but itself with its right digest."""
    return check_tagmanifest(ctx.bag())


def info(ctx: Context) -> str:
    """bag-info.txt labels, Payload-Oxum, date and hex formats."""
    detail, ctx.info = check_bag_info(ctx.bag())
    return detail
