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
from skyhub.tools import function_tool

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

CODE_TOOLS_SYSTEM_PROMPT = (
    "You solve programming tasks with a Python interpreter. To run code, call the `run_code` "
    "tool with {{\"code\": \"...\"}}; a stateful Jupyter kernel runs it and returns stdout, "
    "stderr, the value of the last expression and any traceback. Variables, imports and files "
    "persist between calls. Test your solution before submitting. When you are done, call the "
    "`submit` tool with your complete final program (all imports and functions, no test code) "
    "as {{\"program\": \"...\"}}; it is graded by hidden unit tests in a fresh interpreter "
    "and ends the episode. Each tool call is one turn; you have {max_turns} turns and each "
    "run may take {timeout:g} seconds."
)

MATH_TOOLS_SYSTEM_PROMPT = (
    "You solve math problems and may use a Python interpreter. To run code, call the "
    "`run_code` tool with {{\"code\": \"...\"}}; a stateful Jupyter kernel runs it (numpy "
    "and sympy are available) and returns its output. Variables persist between calls. When "
    "you know the answer, call the `submit` tool with {{\"answer\": \"...\"}}, in simplest "
    "exact form; this ends the episode. Each tool call is one turn; you have {max_turns} turns "
    "and each run may take {timeout:g} seconds."
)

RUN_CODE_TOOL = function_tool(
    "run_code", "Run Python code in the persistent Jupyter kernel; returns stdout, stderr, the "
    "value of the last expression and any traceback.",
    {"code": {"type": "string", "description": "The Python code to run."}})
SUBMIT_PROGRAM_TOOL = function_tool(
    "submit", "Submit the final program; hidden unit tests grade it. Ends the episode.",
    {"program": {"type": "string", "description": "The complete program: all imports and "
                 "functions, no test code."}})
SUBMIT_ANSWER_TOOL = function_tool(
    "submit", "Submit the final answer; it is compared with the reference. Ends the episode.",
    {"answer": {"type": "string", "description": "The final answer in simplest exact form, "
                "e.g. 3/4 or 2*sqrt(2)."}})

MALFORMED = (
    "Your turn had no code to run and no final answer. Run code with <python>...</python>, "
    "or finish with <answer>...</answer>."
)
MALFORMED_MATH = MALFORMED[:-1] + " or \\boxed{...}."
MALFORMED_TOOLS = ("There was no code to run. Call `run_code` with the code to run, or "
                   "`submit` when you are done.")

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


class ToolAction(str):
    """A tool call's text action: the text protocol's rendering of the call (`<python>` or
    `<answer>`), carrying the `Turn` it stands for. The env runs `turn` rather than parsing the
    text again, so code that holds `</python>` or `<answer>` in a string runs as sent; a call
    with nothing to run has `turn` None, the text protocol's malformed turn."""

    turn: Turn | None

    def __new__(cls, text: str, turn: Turn | None) -> ToolAction:
        action = super().__new__(cls, text)
        action.turn = turn
        return action


def tool_action(name: str, arguments: dict[str, object]) -> ToolAction:
    """The action of a valid `run_code` or `submit` call (`arguments` checked against the
    tool's schema): the same `Turn` as its text (`<python>` cells lose a code fence, as
    `parse` does)."""
    if name == "run_code":
        code = str(arguments["code"])
        return ToolAction(f"<python>{code}</python>",
                          Turn("python", _dedent_fence(code)) if code.strip() else None)
    content = str(arguments.get("program", arguments.get("answer", "")))
    return ToolAction(f"<answer>{content}</answer>", Turn("answer", content))


def tool_content(observation: str) -> str:
    """A tool result from a turn's observation: the kernel's output without the `<output>`
    wrapping (then the turns-left note), a malformed turn told in terms of the tools."""
    for text in (MALFORMED_MATH, MALFORMED):
        if observation.startswith(text):
            return MALFORMED_TOOLS + observation[len(text):]
    head, tail = "<output>\n", "\n</output>"
    end = observation.rfind(tail)
    if not observation.startswith(head) or end < len(head):
        return observation
    return observation[len(head):end] + observation[end + len(tail):]


__all__ = ["CODE_SYSTEM_PROMPT", "CODE_TOOLS_SYSTEM_PROMPT", "MALFORMED", "MALFORMED_MATH",
           "MALFORMED_TOOLS", "MATH_SYSTEM_PROMPT", "MATH_TOOLS_SYSTEM_PROMPT", "RUN_CODE_TOOL",
           "SUBMIT_ANSWER_TOOL", "SUBMIT_PROGRAM_TOOL", "ToolAction", "Turn", "output", "parse",
           "program_from_answer", "tool_action", "tool_content"]
