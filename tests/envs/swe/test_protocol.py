"""The swe agent's editor commands, read from tags and from tool calls: what is read is
exactly what was meant, a structured call reads back unchanged whatever its text holds, and
a malformed one is a message for the agent, never an exception."""

from __future__ import annotations

import pytest

from skyhub.envs.swe.protocol import EDITOR, edit_action, edit_text, parse_edit

TRICKY = ["plain", "", "  leading and trailing  ", "\n\nnewlines around\n\n",
          "holds </tool_call> and </new_str> and <done/>", "tab\there", "ünïcödé ✓",
          '{"json": "inside"}', "back\\slash \\u003c"]


def test_tags_are_read_with_their_layout_newlines_removed() -> None:
    edit = parse_edit("I will fix it.\n<edit>\n<command>str_replace</command>\n"
                      "<path>/testbed/a.py</path>\n<old_str>\n    return a - b\n</old_str>\n"
                      "<new_str>\n    return a + b\n</new_str>\n</edit>")
    assert edit is not None and edit.error is None
    assert edit.arguments == {"command": "str_replace", "path": "/testbed/a.py",
                              "old_str": "    return a - b", "new_str": "    return a + b"}
    edit = parse_edit("<edit><command>view</command><path>/testbed</path>"
                      "<view_range>3 9</view_range></edit>")
    assert edit is not None and edit.arguments["view_range"] == [3, 9]
    edit = parse_edit("<edit><command>insert</command><path>/x</path>"
                      "<insert_line>[4]</insert_line><new_str>y</new_str></edit>")
    assert edit is not None and edit.arguments["insert_line"] == 4


@pytest.mark.parametrize("text", TRICKY)
def test_a_structured_call_reads_back_exactly(text: str) -> None:
    args = {"command": "create", "path": "/testbed/x.py", "file_text": text}
    assert parse_edit(edit_action(args)) is not None
    assert parse_edit(edit_action(args)).arguments == args  # type: ignore[union-attr]
    args = {"command": "str_replace", "path": "/testbed/x.py", "old_str": text,
            "new_str": text + "!"}
    assert parse_edit(edit_action(args)).arguments == args  # type: ignore[union-attr]


def test_the_tag_form_reads_back_for_ordinary_text() -> None:
    args = {"command": "str_replace", "path": "/testbed/x.py", "old_str": "a\n  b",
            "new_str": "\nc\n"}
    assert parse_edit(edit_text(args)).arguments == args  # type: ignore[union-attr]


@pytest.mark.parametrize("action", [
    "<edit><command>view</command></edit>",
    "<edit><path>/x</path></edit>",
    "<edit><command>view</command><path>/x</path><view_range>a b</view_range></edit>",
    '<edit><command>view</command><path>/x</path><view_range>["a", 2]</view_range></edit>',
    "<edit><command>view</command><path>/x</path><view_range>[1.5, 2]</view_range></edit>",
    f'<tool_call>{{"name": "{EDITOR}", "arguments": "not json"}}</tool_call>',
    f'<tool_call>{{"name": "{EDITOR}", "arguments": {{"path": "/x"}}}}</tool_call>',
    f'<tool_call>{{"name": "{EDITOR}", "arguments": [1, 2]}}</tool_call>',
    f'<tool_call>{{"name": "{EDITOR}", "arguments": {{"command": "str_replace", "path": "/x", '
    f'"old_str": 5, "new_str": "y"}}}}</tool_call>',
    f'<tool_call>{{"name": "{EDITOR}", "arguments": {{"command": "insert", "path": "/x", '
    f'"insert_line": "3", "new_str": "y"}}}}</tool_call>',
    f'<tool_call>{{"name": "{EDITOR}", "arguments": {{"command": "view", "path": "/x", '
    f'"view_range": [1, true]}}}}</tool_call>',
    f'<tool_call>{{"name": "{EDITOR}", "arguments": {{"command": ["view"], "path": "/x"}}}}'
    '</tool_call>',
])
def test_malformed_commands_are_messages(action: str) -> None:
    edit = parse_edit(action)
    assert edit is not None and edit.error and not edit.arguments


@pytest.mark.parametrize("action", [
    "<bash>ls</bash>", "<done/>", "no tags at all", "",
    '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>',
    '<tool_call>{"function": "not an object"}</tool_call>',
    "<bash>cat notes.txt</bash> and later <edit><command>view</command><path>/x</path></edit>",
])
def test_turns_without_an_editor_command_are_shell_turns(action: str) -> None:
    assert parse_edit(action) is None
