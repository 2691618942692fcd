"""A corpus passage's parts: its title (the first line) and its text.

Shared by the indexes (tantivy indexes titles on their own) and the protocol (which shows
them), below both, so neither index module needs the other.
"""

from __future__ import annotations


def split_title(contents: str) -> tuple[str, str]:
    """(title, text) of a passage: the first line, without surrounding quotes, and the rest."""
    first, _, rest = str(contents).partition("\n")
    title = first.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1].strip()
    return title, rest.strip()


__all__ = ["split_title"]
