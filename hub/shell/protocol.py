"""What a terminal agent may send: `<bash>` blocks and `<done/>`, or the same as tool calls.

    <bash>ls -la</bash>                                     run a command
    <done/>                                                 finish; the verifier decides
    <tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}</tool_call>
    <tool_call>{"name": "done", "arguments": {}}</tool_call>

Tool calls follow the Hermes/Qwen chat templates (a JSON object in `<tool_call>` tags, as
vLLM's tool parsers emit them); `arguments` may also be a JSON string, as in OpenAI's API.
`TOOLS` is the matching function schema, for trainers that pass tools to the chat template;
`tool_action` turns a structured call of them into a turn of this protocol that `parse` reads
back exactly.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from skyhub.tags import find_all, find_tag

TOOLS = [
    {"type": "function", "function": {
        "name": "bash",
        "description": "Run a command in the persistent bash session; returns its output, "
                       "exit status and the working directory.",
        "parameters": {"type": "object", "properties": {"command": {
            "type": "string", "description": "The command(s) to run."}},
            "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "done", "description": "Finish the task; the verifier checks the result.",
        "parameters": {"type": "object", "properties": {}}}},
]
_BASH_NAMES = {"bash", "shell", "execute_bash", "run_command", "terminal"}
_DONE_NAMES = {"done", "finish", "submit"}
_DONE_TAG = re.compile(r"<done\s*/?>", re.IGNORECASE)


@dataclass(frozen=True)
class Action:
    """`commands` to run in order, then finish when `done`."""

    commands: tuple[str, ...]
    done: bool


def read_call(text: str) -> tuple[str, object] | None:
    """(name, arguments) of one tool call's JSON (the Hermes form, or OpenAI's
    `{"type": "function", "function": {...}}`): the name lower-cased, arguments given as a
    JSON string decoded (None when that string is not JSON). None when the text is no call."""
    try:
        call = json.loads(text)
    except ValueError:
        return None
    if not isinstance(call, dict):
        return None
    call = call.get("function", call)
    if not isinstance(call, dict):
        return None
    args = call.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            args = None
    return str(call.get("name", "")).lower(), args


def _tool_call(text: str) -> tuple[str, str] | None:
    """("bash", command) or ("done", "") from one tool call's JSON; None if it is neither."""
    read = read_call(text)
    if read is None or read[1] is None:
        return None
    name, args = read
    if name in _DONE_NAMES:
        return "done", ""
    if name in _BASH_NAMES and isinstance(args, dict):
        command = args.get("command", args.get("cmd"))
        if isinstance(command, str) and command.strip():
            return "bash", command
    return None


def tool_action(name: str, arguments: dict[str, object]) -> str:
    """The text turn of a valid structured call of `TOOLS` (`skyhub.ToolCall`): `<done/>`, or
    the command as `<bash>` where that reads back as exactly this one command, else as a
    `<tool_call>` whose JSON has no `<` or `>` (escaped as `\\u003c`, `\\u003e`), so no
    command (one holding `</bash>`, `</tool_call>` or `<done/>`) can end it early."""
    if name == "done":
        return "<done/>"
    command = str(arguments.get("command", ""))
    text = f"<bash>{command}</bash>"
    if parse(text) == Action((command,), False):
        return text
    call = json.dumps({"name": "bash", "arguments": {"command": command}}, ensure_ascii=False)
    return "<tool_call>" + call.replace("<", "\\u003c").replace(">", "\\u003e") + "</tool_call>"


def parse(action: str) -> Action:
    """The commands and the done flag in a turn: tool calls when there are any, else the
    first `<bash>` block and a `<done/>` after it (a `<done/>` before the block means the
    agent finished; the block is then ignored)."""
    calls = [c for m in find_all(action, "tool_call") if (c := _tool_call(m.content.strip()))]
    if calls:
        return Action(tuple(c for kind, c in calls if kind == "bash"),
                      any(kind == "done" for kind, _ in calls))
    done = _DONE_TAG.search(action)
    m = find_tag(action, "bash")
    if m is not None and m.content.strip() and (done is None or m.start < done.start()):
        return Action((m.content.strip("\n"),), done is not None)
    return Action((), done is not None or find_tag(action, "done") is not None)


__all__ = ["TOOLS", "Action", "parse", "read_call", "tool_action"]
