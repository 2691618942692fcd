"""Math answers as an agent or a dataset writes them: the final answer of a message
(`extract_answer`: the last <answer>...</answer>, else the last \\boxed{...}) and the gold
answer of a worked solution (`gold_from_solution`), with the brace matching they share with
`math_grade`, which compares what they return.

Pure functions, no I/O.
"""

from __future__ import annotations

import re

__all__ = ["extract_answer", "gold_from_solution"]

_ANSWER_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_ANSWER_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def braced(s: str, i: int) -> tuple[str, int] | None:
    """(content, index after the closing brace) of the group opening at s[i] == '{'."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return s[i + 1:j], j + 1
    return None


def _brace_pairs(text: str) -> dict[int, int]:
    """Index of each '{' -> index of its '}', in one pass (unclosed ones are absent)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for i, c in enumerate(text):
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            pairs[stack.pop()] = i
    return pairs


def last_boxed(text: str) -> str | None:
    """Content of the last complete `\\boxed{...}`/`\\fbox{...}` (or `\\boxed 5`)."""
    boxes = list(_BOX.finditer(text))
    pairs = _brace_pairs(text) if boxes else {}
    for m in reversed(boxes):
        i = m.end()
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            if i in pairs:
                return text[i + 1:pairs[i]]
        elif i > m.end():  # `\boxed 5`: one token, up to whitespace or `$`
            token = re.match(r"[^\s$]+", text[i:])
            if token:
                return token.group(0)
    return None


def clean(ans: str) -> str:
    ans = ans.strip()
    while len(ans) >= 2 and ans[0] == "$" and ans[-1] == "$":
        ans = ans[1:-1].strip()
    for left, right in (("\\(", "\\)"), ("\\[", "\\]")):
        if ans.startswith(left) and ans.endswith(right):
            ans = ans[2:-2].strip()
    return ans.strip("$").strip()


def extract_answer(text: str) -> str | None:
    """The final answer in an agent's message, or None if it gave none.

    The last `<answer>...</answer>` wins (an unclosed trailing `<answer>` runs to the end of
    the text); a `\\boxed{}` inside it is unwrapped. Without an answer tag, the last
    `\\boxed{...}`/`\\fbox{...}` is used. Whitespace and surrounding `$` are stripped.
    """
    if not isinstance(text, str):
        return None
    opens = list(_ANSWER_OPEN.finditer(text))
    if opens:
        start = opens[-1].end()
        close = _ANSWER_CLOSE.search(text, start)
        content = text[start:close.start() if close else len(text)]
        boxed = last_boxed(content)
        content = clean(boxed if boxed is not None else content)
        if content:
            return content
    boxed = last_boxed(text)
    if boxed is None:
        return None
    return clean(boxed) or None


def gold_from_solution(solution: str) -> str | None:
    """Gold answer of a MATH solution (its last `\\boxed{}`) or a GSM8K answer (`#### 42`)."""
    if not isinstance(solution, str):
        return None
    if "####" in solution:
        gold = solution.rsplit("####", 1)[1].strip()
        return gold or None
    boxed = last_boxed(solution)
    return clean(boxed) if boxed is not None else None
