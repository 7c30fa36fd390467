"""Record text made inert for report.md (bundle/FORMAT.md "report.md", "Text from records").

A record's strings (ids, revisions, label names, the CPU model, deviations, package names and
versions) are the signer's free text. In report.md each one goes through `text` (prose, list
items, table cells) or `code` (a code span), so that a CommonMark or GitHub Flavored Markdown
reader shows it as the characters it holds and nothing more: no raw HTML, no heading, list, block
quote, table, fence or thematic break, no table cell boundary, no link, image or autolink, no
emphasis, no line break.

The escaping is minimal on purpose: a string that cannot make structure is returned unchanged,
so ordinary ids, versions and sentences read in the Markdown source as they are (and views
rendered before this escaping existed stay byte for byte the same when their strings are
ordinary). Every rule here depends only on the code points of the string, never on the Python or
Unicode version, so the job and any verifier render the same bytes."""

from __future__ import annotations

import re
from typing import Final

ALWAYS: Final = frozenset("\\`*[]<>|~&$#:")
"""ASCII punctuation escaped wherever it stands: backslash (escapes), backtick (code spans),
asterisk (emphasis, list markers, thematic breaks), brackets (links, images, footnotes, task
boxes), angle brackets (raw HTML, autolinks, block quotes), pipe (table cells), tilde
(strikethrough, fences), ampersand (entity references), dollar (math), number sign (headings,
GitHub references), colon (the scheme of GFM's extended autolinks, emoji shortcodes)."""

LINE_BREAKING: Final = frozenset(
    [*map(chr, range(0x20)), "\x7f", *map(chr, range(0x80, 0xA0)), "\u2028", "\u2029",
     "\u061c", "\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c",
     "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\ufeff"])
"""Characters shown as a visible `\\uXXXX` instead of themselves: C0 and C1 controls (line feed
and carriage return end a line, so a record could start a heading or a table), DEL, the Unicode
line and paragraph separators, and the invisible bidirectional and zero-width marks that could
make the text read otherwise than it is. A fixed list, not a Unicode category, so the output does
not depend on the Unicode version of the interpreter."""

_ESCAPE_ALWAYS: Final = str.maketrans({ch: "\\" + ch for ch in ALWAYS})
_SHOW_LINE_BREAKING: Final = str.maketrans({ch: f"\\\\u{ord(ch):04x}" for ch in LINE_BREAKING})
_EMAIL_AT = re.compile(r"@(?=[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.[A-Za-z0-9])")
"""The `@` of an e-mail autolink (GFM: a domain with at least one period follows)."""
_WWW_DOT = re.compile(r"(?<=[Ww][Ww][Ww])\.")
_INERT_UNDERSCORE = re.compile(r"(?<=[A-Za-z0-9])\\_(?=[A-Za-z0-9])")
"""An (escaped) underscore between two ASCII letters or digits: it neither opens nor closes
emphasis (CommonMark: it is both left- and right-flanking), as in `x86_64`."""
_LIST_NUMBER = re.compile(r"\A([0-9]{1,9})([.)])(?=[ \t]|\Z)")
"""An ordered list marker at the start of a line (CommonMark: 1-9 digits, `.` or `)`, then a
blank or the end)."""


def text(s: str) -> str:
    """`s` as Markdown text that renders as exactly the characters of `s` and makes no structure,
    wherever it is placed in a line (also at its start, also inside a table cell).

    Leading blanks are dropped (a reader would not see them, and they could indent a code
    block); LINE_BREAKING characters become a visible `\\uXXXX`; ALWAYS punctuation, an
    underscore that is not between two ASCII letters or digits, a first `-`, `+` or `=`, the `.`
    or `)` of a leading list number, the `.` of `www.` and an `@` before an e-mail domain are
    escaped with a backslash. Every other character, and so every ordinary string, is kept as it
    is. Linear in the length of `s`, with no Python code per character (a record may hold
    megabytes)."""
    # Order matters: each step reads the neighbours it needs as s has them. ALWAYS characters
    # are never letters, digits, underscores, periods, @ or blanks, so escaping them first
    # changes no later decision; LINE_BREAKING characters become letters and digits (\u000a),
    # so they are shown last.
    t = s.lstrip(" \t").translate(_ESCAPE_ALWAYS)
    t = _EMAIL_AT.sub(r"\\@", t)
    t = _WWW_DOT.sub(r"\\.", t)
    t = _INERT_UNDERSCORE.sub("_", t.replace("_", "\\_"))
    if t[:1] in ("-", "+", "="):
        t = "\\" + t
    t = _LIST_NUMBER.sub(r"\1\\\2", t, count=1)
    return t.translate(_SHOW_LINE_BREAKING)


def code(s: str) -> str:
    """`s` as a code span when a span can hold it as it is, else as `text(s)`.

    Inside a code span nothing is interpreted, but a backtick ends it, a pipe ends a table cell
    and a line break ends the line; a span that starts or ends with a blank loses it. So a
    string with any of those (or empty) is written as escaped text instead."""
    if (s and s[0] != " " and s[-1] != " " and "`" not in s and "|" not in s
            and not any(ch in LINE_BREAKING for ch in s)):
        return f"`{s}`"
    return text(s)
