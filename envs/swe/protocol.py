"""What a SWE agent may send: the shell family's `<bash>` and `<done/>`, plus the file editor,
as tags or as tool calls.

    <bash>pytest -x tests/</bash>                             run a command
    <edit>                                                    one editor command
    <command>str_replace</command>
    <path>/testbed/pkg/core.py</path>
    <old_str>return a - b</old_str>
    <new_str>return a + b</new_str>
    </edit>
    <tool_call>{"name": "str_replace_editor", "arguments": {"command": "view",
                "path": "/testbed/pkg/core.py"}}</tool_call>
    <done/>                                                   finish; the tests decide

The editor's tool is `str_replace_editor`, the name and parameters SWE-agent and OpenHands
give it (`command`, `path`, `file_text`, `old_str`, `new_str`, `insert_line`,
`view_range`), so a model trained there calls it as it learned. In the tag form each
parameter is a child tag; one newline right after an opening tag and one right before a
closing tag are layout, not content (write them twice to keep one). `view_range` is two
integers (`12 40` or `[12, 40]`), `insert_line` one. A turn is one editor command or one
shell turn: an editor command in a turn wins over `<bash>`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from skyhub.shell import protocol as shell
from skyhub.tags import find_all, find_tag

EDITOR = "str_replace_editor"
EDITOR_ALIASES = {EDITOR, "str_replace_based_edit_tool", "edit", "editor", "file_editor"}
TEXT_PARAMS = ("command", "path", "file_text", "old_str", "new_str")
INT_PARAMS = ("insert_line", "view_range")

EDITOR_TOOL = {"type": "function", "function": {
    "name": EDITOR,
    "description": "View, create and edit files. `view` shows a file with line numbers (or "
                   "a directory two levels deep); `create` writes a new file; `str_replace` "
                   "replaces old_str, which must occur exactly once, with new_str; `insert` "
                   "adds new_str after line insert_line; `undo_edit` reverts the file's last "
                   "edit. Paths are absolute.",
    "parameters": {"type": "object", "properties": {
        "command": {"type": "string",
                    "enum": ["view", "create", "str_replace", "insert", "undo_edit"]},
        "path": {"type": "string", "description": "An absolute path, e.g. /testbed/setup.py."},
        "file_text": {"type": "string", "description": "`create`: the new file's content."},
        "old_str": {"type": "string", "description": "`str_replace`: the exact text to "
                                                     "replace."},
        "new_str": {"type": "string", "description": "`str_replace`: the replacement; "
                                                     "`insert`: the text to insert."},
        "insert_line": {"type": "integer", "description": "`insert`: insert after this line "
                                                          "(0: at the top)."},
        "view_range": {"type": "array", "items": {"type": "integer"},
                       "description": "`view`: [first, last] lines (last -1: to the end)."}},
        "required": ["command", "path"]}}}
TOOLS = [shell.TOOLS[0], EDITOR_TOOL, shell.TOOLS[1]]


@dataclass(frozen=True)
class Edit:
    """One editor command; `error` when the call could not be read (what to tell the
    agent), then the other fields are empty."""

    arguments: dict[str, Any]
    error: str | None = None


def _layout(text: str) -> str:
    """A child tag's content without the one newline after the opening tag and the one
    before the closing tag."""
    if text.startswith("\n"):
        text = text[1:]
    return text[:-1] if text.endswith("\n") else text


def _ints(text: str, name: str) -> int | list[int] | str:
    """`insert_line` as an int, `view_range` as a list of ints; else an error message."""
    try:
        value = json.loads(text) if text.strip().startswith("[") else \
            [int(w) for w in text.replace(",", " ").split()]
    except ValueError:
        return f"{name} must be {'one integer' if name == 'insert_line' else 'two integers'}"
    if name == "insert_line":
        return value[0] if isinstance(value, list) and len(value) == 1 else \
            f"insert_line must be one integer, got {text.strip()!r}"
    return value


def _from_tags(content: str) -> Edit:
    args: dict[str, Any] = {}
    for name in TEXT_PARAMS + INT_PARAMS:
        m = find_tag(content, name)
        if m is None:
            continue
        if name in INT_PARAMS:
            value = _ints(m.content, name)
            if isinstance(value, str):
                return Edit({}, value)
            args[name] = value
        else:
            args[name] = _layout(m.content) if name in ("file_text", "old_str", "new_str") \
                else m.content.strip()
    if not args.get("command") or not args.get("path"):
        return Edit({}, "An <edit> needs <command> (view, create, str_replace, insert or "
                        "undo_edit) and <path> (absolute).")
    problem = _type_problem(args)
    return Edit({}, problem) if problem else Edit(args)


def _from_call(text: str) -> Edit | None:
    """The editor command in one `<tool_call>`'s JSON; None if it calls another tool."""
    read = shell.read_call(text)
    if read is None or read[0] not in EDITOR_ALIASES:
        return None
    args = read[1]
    if not isinstance(args, dict):
        return Edit({}, f"The {EDITOR} call's arguments must be a JSON object.")
    if not args.get("command") or not args.get("path"):
        return Edit({}, f"{EDITOR} needs `command` and `path`.")
    args = {k: v for k, v in args.items() if k in TEXT_PARAMS + INT_PARAMS}
    problem = _type_problem(args)
    return Edit({}, problem) if problem else Edit(args)


