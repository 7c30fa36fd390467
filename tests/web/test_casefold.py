"""The page's casefold (web/src/casefold.js) is Python's `str.casefold` for every code point, and
its table (web/src/casefold.generated.js) is what scripts/casefold_table.py writes. Needs node
(skipped without, except where CI=true)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from scripts.casefold_table import OUT, render

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_table_is_what_the_script_writes() -> None:
    assert OUT.read_text(encoding="utf-8") == render()


def test_the_page_casefolds_every_code_point_as_python_does(node_ready: None) -> None:
    done = subprocess.run(["node", str(REPO / "web" / "test" / "casefold.mjs")], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 0x110000
    differ = [c for c, line in enumerate(lines)
              if line != " ".join(f"{ord(ch):x}" for ch in chr(c).casefold())]
    assert differ == [], [(hex(c), lines[c], chr(c).casefold()) for c in differ[:5]]
    # the foldings toLowerCase gets wrong are among those checked
    for c, folded in ((0xDF, "ss"), (0xFB01, "fi"), (0x3C2, "\u03c3"), (0xAB70, "\u13a0"), (0x130, "i\u0307")):
        assert lines[c] == " ".join(f"{ord(ch):x}" for ch in folded)
