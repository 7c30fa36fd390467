"""The figures: well-formed PNG images (signature, chunk CRCs, IHDR first, IDAT, IEND last), and
byte for byte the figures bundle.views.figures draws from the checked records (metrics.json and
the audit pool's logits), when this verifier has the bundle's renderer and matplotlib versions."""

from __future__ import annotations

import hashlib
import struct
import zlib

from bundle import layout
from verify import renderer
from verify.context import Context
from verify.result import DigestMismatch, Failed

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_png(data: bytes, name: str) -> tuple[int, int]:
    """(width, height) of a well-formed PNG: signature, chunks with right CRCs, IHDR first,
    IDAT, IEND last."""
    if not data.startswith(PNG_SIGNATURE):
        raise Failed(f"{name} does not start with the PNG signature.")
    pos, kinds = len(PNG_SIGNATURE), []
    size = (0, 0)
    while pos < len(data):
        if pos + 12 > len(data):
            raise Failed(f"{name} ends inside a chunk header at byte {pos}.")
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if len(body) != length or pos + 12 + length > len(data):
            raise Failed(f"{name}: chunk {kind!r} at byte {pos} runs past the end.")
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        if zlib.crc32(kind + body) != crc:
            raise Failed(f"{name}: chunk {kind!r} at byte {pos} has a wrong CRC.")
        if kind == b"IHDR" and length == 13:
            size = struct.unpack(">II", body[:8])
        kinds.append(kind)
        pos += 12 + length
    if not kinds or kinds[0] != b"IHDR" or kinds[-1] != b"IEND" or b"IDAT" not in kinds:
        raise Failed(f"{name} is not a complete PNG (IHDR first, IDAT, IEND last).")
    if not (size[0] > 0 and size[1] > 0):
        raise Failed(f"{name} has an empty image ({size[0]}x{size[1]}).")
    return size


def png(ctx: Context) -> str:
    """Both figures are present and well-formed PNGs."""
    sizes = [f"{p.rsplit('/', 1)[-1]} {w}x{h}"
             for p in layout.FIGURES for w, h in [check_png(ctx.file(p), p)]]
    return "well-formed PNG: " + ", ".join(sizes)


def regenerated(ctx: Context) -> str:
    """Both figures are byte for byte the verifier's drawing of the checked records."""
    version = renderer.renderer(ctx)
    found = {path: ctx.file(path) for path in layout.FIGURES}
    mpl = renderer.matplotlib_version(ctx)
    from bundle.views.figures import render_figures  # deferred: matplotlib, optional here, only to draw

    drawn = render_figures(ctx.doc(layout.METRICS_JSON), ctx.table("audit").z, ctx.table("audit").y)
    differ = [path for path in layout.FIGURES if drawn[layout.data_name(path)] != found[path]]
    if differ:
        raise DigestMismatch(
            f"{', '.join(differ)} {'is' if len(differ) == 1 else 'are'} not the figure"
            f"{'' if len(differ) == 1 else 's'} of these records (renderer {version}, matplotlib "
            f"{mpl}): a reader would see a picture the records do not support.",
            path=differ[0], algorithm="sha256",
            expected=hashlib.sha256(drawn[layout.data_name(differ[0])]).hexdigest(),
            found=hashlib.sha256(found[differ[0]]).hexdigest())
    return f"both figures equal the verifier's drawing of the records (renderer {version}, matplotlib {mpl})"
