"""Native tool calls in the SQL family: `execute_sql` and `submit_solution`, played through
SkyRL-SQL's tags so that a tool episode gets exactly the text protocol's verdict.

    env = skyhub.make("sql-spider", protocol="tools")      # the system prompt describes tools
    env.step(skyhub.ToolCall("c1", "execute_sql", {"query": "SELECT count(*) FROM singer"}))
    env.step(skyhub.ToolCall("c2", "submit_solution", {"query": "SELECT count(*) FROM singer"}))

Each valid call is one turn of the episode's rules (`skyrl-train` or `skyrl-eval`):
`execute_sql` is the turn `<think></think>\\n<sql>QUERY</sql>`, `submit_solution` the turn
`<think></think>\\n<solution>QUERY</solution>`. The empty think block is what makes a call a
well-formed turn under SkyRL-SQL's format rules (a think block, a think after every
observation): a tool caller has no tags to get wrong, so its calls pass the rules that a
tag episode with the same queries and a think block per turn passes, and the reward,
`reward_breakdown` and outcome are the tag episode's (tests/envs/sql/test_sql_tools.py plays
both on the bundled Spider dev tasks). A malformed call (unknown tool, bad JSON, a missing or
wrong-typed `query`) is an empty turn, as a tag turn with no tags is: it uses a turn and,
after an observation, breaks the format (-1 under `reward="skyrl"`). The query text goes
into the tags as it is, so the tag rules apply to it too (`<sql>`'s first `</sql>` ends the
query; under skyrl-train a query holding both `<solution>` and `</solution>` ends the
episode, as skyrl-gym reads such a turn).

Results: the observation without its `<observation>` frame, with the reminder naming the
`submit_solution` tool instead of the `<solution>` tag.
"""

from __future__ import annotations

from typing import Any

from skyhub.env import PROTOCOLS as PROMPTS
from skyhub.env import check_protocol
from skyhub.errors import UsageError
from skyhub.tools import ToolCall, function_tool

from . import protocol as proto

#: The episode rules, SkyRL-SQL's: skyrl-gym's training episode, its evaluation loop.
RULES = ("skyrl-train", "skyrl-eval")

EXECUTE_SQL = function_tool(
    "execute_sql",
    "Run one SQL query on the database and see its result as a table (the first rows).",
    {"query": {"type": "string", "description": "The SQL query to run."}})
SUBMIT_SOLUTION = function_tool(
    "submit_solution",
    "Submit the final SQL query that answers the question. This ends the episode; the "
    "query's result is compared with the correct one.",
    {"query": {"type": "string", "description": "The final SQL query."}})

#: skyhub's system prompt (protocol.SYSTEM_PROMPT) with the tools in place of the tags.
TOOLS_SYSTEM_PROMPT = proto.SYSTEM_PROMPT.split("Format:\n", 1)[0] + """\
Tools:
- To explore or verify, call `execute_sql` with one query. Its result comes back as a table \
(at most {max_rows} rows). Then think again and refine.
- When no more exploration is needed, or at the last turn, call `submit_solution` with the \
final SQL query. This ends the episode.
- Each tool call takes one turn. Think in plain text before each call."""

TOOLS_BUDGET = "You have {n} turns (each tool call takes one)."


def schemas() -> list[dict[str, Any]]:
    """The family's tools (`env.tools`, set in `SQLEnv.__init__`)."""
    return [EXECUTE_SQL, SUBMIT_SOLUTION]


def split_protocol(protocol: str) -> tuple[str, str]:
    """(the episode rules, what the system prompt describes: "tags" or "tools") of the SQL
    family's `protocol=`: `skyrl-train` and `skyrl-eval` (tags), `tags` (skyrl-train's) and
    `tools` (skyrl-train's rules, a prompt describing the tools)."""
    if protocol in RULES:
        return protocol, "tags"
    if protocol in PROMPTS:
        return "skyrl-train", check_protocol(protocol)
    raise UsageError(f"protocol must be one of {', '.join((*RULES, *PROMPTS))}, got "
                     f"{protocol!r}: 'skyrl-train' (default) is skyrl-gym's episode and "
                     "reward, 'skyrl-eval' SkyRL-SQL's evaluation, 'tools' skyrl-train's "
                     "episode with a prompt that describes the execute_sql and submit_solution "
                     "tools ('tags' is skyrl-train)")


def tool_turn(name: str, arguments: dict[str, Any]) -> str:
    """The SkyRL-SQL turn a valid call is played as."""
    tag = "sql" if name == "execute_sql" else "solution"
    return f"<think></think>\n<{tag}>{arguments['query']}</{tag}>"


_TAG_WORDS = (
    ("the <sql> block is empty", "the query is empty: pass the SQL to run in `query`"),
    ("in <solution>...</solution>", "with the `submit_solution` tool"),
)


def tool_result(name: str, observation: str) -> str:
    """A call's result from its turn's observation: the `<observation>` frame removed, the
    tags the text names replaced by the tools."""
    if not observation:
        return ("Solution submitted; the episode has ended." if name == "submit_solution"
                else "The episode has ended (no turns left).")
    text = observation
    if text.startswith("<observation>") and text.endswith("</observation>"):
        text = text[len("<observation>"):-len("</observation>")].strip("\n")
    for tag_words, tool_words in _TAG_WORDS:
        text = text.replace(tag_words, tool_words)
    return text


class SQLTools:
    """`SQLEnv`'s tool methods (a mixin before `TextEnv`): `tool_action`, `tool_content`,
    `reference_tool_calls`."""

    malformed_tool_action = ""  # an empty turn, as a tag turn with no tags

    def tool_action(self, name: str, arguments: dict[str, Any]) -> str:
        return tool_turn(name, arguments)

    def tool_content(self, name: str, observation: str) -> str:
        return tool_result(name, observation)

    def reference_tool_calls(self) -> list[ToolCall] | None:
        """`reference_action` through the tools: the text oracle submits at once (the gold
        query, or the gold rows as a literal table), so this submits the same query."""
        action = self.reference_action()  # type: ignore[attr-defined]
        query = None if action is None else proto.last_solution(action)
        if query is None:
            return None
        return [ToolCall("call_submit", "submit_solution", {"query": query})]
