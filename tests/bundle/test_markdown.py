"""bundle.views.markdown: any string, placed where report.md places record text, renders with a
real CommonMark/GFM parser (markdown-it-py, GFM tables and strikethrough) as exactly its own
characters and no structure; ordinary strings are left as they are."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token

from bundle.views.markdown import ALWAYS, LINE_BREAKING, code, text

MD = MarkdownIt("gfm-like", {"linkify": False})
"""GFM as markdown-it-py has it (tables, strikethrough); GFM's extended autolinks are checked
on the source by `gfm_autolinks`, since markdown-it's own linkify needs a package we do not
ship."""

CONTEXTS = {
    "paragraph": ("## Question\n\n", "\n", ("", "")),
    "list item": ("Deviations:\n\n- ", "\n- second\n", ("", "")),
    "table cell": ("| key | value |\n|---|---|\n| k | ", " |\n", ("", "")),
    "heading": ("# Calibration run: ", "\n", ("Calibration run: ", "")),
    "inside prose": ("- CPU: ", ", 2 logical cores\n", ("CPU: ", ", 2 logical cores")),
}
"""Where report.md puts record text: (what comes before, what comes after, the template's words
that share the value's inline text)."""

_AUTOLINK = re.compile(r"(?:^|[\s*_~(])(?:www\.)|[A-Za-z][A-Za-z0-9+.-]*://|"
                       r"[A-Za-z0-9._+-]+@[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.[A-Za-z0-9]|"
                       r"(?:mailto|xmpp):")
"""GFM's extended autolinks (www., a scheme and //, e-mail addresses, mailto: and xmpp:), as
they appear in the Markdown source: a backslash-escaped character breaks them."""

ORDINARY = ["distilbert/distilbert-base-uncased-finetuned-sst-2-english", "stanfordnlp/sst2",
            "Intel(R) Xeon(R) Processor", "AMD EPYC 7B13 64-Core Processor", "2.13.0+cpu",
            "Linux-6.18.44-fc-v657-x86_64-with-glibc2.36", "deterministic_algorithms", "3.11.7",
            "CPython", "negative", "positive", "huggingface_hub", "no claim",
            "Intel(R) Xeon(R) CPU @ 2.20GHz",
            ("The model is test/tiny-distilbert@local, not the pinned distilbert/distilbert-base-"
             "uncased-finetuned-sst-2-english@714eb0fa89d2f80546fda750413ed43d93601a13."),
            "The model file config.json has sha256 91c1885328bce0b2, not the pinned 582122c8f4147.",
            "How well calibrated are the pinned SST-2 classifier's probabilities?"]


def gfm_autolinks(source: str) -> list[str]:
    return [m.group(0) for m in _AUTOLINK.finditer(source)]


def _skeleton(tokens: list[Token]) -> list[tuple[str, str]]:
    return [(t.type, t.tag) for t in tokens]


def _shown(s: str) -> str:
    """The characters a reader should see for s: LINE_BREAKING ones as \\uXXXX."""
    return "".join(f"\\u{ord(ch):04x}" if ch in LINE_BREAKING else ch for ch in s)


def _render(context: str, markdown: str) -> list[Token]:
    before, after, _ = CONTEXTS[context]
    return MD.parse(before + markdown + after)


def _value_inline(tokens: list[Token], plain: list[Token]) -> Token:
    """The inline token of `tokens` that holds the value: where `plain` holds "word"."""
    inline = [i for i, t in enumerate(plain) if t.type == "inline"]
    target = next(i for i in inline if "word" in plain[i].content)
    return tokens[target]


def _assert_inert(context: str, s: str, rendered: str) -> None:
    """`rendered` (text(s) or code(s)) in `context` has the structure of a plain word there, and
    its inline content is text (or one code span) showing exactly the characters of s."""
    tokens, plain = _render(context, rendered), _render(context, "word")
    assert _skeleton(tokens) == _skeleton(plain), (context, s, rendered)
    children = _value_inline(tokens, plain).children or []
    kinds = {c.type for c in children}
    assert kinds <= {"text", "code_inline"}, (context, s, rendered, kinds)
    if not rendered.startswith("`"):  # nothing inside a code span is linked
        assert not gfm_autolinks(rendered), (s, rendered)
    lead, tail = CONTEXTS[context][2]
    shown = "".join(c.content for c in children)
    assert shown.strip() == (lead + _shown(s.lstrip(" \t")) + tail).strip(), (context, s, rendered)


@pytest.mark.parametrize("s", ORDINARY)
def test_ordinary_strings_are_unchanged(s: str) -> None:
    assert text(s) == s
    assert code(s) == f"`{s}`"


@pytest.mark.parametrize("s,expected", [
    ("# APPROVED FOR DEPLOYMENT", "\\# APPROVED FOR DEPLOYMENT"),
    ("<img src=https://evil.example/p.png>", "\\<img src=https\\://evil.example/p.png\\>"),
    ("a | b", "a \\| b"),
    ("line\nbreak", "line\\\\u000abreak"),
    ("1. item", "1\\. item"),
    ("- item", "\\- item"),
    ("   > quote", "\\> quote"),
    ("www.evil.example", "www\\.evil.example"),
    ("mail me@evil.example", "mail me\\@evil.example"),
    ("**bold** _it_ x86_64", "\\*\\*bold\\*\\* \\_it\\_ x86_64"),
    ("[link](x) ![img](y)", "\\[link\\](x) !\\[img\\](y)"),
])
def test_structure_is_escaped(s: str, expected: str) -> None:
    assert text(s) == expected


@pytest.mark.parametrize("ch", sorted(ALWAYS))
def test_always_escaped_wherever_it_stands(ch: str) -> None:
    assert text(f"a{ch}b") == f"a\\{ch}b" and text(f"{ch}") == f"\\{ch}"


def test_a_leading_list_number_needs_a_blank_or_the_end() -> None:
    assert text("1.") == "1\\." and text("2)\tx") == "2\\)\\\\u0009x"
    assert text("2.13.0+cpu") == "2.13.0+cpu" and text("1234567890. x") == "1234567890. x"


def test_code_falls_back_to_text_when_a_span_cannot_hold_the_string() -> None:
    assert code("<b>bold</b>") == "`<b>bold</b>`"  # nothing is interpreted inside a span
    for s in ("a`b", "a|b", "a\nb", " lead", "trail ", ""):
        assert code(s) == text(s)


HOSTILE = ["| metric | raw |\n|---|---|\n| ece | 0.0001 |", "approved by the ethics board\n\n# APPROVED",
           "<img src=https://evil.example/p.png>", "<!-- table: metrics-audit -->", "```\nfenced",
           "---", "===", "> quoted", "+ item", "10) item", "\t\t    indented", "[x] task",
           "x\\", "&lt;b&gt;", "$x^2$", ":warning:", "a\u202eb", "\r# heading", "*** ",
           "<https://evil.example>", "foo@evil.example", "HTTPS://evil.example", "Www.evil.example",
           "`code`", "~~gone~~", "[^1]", "\\| escaped pipe"]


@pytest.mark.parametrize("context", sorted(CONTEXTS))
@pytest.mark.parametrize("s", HOSTILE + ORDINARY)
def test_hostile_strings_render_as_their_characters(context: str, s: str) -> None:
    _assert_inert(context, s, text(s))
    _assert_inert(context, s, code(s))


def test_blank_text() -> None:
    assert text(" \t ") == "" and code(" ") == ""


ALPHABET = st.one_of(st.sampled_from(list(string.punctuation + string.digits + " \t\n\rwW")),
                     st.sampled_from(sorted(LINE_BREAKING)), st.characters())


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=30), st.sampled_from(sorted(CONTEXTS)))
@example("1)", "list item")
@example("_a_", "inside prose")
def test_any_string_renders_as_its_characters(s: str, context: str) -> None:
    assume(s.strip(" \t"))  # a blank value is no text at all: test_blank_text
    _assert_inert(context, s, text(s))
    _assert_inert(context, s, code(s))
