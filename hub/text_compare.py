"""Comparing two plays of the same episode as text: the env's `replay_ignore` masks (what
legitimately differs between plays: timings, ports, temp paths) and a short readable diff of
the first difference. Shared by `skyhub replay` (`skyhub.eval.replay`) and a fork by replay
(`skyhub.fork`), which checks each replayed result against the episode's."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any

from skyhub.errors import UsageError

MASK = "<ignored>"


def text_diff(recorded: str, replayed: str, *, context: int = 2, max_lines: int = 24) -> str:
    """A short readable diff of two texts: a unified diff of their lines, or for one-line
    texts both shown around the first differing character."""
    if "\n" not in recorded and "\n" not in replayed:
        at = next((i for i, (a, b) in enumerate(zip(recorded, replayed, strict=False))
                   if a != b), min(len(recorded), len(replayed)))
        lo = max(at - 40, 0)

        def cut(s: str) -> str:
            return ("..." if lo else "") + repr(s[lo:at + 60])[1:-1] + (
                "..." if len(s) > at + 60 else "")
        return f"  recorded: {cut(recorded)}\n  replayed: {cut(replayed)}\n  (from character {at})"
    lines = list(difflib.unified_diff(recorded.splitlines(), replayed.splitlines(),
                                      "recorded", "replayed", n=context, lineterm=""))
    if len(lines) > max_lines:
        lines = [*lines[:max_lines], f"... ({len(lines) - max_lines} more diff lines)"]
    return "\n".join(lines)


def ignore_patterns(env: Any, extra: Iterable[str] = ()) -> list[re.Pattern[str]]:
    """The env's `replay_ignore` regexes (on the env or, through wrappers, its `unwrapped`)
    and `extra` ones, compiled; a bad regex is a `UsageError` naming it."""
    declared = getattr(env, "replay_ignore", None)
    if declared is None:
        declared = getattr(getattr(env, "unwrapped", env), "replay_ignore", ())
    if isinstance(declared, str):
        declared = (declared,)
    patterns = []
    for p in (*tuple(declared or ()), *extra):
        try:
            patterns.append(re.compile(p))
        except re.error as e:
            raise UsageError(f"replay ignore pattern {p!r} is not a valid regex ({e}): fix the "
                             f"env's replay_ignore or the --ignore option") from None
    return patterns


def mask(text: str | None, patterns: Sequence[re.Pattern[str]]) -> str | None:
    if text is None:
        return None
    for p in patterns:
        text = p.sub(MASK, text)
    return text


__all__ = ["MASK", "ignore_patterns", "mask", "text_diff"]
