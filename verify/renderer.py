"""Which renderer drew a bundle's views, and whether this verifier can draw them the same way.

The report, the figures and the crate are rendered from the records by bundle.views, the one
piece of code the verifier shares with the job beyond definitions: it computes no number, it
only lays out what the records hold, and the verifier checks those records with its own code
first. A bundle records the renderer version (environment.json `packages`, under
bundle.views.RENDERER_PACKAGE; none recorded means version 1) and the matplotlib version that drew
its figures. When they differ from this verifier's, the views cannot be compared byte for byte:
the regeneration checks are skipped with the reason (never passed), and a skipped check fails
the verification."""

from __future__ import annotations

import functools
from importlib import metadata
from typing import Any

from bundle import layout
from bundle.views import RENDERER_PACKAGE, RENDERER_VERSION
from verify.context import Context
from verify.result import Missing

FIRST_RENDERER = "1"
"""The renderer of bundles that record none: version 1 wrote every view before versions were
recorded."""


def _packages(ctx: Context) -> dict[str, Any]:
    packages: dict[str, Any] = ctx.doc(layout.ENVIRONMENT_JSON)["packages"]
    return packages


def renderer(ctx: Context) -> str:
    """This verifier's renderer version, after making sure it is the bundle's; Missing when not."""
    ctx.require("verifier.renderer")
    recorded = _packages(ctx).get(RENDERER_PACKAGE) or FIRST_RENDERER
    if recorded != RENDERER_VERSION:
        raise Missing(f"not compared: the bundle's views were rendered by renderer {recorded} "
                      f"(environment.json), this verifier renders with {RENDERER_VERSION}; verify with "
                      f"a verifier of renderer {recorded}.", fact="verifier.renderer",
                      item=f"renderer {recorded}")
    return RENDERER_VERSION


@functools.cache
def _installed(name: str) -> str:
    """metadata.version(name), looked up once per process (each lookup scans sys.path)."""
    return metadata.version(name)


def matplotlib_version(ctx: Context) -> str:
    """The installed matplotlib's version when the bundle's figures can be drawn with it (the
    bundle records the same one, or none); Missing with the reason otherwise."""
    ctx.require("verifier.renderer")
    try:
        installed = _installed("matplotlib")
    except metadata.PackageNotFoundError:
        raise Missing("not compared: matplotlib is not installed; install verify/requirements.txt "
                      "to redraw the figures.", fact="verifier.renderer", item="matplotlib") from None
    recorded = _packages(ctx).get("matplotlib")
    if recorded is not None and recorded != installed:
        raise Missing(f"not compared: the figures were drawn with matplotlib {recorded} "
                      f"(environment.json), this verifier has {installed}; install matplotlib=={recorded} "
                      "(verify/requirements.txt pins the job's) to redraw them.",
                      fact="verifier.renderer", item=f"matplotlib {recorded}")
    return installed


def first_difference(found: bytes, expected: bytes) -> str:
    """Where two texts first differ, as `line N: found ..., expected ...` (each cut short)."""
    got, want = found.split(b"\n"), expected.split(b"\n")
    for n, (a, b) in enumerate(zip(got, want, strict=False), start=1):
        if a != b:
            return f"line {n} is {_cut(a)}, the records give {_cut(b)}"
    if len(got) > len(want):
        return f"line {len(want) + 1} is {_cut(got[len(want)])}, where the records end"
    return f"it ends at line {len(got)}, the records go on with {_cut(want[len(got)])}"


def _cut(line: bytes) -> str:
    text = line.decode("utf-8", errors="replace")
    return repr(text if len(text) <= 80 else text[:77] + "...")
