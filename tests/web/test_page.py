"""The built page (web/dist/verify.html): rebuilt by `make web` to the same bytes, self-contained,
under a Content-Security-Policy that allows its own inline script and style and no request of any
kind, and small. Needs node and web/node_modules (skipped without, except where CI=true)."""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WEB = REPO / "web"
PAGE = WEB / "dist" / "verify.html"


@pytest.fixture(scope="module")
def node_ready() -> None:
    why = None
    if shutil.which("node") is None:
        why = "node is absent"
    elif not (WEB / "node_modules" / "esbuild").is_dir():
        why = "web/node_modules is absent (make web)"
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the page's tests must run in CI: {why}")
        pytest.skip(why)


def _csp(html: str) -> dict[str, list[str]]:
    found = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html)
    assert found is not None
    return {d.split()[0]: d.split()[1:] for d in found.group(1).split("; ")}


def test_the_committed_page_is_what_the_build_writes_and_the_build_is_reproducible(node_ready: None) -> None:
    committed = PAGE.read_bytes()
    wasm = WEB / "src" / "pcg64.wasm.js"
    committed_wasm = wasm.read_bytes()
    for _ in range(2):
        done = subprocess.run(["node", "build.mjs"], cwd=WEB, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        assert hashlib.sha256(PAGE.read_bytes()).hexdigest() == hashlib.sha256(committed).hexdigest(), \
            "web/dist/verify.html is not what make web builds from web/src; run make web and commit it"
        assert wasm.read_bytes() == committed_wasm, \
            "web/src/pcg64.wasm.js is not what make web assembles from web/wasm/pcg64.wat; run make web and commit it"


def test_the_csp_allows_no_request_and_only_the_page_own_script_and_style() -> None:
    """Nothing but the inline script and style by their digests; the script may instantiate
    WebAssembly from its own bytes ('wasm-unsafe-eval': the resample draws and the int64 stream's
    SHA-256) and start a worker from a blob: URL it makes (the hashing worker), which loads nothing."""
    html = PAGE.read_text(encoding="utf-8")
    csp = _csp(html)
    for directive in ("default-src", "connect-src", "img-src", "font-src", "media-src", "object-src",
                      "frame-src", "form-action", "base-uri"):
        assert csp[directive] == ["'none'"], directive
    # the hashing worker, started from a blob: URL the script makes; it inherits this policy
    assert csp["worker-src"] == ["blob:"]
    scripts = re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL)
    styles = re.findall(r"<style>(.*?)</style>", html, flags=re.DOTALL)
    assert len(scripts) == len(styles) == 1
    digest = "'sha256-{}'"
    import base64

    assert csp["script-src"] == [digest.format(base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()),
                                 "'wasm-unsafe-eval'"]
    assert csp["style-src"] == [digest.format(base64.b64encode(hashlib.sha256(styles[0].encode()).digest()).decode())]
    assert not re.search(r"<(script|link|img|iframe)[^>]*\b(src|href)=", html), "the page loads nothing"


def test_the_page_is_small() -> None:
    assert len(gzip.compress(PAGE.read_bytes(), 9)) < 300 * 1024


def _js_number(text: str, name: str) -> int:
    """The value of `name: <expression>` in a JavaScript object literal of plain arithmetic."""
    found = re.search(rf"\b{name}: ([0-9_ *+]+)[,\n]", text)
    assert found is not None, name
    terms = found.group(1).replace("_", "").split("+")
    return sum(math.prod(int(factor) for factor in term.split("*")) for term in terms)


@pytest.mark.parametrize(("source", "name", "constant"), [
    ("archive.js", "members", "MAX_ENTRIES"), ("archive.js", "fileBytes", "MAX_FILE_BYTES"),
    ("archive.js", "totalBytes", "MAX_TOTAL_BYTES"), ("archive.js", "archiveBytes", "MAX_ARCHIVE_BYTES"),
    ("archive.js", "nameBytes", "MAX_NAME_BYTES"), ("archive.js", "pathBytes", "MAX_PATH_BYTES"),
    ("archive.js", "trailingZeroBytes", "MAX_TRAILING_ZERO_BYTES"),
    ("caps.js", "file", "MAX_FILE_BYTES"), ("caps.js", "total", "MAX_TOTAL_BYTES"),
    ("caps.js", "protocol", "MAX_PROTOCOL_BYTES"), ("caps.js", "small", "SMALL_FILE_BYTES"),
    ("caps.js", "rows", "MAX_ROWS"), ("caps.js", "classes", "MAX_CLASSES"), ("caps.js", "steps", "MAX_STEPS"),
    ("caps.js", "resamples", "MAX_RESAMPLES"), ("caps.js", "resampleCells", "MAX_RESAMPLE_CELLS"),
    ("caps.js", "stabilitySizes", "MAX_STABILITY_SIZES"), ("caps.js", "slack", "SLACK_BYTES"),
    ("caps.js", "poolsPerRow", "POOLS_BYTES_PER_ROW"), ("caps.js", "parquetPerRow", "PARQUET_BYTES_PER_ROW"),
    ("caps.js", "parquetPerCell", "PARQUET_BYTES_PER_CELL"),
    ("caps.js", "trajectoryPerStep", "TRAJECTORY_BYTES_PER_STEP"),
])
def test_the_page_limits_are_the_verifiers(source: str, name: str, constant: str) -> None:
    from bundle import limits

    text = (WEB / "src" / source).read_text(encoding="utf-8").replace("MiB", str(1024 * 1024))
    assert _js_number(text, name) == getattr(limits, constant)
