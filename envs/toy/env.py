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

from .base import ToyEnv

__all__ = ["ArithEnv", "LookupEnv"]

ARITH_PROMPT = (
    "Answer the arithmetic question. Think if you like, then give the final integer inside "
    "<answer>...</answer>, for example <answer>12</answer>."
)

LOOKUP_PROMPT = (
    "You are answering a question about a table you cannot see. To read the value stored under "
    "a key, write <lookup>KEY</lookup>; the environment replies with <result>...</result>. "
    "When you know the value, reply with <answer>VALUE</answer>. You have {max_turns} turns."
)


class ArithEnv(ToyEnv):
    """"What is 17 + 25?" -> `<answer>42</answer>`. One turn unless `max_turns` says more."""

    kind = "arith"
    system_prompt = ARITH_PROMPT
    stop_strings = ("</answer>",)

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


class LookupEnv(ToyEnv):
    """The answer is in a hidden table: `<lookup>k123</lookup>` then `<answer>word</answer>`."""

    kind = "lookup"
    stop_strings = ("</lookup>", "</answer>")

    def __init__(self, *, max_turns: int = 3, **kwargs: Any) -> None:
        if max_turns < 2:
            raise UsageError(f"toy-lookup needs max_turns >= 2 (one to look up, one to answer), "
                             f"got {max_turns}")
        super().__init__(max_turns=max_turns, **kwargs)
        self.system_prompt = LOOKUP_PROMPT.format(max_turns=max_turns)
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
