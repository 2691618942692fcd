"""Search-R1's protocol: the prompt, the turn's parsing, and how passages are shown.

    <search>query</search>   -> <information>Doc 1(Title: T) text ...</information>
    <answer>text</answer>    -> ends the episode, scored by exact match

The prompt and the `Doc i(Title: ...)` format follow Search-R1 (Jin et al., 2025,
https://github.com/PeterGriffinJin/Search-R1), so models trained there read the same text.
"""

from __future__ import annotations

from typing import Any

from skyhub.tags import TagMatch, first_of

from .passage import split_title

SYSTEM_PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first "
    "every time you get new information. After reasoning, if you find you lack some knowledge, "
    "you can call a search engine by <search> query </search> and it will return the top "
    "searched results between <information> and </information>. You can search as many times "
    "as you want within {max_turns} turns. If you find no further external knowledge needed, "
    "you can directly provide the answer inside <answer> and </answer>, without detailed "
    "illustrations. For example, <answer> Beijing </answer>."
)

MALFORMED = (
    "Your turn had neither <search>query</search> nor <answer>text</answer>. To look something "
    "up, write <search>your query</search>; to finish, write <answer>your answer</answer>."
)

TAGS = ("search", "answer")


def parse(action: str) -> TagMatch | None:
    """The turn's first `<search>` or `<answer>` element (whichever opens first), or None."""
    return first_of(action, TAGS)


def format_docs(docs: list[dict[str, Any]]) -> str:
    """Passages as Search-R1 shows them: `Doc 1(Title: T) text` one per line."""
    lines = []
    for i, d in enumerate(docs, 1):
        title, text = split_title(d.get("contents", ""))
        lines.append(f"Doc {i}(Title: {title}) {text}")
    return "\n".join(lines)


def information(docs: list[dict[str, Any]]) -> str:
    body = format_docs(docs) if docs else "No results found."
    return f"<information>{body}</information>"
