"""The Python envs' turn format: code cells in, kernel output out, a final answer to finish.

    <python>print(2 + 2)</python>      -> <output>4</output>   (a ```python block works too)
    <answer>...</answer>               -> ends the episode (math: \\boxed{...} as well)

Tool-integrated reasoning recipes (ToRA, ReTool, SimpleTIR) use the same shape: code in a
delimited block, the interpreter's output fed back, the answer in a final tag or box.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from skyhub.tags import find_code_block, find_tag

CODE_SYSTEM_PROMPT = (
    "You solve programming tasks with a Python interpreter. To run code, write it inside "
    "<python> and </python>; a stateful Jupyter kernel runs it and shows stdout, stderr, the "
    "value of the last expression and any traceback inside <output> and </output>. Variables, "
    "imports and files persist between your cells. Test your solution before submitting. When "
    "you are done, put your complete final program (all imports and functions, no test code) "
    "inside <answer> and </answer>; it is graded by hidden unit tests in a fresh interpreter. "
    "You have {max_turns} turns; each cell may run for {timeout:g} seconds."
)

MATH_SYSTEM_PROMPT = (
    "You solve math problems and may use a Python interpreter. To run code, write it inside "
    "<python> and </python>; a stateful Jupyter kernel runs it (numpy and sympy are available) "
    "and shows the output inside <output> and </output>. Variables persist between cells. "
    "Give your final answer as <answer>...</answer> or \\boxed{{...}}, in simplest exact form. "
    "You have {max_turns} turns; each cell may run for {timeout:g} seconds."
)

MALFORMED = (
    "Your turn had no code to run and no final answer. Run code with <python>...</python>, "
    "or finish with <answer>...</answer>."
)
MALFORMED_MATH = MALFORMED[:-1] + " or \\boxed{...}."

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*[{ ]")


@dataclass(frozen=True)
class Turn:
    """What the agent asked for: `kind` is "python" (run `content`) or "answer"."""

    kind: str
    content: str


def _without_code(text: str) -> str:
    """`text` minus its code (python tags and fenced blocks), so a \\boxed inside a string
    literal in code is not taken for the final answer."""
    text = re.sub(r"<python\b[^>]*>.*?(</python>|\Z)", " ", text, flags=re.DOTALL)
    return re.sub(r"```.*?(```|\Z)", " ", text, flags=re.DOTALL)


def parse(action: str, *, boxed_answers: bool = False) -> Turn | None:
    """The turn's intent. `<answer>` wins (the agent is done); then (math) a `\\boxed{}`
    outside code; then the first `<python>` block or, failing that, the last ```python (or
    bare ```) fenced block. None when there is nothing to do."""
    m = find_tag(action, "answer")
    if m is not None:
        return Turn("answer", m.content)
    if boxed_answers and _BOXED.search(_without_code(action)):
        return Turn("answer", _without_code(action))
    m = find_tag(action, "python")
    if m is not None and m.content.strip():
        return Turn("python", _dedent_fence(m.content))
    code = find_code_block(action, "python") or find_code_block(action, "py") or \
        find_code_block(action, "")
    if code is not None and code.strip():
        return Turn("python", code)
    return None


def _dedent_fence(code: str) -> str:
    """Code in `<python>` tags that is itself fenced (```python ... ```) loses the fence."""
    inner = find_code_block(code, which="first")
    return inner if inner is not None and code.strip().startswith("```") else code.strip("\n")


def program_from_answer(content: str) -> str:
    """The program in a code answer: the last fenced block if there is one, else the text."""
    code = find_code_block(content, "python") or find_code_block(content)
    return (code if code is not None else content).strip("\n") + "\n"


def output(text: str) -> str:
    return f"<output>\n{text}\n</output>"


__all__ = ["CODE_SYSTEM_PROMPT", "MALFORMED", "MALFORMED_MATH", "MATH_SYSTEM_PROMPT", "Turn",
           "output", "parse", "program_from_answer"]
