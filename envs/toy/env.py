"""The toy envs a new family copies: `ArithEnv` (one turn) and `LookupEnv` (several).

`ArithEnv` is the smallest single-turn env: a question, one `<answer>`, a reward. `LookupEnv`
is the smallest multi-turn, tool-using one: the answer is only in the environment, so the
agent looks it up (`<lookup>`), reads the `<result>`, then answers. Both keep the turn budget
with `TextEnv`'s helpers (`next_turn`, `out_of_turns`, `turns_left_note`); `ToyEnv` (base.py)
loads their tasks and scores the answer. `RecallEnv` (recall.py) is a training fixture.
"""

from __future__ import annotations

from typing import Any

from skyhub.env import StepResult
from skyhub.errors import UsageError
from skyhub.tags import extract, first_of
from skyhub.tools import ToolCall, function_tool

from .base import ToyEnv

__all__ = ["ArithEnv", "LookupEnv"]

ARITH_PROMPT = (
    "Answer the arithmetic question. Think if you like, then give the final integer inside "
    "<answer>...</answer>, for example <answer>12</answer>."
)

ARITH_TOOLS_PROMPT = (
    "Answer the arithmetic question. Think if you like, then call the `answer` tool with the "
    "final integer."
)

ANSWER_TOOL = function_tool("answer", "Give your final answer; this ends the episode.",
                            {"value": {"type": "string", "description": "The answer."}})
LOOKUP_TOOL = function_tool("lookup", "Read the value stored under a key of the hidden table.",
                            {"key": {"type": "string", "description": "The key, e.g. k123."}})

LOOKUP_TOOLS_PROMPT = (
    "You are answering a question about a table you cannot see. Call the `lookup` tool with a "
    "key to read the value stored under it. When you know the value, call the `answer` tool "
    "with it. You have {max_turns} turns (one per tool call)."
)

LOOKUP_PROMPT = (
    "You are answering a question about a table you cannot see. To read the value stored under "
    "a key, write <lookup>KEY</lookup>; the environment replies with <result>...</result>. "
    "When you know the value, reply with <answer>VALUE</answer>. You have {max_turns} turns."
)


class ArithEnv(ToyEnv):
    """"What is 17 + 25?" -> `<answer>42</answer>`. One turn unless `max_turns` says more."""

    kind = "arith"
    stop_strings = ("</answer>",)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tools = [ANSWER_TOOL]
        self.system_prompt = ARITH_TOOLS_PROMPT if self.protocol == "tools" else ARITH_PROMPT

    def step(self, action: str) -> StepResult:
        assert self.task is not None, "call reset() before step()"
        self.next_turn()
        answer = extract(action, "answer")
        if answer is None:
            return self.malformed("No <answer>...</answer> found; put the final integer inside "
                                  "<answer></answer>.")
        return self.finish(answer)

    def reference_action(self) -> str | None:
        return None if self.task is None else f"<answer>{self.task.answer}</answer>"

    def tool_action(self, name: str, arguments: dict[str, Any]) -> str:
        return f"<answer>{arguments['value']}</answer>"

    def reference_tool_calls(self) -> list[ToolCall] | None:
        if self.task is None:
            return None
        return [ToolCall("call_answer", "answer", {"value": str(self.task.answer)})]


class LookupEnv(ToyEnv):
    """The answer is in a hidden table: `<lookup>k123</lookup>` then `<answer>word</answer>`."""

    kind = "lookup"
    fork_state = (*ToyEnv.fork_state, "_looked_up")
    stop_strings = ("</lookup>", "</answer>")

    def __init__(self, *, max_turns: int = 3, **kwargs: Any) -> None:
        if max_turns < 2:
            raise UsageError(f"toy-lookup needs max_turns >= 2 (one to look up, one to answer), "
                             f"got {max_turns}")
        super().__init__(max_turns=max_turns, **kwargs)
        self.tools = [LOOKUP_TOOL, ANSWER_TOOL]
        prompt = LOOKUP_TOOLS_PROMPT if self.protocol == "tools" else LOOKUP_PROMPT
        self.system_prompt = prompt.format(max_turns=max_turns)
        self._looked_up: set[str] = set()

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self._looked_up = set()
        return super().reset(seed=seed, options=options)

    def step(self, action: str) -> StepResult:
        assert self.task is not None, "call reset() before step()"
        self.next_turn()
        m = first_of(action, ("lookup", "answer"))
        if m is None:
            return self.malformed("No <lookup>KEY</lookup> or <answer>VALUE</answer> found.")
        if m.tag == "answer":
            return self.finish(m.content)
        key = m.content.strip()
        value = self.task.meta["table"].get(key)
        self._looked_up.add(key)
        if self.out_of_turns:  # a lookup on the last turn: no answer came in time
            return self.out_of_turns_step(reward_breakdown=self.breakdown(0.0))
        reply = f"<result>{value}</result>" if value is not None else \
            f"<result>no such key: {key[:80]!r}</result>"
        return f"{reply} {self.turns_left_note()}", 0.0, False, False, \
            self.make_info(looked_up=key)

    def reference_action(self) -> str | None:
        if self.task is None:
            return None
        key = self.task.meta["key"]
        if key not in self._looked_up:
            return f"<lookup>{key}</lookup>"
        return f"<answer>{self.task.answer}</answer>"

    def tool_action(self, name: str, arguments: dict[str, Any]) -> str:
        tag = "lookup" if name == "lookup" else "answer"
        return f"<{tag}>{arguments['key' if tag == 'lookup' else 'value']}</{tag}>"

    def tool_content(self, name: str, observation: str) -> str:
        return observation.replace("<result>", "").replace("</result>", "")

    def reference_tool_calls(self) -> list[ToolCall] | None:
        if self.task is None:
            return None
        key = self.task.meta["key"]
        if key not in self._looked_up:
            return [ToolCall(f"call_{self.turn}", "lookup", {"key": key})]
        return [ToolCall(f"call_{self.turn}", "answer", {"value": str(self.task.answer)})]
