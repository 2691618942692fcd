"""Native tool calls in the search family: `search` and `answer`, played through Search-R1's
tags so that a tool episode gets exactly the text protocol's verdict.

    env = skyhub.make("search-qa", protocol="tools")       # the system prompt describes tools
    env.step(skyhub.ToolCall("c1", "search", {"query": "Elarmor"}))
    env.step(skyhub.ToolCall("c2", "answer", {"answer": "1760"}))

A valid call is one turn: `search` is `<search>QUERY</search>`, `answer` is
`<answer>TEXT</answer>` (scored by exact match as that turn is). A malformed call (unknown
tool, bad JSON, a missing or wrong-typed argument) is an empty turn, as a turn with neither
tag is: it uses a turn and counts in `reward_breakdown["format_errors"]`. The text goes
into the tags as it is, so the tag rules apply to it too (the first `</search>` ends a
query). A result is the observation without its `<information>` tags.
"""

from __future__ import annotations

from typing import Any

from skyhub.tags import extract
from skyhub.tools import ToolCall, function_tool

SEARCH = function_tool(
    "search", "Search the corpus; returns the top passages, each with its title.",
    {"query": {"type": "string", "description": "What to search for."}})
ANSWER = function_tool(
    "answer", "Give the final answer, a few words without explanation. This ends the episode.",
    {"answer": {"type": "string", "description": "The answer, e.g. Beijing."}})

#: Search-R1's prompt (protocol.SYSTEM_PROMPT) with the tools in place of the tags.
TOOLS_SYSTEM_PROMPT = (
    "Answer the given question. Reason first every time you get new information. After "
    "reasoning, if you find you lack some knowledge, you can call the `search` tool with a "
    "query and it will return the top searched results. You can search as many times as you "
    "want within {max_turns} turns (each tool call takes one). If you find no further "
    "external knowledge needed, call the `answer` tool with the answer, without detailed "
    "illustrations. For example, answer with Beijing."
)


def schemas() -> list[dict[str, Any]]:
    """The family's tools (`env.tools`, set in `SearchEnv.__init__`)."""
    return [SEARCH, ANSWER]


class SearchTools:
    """`SearchEnv`'s tool methods (a mixin before `TextEnv`): `tool_action`, `tool_content`,
    `reference_tool_calls`."""

    malformed_tool_action = ""  # an empty turn: neither tag

    def tool_action(self, name: str, arguments: dict[str, Any]) -> str:
        if name == "search":
            return f"<search>{arguments['query']}</search>"
        return f"<answer>{arguments['answer']}</answer>"

    def tool_content(self, name: str, observation: str) -> str:
        if not observation:
            return ("Answer submitted; the episode has ended." if name == "answer"
                    else "The episode has ended (no turns left).")
        return observation.replace("<information>", "").replace("</information>", "")

    def reference_tool_calls(self) -> list[ToolCall] | None:
        """`reference_action` through the tools: a search for the gold passage's title
        first (where turns allow), then the answer."""
        action = self.reference_action()  # type: ignore[attr-defined]
        if action is None:
            return None
        query = extract(action, "search", strip=False)
        if query is not None:
            return [ToolCall(f"call_{self.turn}", "search",  # type: ignore[attr-defined]
                             {"query": query})]
        return [ToolCall(f"call_{self.turn}", "answer",  # type: ignore[attr-defined]
                         {"answer": extract(action, "answer", strip=False) or ""})]
