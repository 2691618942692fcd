"""`RecallEnv` (`toy-recall`): a training fixture, the smallest task a randomly initialised
model can learn by RL on a CPU in minutes (the trainer's tiny-cpu recipe and learning tests).

The whole reply is one bare word (no tags: a model that starts from random weights could never
stumble on a tag format, so there would be no reward to learn from).

- `hops=1`: "word: raven" -> `raven`.
- `hops=2`: the prompt names a key ("key: lima"); the word is only in the environment. The
  first reply names a key and the env answers "lima = raven"; the next reply is the word. A
  reply that is not a key of the table is taken as the answer, so guessing is allowed (and is
  what chance means here: one word in `n_words`, 18 by default).
- `hops=2, name_key=False`: any first reply reads the prompt's key ("lima = raven"), so the
  act is trivial and the skill is reading the env's reply: the two-turn task a random model
  can learn in minutes (with `name_key=True` it must first discover, by chance, that naming
  the key pays, while guessing a word already scores 1 / n_words).
"""

from __future__ import annotations

from typing import Any

from skyhub.env import StepResult
from skyhub.errors import UsageError
from skyhub.tools import ToolCall, function_tool

from .base import ToyEnv

RECALL_PROMPTS = {
    1: "Reply with the word you are shown, and nothing else.",
    2: ("A table maps keys to words. Reply with a key to read its word, then reply with that "
        "word, and nothing else."),
    "ask": ("A table maps keys to words. Reply with anything to read the word under your key, "
            "then reply with that word, and nothing else."),
}


REPLY_TOOL = function_tool("reply", "Reply with one word.",
                           {"word": {"type": "string", "description": "The word."}})


class RecallEnv(ToyEnv):
    """One bare word per reply; with `hops=2` the word is only in the env's reply. With
    `protocol="tools"` each reply is a call of the `reply` tool (`{"word": ...}`)."""

    kind = "recall"
    fork_state = (*ToyEnv.fork_state, "_read")

    def __init__(self, *, hops: int = 1, max_turns: int | None = None, n_words: int = 18,
                 name_key: bool = True, **kwargs: Any) -> None:
        if hops not in (1, 2):
            raise UsageError(f"hops must be 1 or 2, got {hops}")
        if kwargs.get("split") == "dev" and n_words != 18:
            raise UsageError("the bundled dev split uses all 18 words; generate tasks "
                             "(split='train', seed=...) to use fewer")
        options = {"n_words": n_words} if kwargs.get("split", "train") == "train" else {}
        super().__init__(max_turns=hops if max_turns is None else max_turns, **options,
                         **kwargs)
        self.hops, self.name_key = hops, name_key
        self.tools = [REPLY_TOOL]
        self.system_prompt = RECALL_PROMPTS[hops if name_key or hops == 1 else "ask"]
        if self.protocol == "tools":
            self.system_prompt = self.system_prompt.replace(
                "Reply with", "Call the `reply` tool with").replace(
                "reply with", "call it with").replace(", and nothing else", "")
        if hops == 2:  # the same tasks carry a key and a table; only the prompt changes
            self.tasks = type(self.tasks)([
                type(t)(id=t.id, prompt=f"key: {t.meta['key']}", answer=t.answer, meta=t.meta)
                for t in self.tasks], name=self.tasks.name)
        self._read: str | None = None

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self._read = None
        return super().reset(seed=seed, options=options)

    def step(self, action: str) -> StepResult:
        assert self.task is not None, "call reset() before step()"
        self.next_turn()
        words = action.split()
        if self.hops == 2 and not self.name_key and self.turn == 1:
            words = [self.task.meta["key"]]  # any first reply, even empty, asks for the key
        if not words:
            return self.malformed("Empty reply: reply with one word.")
        word = words[0].lower()
        table: dict[str, str] = self.task.meta["table"]
        if self.hops == 2 and word in table and not self.out_of_turns:
            self._read = word
            return (f"{word} = {table[word]} {self.turns_left_note()}", 0.0, False, False,
                    self.make_info(looked_up=word))
        return self.finish(word)

    def reference_action(self) -> str | None:
        if self.task is None:
            return None
        if self.hops == 2 and self._read != self.task.meta["key"]:
            return self.task.meta["key"]
        return str(self.task.answer)

    def tool_action(self, name: str, arguments: dict[str, Any]) -> str:
        return str(arguments["word"])

    def reference_tool_calls(self) -> list[ToolCall] | None:
        word = self.reference_action()
        return None if word is None else [ToolCall(f"call_{self.turn}", "reply", {"word": word})]
