"""Tolerant parsing of tagged model output (`<sql>...</sql>`, `<answer>...</answer>`).

Model output is messy: tags are left open at a stop string, repeated, nested, upper-cased or
wrapped in prose. These helpers find what the model most plausibly meant and never raise:
any input (even `None` or bytes) gives a result or `None`. Whether a messy turn is *allowed*
is the env's format rule, decided from the `TagMatch` fields (`closed`, counts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

Which = Literal["first", "last"]


@dataclass(frozen=True)
class TagMatch:
    """One `<tag>content</tag>` occurrence.

    `start`/`end` span the whole element in the text (end excludes nothing: `text[start:end]`
    is the element); `closed` is False when the text ended before the closing tag, in which
    case `content` runs to the end of the text.
    """

    tag: str
    content: str
    start: int
    end: int
    closed: bool = True


def _as_text(text: object) -> str:
    if isinstance(text, str):
        return text
    if isinstance(text, bytes | bytearray):
        return bytes(text).decode("utf-8", errors="replace")
    return "" if text is None else str(text)


@lru_cache(maxsize=256)
def _tag_re(tag: str) -> re.Pattern[str]:
    t = re.escape(tag)
    # opening: <tag>, <TAG>, < tag attr="x" >; closing: </tag>, </ tag >
    return re.compile(rf"<\s*(?P<close>/)?\s*{t}(?:\s[^<>]*)?\s*>", re.IGNORECASE)


def find_all(text: object, tag: str, *, allow_unclosed: bool = True) -> list[TagMatch]:
    """Every top-level `<tag>` element, in order.

    Nested elements of the same tag belong to their outermost element (`<a>x<a>y</a></a>` is
    one match with content `x<a>y</a>`). A stray closing tag is ignored. With
    `allow_unclosed`, an element still open at the end of the text is returned with
    `closed=False` (models often stop right before writing the closing tag).
    """
    s = _as_text(text)
    matches: list[TagMatch] = []
    depth = 0
    open_start = open_end = 0
    for m in _tag_re(tag).finditer(s):
        if m.group("close") is None:
            if depth == 0:
                open_start, open_end = m.start(), m.end()
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                matches.append(TagMatch(tag, s[open_end:m.start()], open_start, m.end()))
    if depth > 0 and allow_unclosed:
        matches.append(TagMatch(tag, s[open_end:], open_start, len(s), closed=False))
    return matches


def find_tag(text: object, tag: str, *, which: Which = "first",
             allow_unclosed: bool = True) -> TagMatch | None:
    """The first (or last) `<tag>` element of `text`, or None."""
    found = find_all(text, tag, allow_unclosed=allow_unclosed)
    if not found:
        return None
    return found[0] if which == "first" else found[-1]


def extract(text: object, tag: str, *, which: Which = "first", strip: bool = True,
            allow_unclosed: bool = True) -> str | None:
    """Content of the first (or last) `<tag>` element, stripped; None if there is none."""
    m = find_tag(text, tag, which=which, allow_unclosed=allow_unclosed)
    if m is None:
        return None
    return m.content.strip() if strip else m.content


def first_of(text: object, tags: tuple[str, ...] | list[str], *,
             allow_unclosed: bool = True) -> TagMatch | None:
    """Whichever of several tags opens first in the text (e.g. `<sql>` vs `<solution>`)."""
    best: TagMatch | None = None
    for tag in tags:
        m = find_tag(text, tag, allow_unclosed=allow_unclosed)
        if m is not None and (best is None or m.start < best.start):
            best = m
    return best


def count(text: object, tag: str) -> tuple[int, int]:
    """Numbers of opening and closing `tag` tags, for strict format rules."""
    opens = closes = 0
    for m in _tag_re(tag).finditer(_as_text(text)):
        if m.group("close") is None:
            opens += 1
        else:
            closes += 1
    return opens, closes


def truncate_after(text: object, stop: str) -> str:
    """`text` cut right after the first `stop` string (what an engine with stop strings would
    have produced); unchanged if `stop` does not occur."""
    s = _as_text(text)
    i = s.find(stop) if stop else -1
    return s if i < 0 else s[: i + len(stop)]


_FENCE_RE = re.compile(r"```[ \t]*(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)(?:```|\Z)", re.DOTALL)


def find_code_block(text: object, lang: str | None = None, *,
                    which: Which = "last") -> str | None:
    """Body of a Markdown fenced code block (optionally only ```lang), or None.

    An unterminated fence runs to the end of the text.
    """
    blocks = [m.group("body") for m in _FENCE_RE.finditer(_as_text(text))
              if lang is None or m.group("lang").lower() == lang.lower()]
    if not blocks:
        return None
    return blocks[0] if which == "first" else blocks[-1]


__all__ = ["TagMatch", "count", "extract", "find_all", "find_code_block", "find_tag",
           "first_of", "truncate_after"]