def _type_problem(args: dict[str, Any]) -> str | None:
    """What is wrong with the parameters' types (a call's JSON may hold anything), or None."""
    for name in TEXT_PARAMS:
        if name in args and not isinstance(args[name], str):
            return f"{name} must be a string, not {type(args[name]).__name__}."
    line = args.get("insert_line")
    if line is not None and (isinstance(line, bool) or not isinstance(line, int)):
        return "insert_line must be an integer."
    rng = args.get("view_range")
    if rng is not None and (not isinstance(rng, list) or len(rng) != 2 or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in rng)):
        return "view_range must be two integers: [first, last]."
    return None


def parse_edit(action: str) -> Edit | None:
    """The turn's editor command, from its first editor tool call or else its first `<edit>`
    block; None when the turn has none (then it is a shell turn: `shell.parse`)."""
    for m in find_all(action, "tool_call"):
        edit = _from_call(m.content.strip())
        if edit is not None:
            return edit
    m = find_tag(action, "edit")
    if m is None or (m.start > 0 and shell.parse(action[:m.start]).commands):
        return None
    return _from_tags(m.content)


def edit_action(arguments: dict[str, Any]) -> str:
    """The text turn of a structured editor call (`skyhub.ToolCall`): a `<tool_call>` whose
    JSON has no `<` or `>` (escaped), so no file content can end it early, and which
    `parse_edit` reads back as exactly these arguments."""
    call = json.dumps({"name": EDITOR, "arguments": arguments}, ensure_ascii=False)
    return "<tool_call>" + call.replace("<", "\\u003c").replace(">", "\\u003e") + "</tool_call>"


def edit_text(arguments: dict[str, Any]) -> str:
    """An editor command in the tag form (what the oracle and the docs show)."""
    parts = []
    for name in TEXT_PARAMS + INT_PARAMS:
        if name not in arguments:
            continue
        value = arguments[name]
        if name in INT_PARAMS:
            value = " ".join(str(v) for v in value) if isinstance(value, list) else str(value)
        elif name in ("file_text", "old_str", "new_str"):
            value = f"\n{value}\n"
        parts.append(f"<{name}>{value}</{name}>")
    return "<edit>\n" + "\n".join(parts) + "\n</edit>"


__all__ = ["EDITOR", "EDITOR_TOOL", "TOOLS", "Edit", "edit_action", "edit_text", "parse_edit"]
