"""The toy envs' episodes: `ArithEnv` (one question) and `LookupEnv` (look up, then answer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skyhub.env import TextEnv
from skyhub.protocol import extract, first_of

from .tasks import load_tasks

ARITH_PROMPT = (
    "Answer the arithmetic question. Think if you like, then give the final integer inside "
    "<answer>...</answer>, for example <answer>12</answer>."
)

RECALL_PROMPTS = {
    1: "Reply with the word you are shown, and nothing else.",
    2: ("A table maps keys to words. Reply with a key to read its word, then reply with that "
        "word, and nothing else."),
    "ask": ("A table maps keys to words. Reply with anything to read the word under your key, "
            "then reply with that word, and nothing else."),
}

LOOKUP_PROMPT = (
    "You are answering a question about a table you cannot see. To read the value stored under "
    "a key, write <lookup>KEY</lookup>; the environment replies with <result>...</result>. "
    "When you know the value, reply with <answer>VALUE</answer>. You have {max_turns} turns."
)


def _normalise(s: str) -> str:
    return " ".join(s.strip().lower().split())


class _ToyEnv(TextEnv):
    """What both toy envs share: task loading, turn limit, the final answer's scoring."""

    kind = ""

    def __init__(self, *, max_turns: int = 1, split: str = "train", n_tasks: int = 1000,
                 seed: int = 0, tasks_file: str | Path | None = None,
                 **task_options: int) -> None:
        super().__init__()
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.max_turns = max_turns
        self.tasks = load_tasks(self.kind, split=split, tasks_file=tasks_file, n=n_tasks,
                                seed=seed, **task_options)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task = self.start_episode(seed, options)
        self._format_errors = 0
        return task.prompt, self.make_info()

    def _finish(self, answer: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None
        correct = _normalise(answer) == _normalise(str(self.task.answer))
        info = self.make_info("success" if correct else "failure",
                              reward_breakdown={"correct": float(correct),
                                                "format_errors": float(self._format_errors)},
                              answer=answer)
        return "", float(correct), True, False, info

    def _malformed(self, message: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """A turn the protocol cannot use: explain, or end as a failure if no turn is left.

        Running out of turns is a truncation (a time limit), except in a one-turn episode,
        where the single action *is* the answer attempt and a malformed one terminates it.
        """
        self._format_errors += 1
        if self.turn >= self.max_turns:
            info = self.make_info("failure", reward_breakdown={
                "correct": 0.0, "format_errors": float(self._format_errors)}, error=message)
            single = self.max_turns == 1
            return "", 0.0, single, not single, info
        left = self.max_turns - self.turn
        return (f"{message} ({left} turn{'s' if left != 1 else ''} left)", 0.0, False, False,
                self.make_info(error=message))


class ArithEnv(_ToyEnv):
    """"What is 17 + 25?" -> `<answer>42</answer>`. One turn unless `max_turns` says more."""

    kind = "arith"
    system_prompt = ARITH_PROMPT
    stop_strings = ("</answer>",)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        answer = extract(action, "answer")
        if answer is None:
            return self._malformed("No <answer>...</answer> found; put the final integer inside "
                                   "<answer></answer>.")
        return self._finish(answer)

    def reference_action(self) -> str | None:
        return None if self.task is None else f"<answer>{self.task.answer}</answer>"


class LookupEnv(_ToyEnv):
    """The answer is in a hidden table: `<lookup>k123</lookup>` then `<answer>word</answer>`."""

    kind = "lookup"
    stop_strings = ("</lookup>", "</answer>")

    def __init__(self, *, max_turns: int = 3, **kwargs: Any) -> None:
        if max_turns < 2:
            raise ValueError(f"toy-lookup needs max_turns >= 2 (one to look up, one to answer), "
                             f"got {max_turns}")
        super().__init__(max_turns=max_turns, **kwargs)
        self.system_prompt = LOOKUP_PROMPT.format(max_turns=max_turns)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        self._looked_up: set[str] = set()
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None, "call reset() before step()"
        self.turn += 1
        m = first_of(action, ("lookup", "answer"))
        if m is None:
            return self._malformed("No <lookup>KEY</lookup> or <answer>VALUE</answer> found.")
        if m.tag == "answer":
            return self._finish(m.content)
        key = m.content.strip()
        table: dict[str, str] = self.task.meta["table"]
        value = table.get(key)
        self._looked_up.add(key)
        reply = (f"<result>{value}</result>" if value is not None else
                 f"<result>no such key: {key[:80]!r}</result>")
        if self.turn >= self.max_turns:
            info = self.make_info("failure", reward_breakdown={
                "correct": 0.0, "format_errors": float(self._format_errors)})
            return "", 0.0, False, True, info
        left = self.max_turns - self.turn
        return f"{reply} ({left} turn{'s' if left != 1 else ''} left)", 0.0, False, False, \
            self.make_info(looked_up=key)

    def reference_action(self) -> str | None:
        if self.task is None:
            return None
        key = self.task.meta["key"]
        if key not in getattr(self, "_looked_up", set()):
            return f"<lookup>{key}</lookup>"
        return f"<answer>{self.task.answer}</answer>"


class RecallEnv(_ToyEnv):
    """The smallest task a randomly initialised model can learn by RL on a CPU in minutes.

    The whole reply is one bare word (no tags: a model that starts from random weights could
    never stumble on a tag format, so there would be no reward to learn from).

    - `hops=1`: "word: raven" -> `raven`.
    - `hops=2`: the prompt names a key ("key: lima"); the word is only in the environment. The
      first reply names a key and the env answers "lima = raven"; the next reply is the word. A
      reply that is not a key of the table is taken as the answer, so guessing is allowed (and
      is what chance means here: one word in `n_words`, 18 by default).
    - `hops=2, name_key=False`: any first reply reads the prompt's key ("lima = raven"), so
      the act is trivial and the skill is reading the env's reply: the two-turn task a random
      model can learn in minutes (with `name_key=True` it must first discover, by chance, that
      naming the key pays, while guessing a word already scores 1 / n_words).
    """

    kind = "recall"

    def __init__(self, *, hops: int = 1, max_turns: int | None = None, n_words: int = 18,
                 name_key: bool = True, **kwargs: Any) -> None:
        if hops not in (1, 2):
            raise ValueError(f"hops must be 1 or 2, got {hops}")
        if kwargs.get("split") == "dev" and n_words != 18:
            raise ValueError("the bundled dev split uses all 18 words; generate tasks "
                             "(split='train', seed=...) to use fewer")
        options = {"n_words": n_words} if kwargs.get("split", "train") == "train" else {}
        super().__init__(max_turns=hops if max_turns is None else max_turns, **options,
                         **kwargs)
        self.hops, self.name_key = hops, name_key
        self.system_prompt = RECALL_PROMPTS[hops if name_key or hops == 1 else "ask"]
        if hops == 2:  # the same tasks carry a key and a table; only the prompt changes
            self.tasks = type(self.tasks)([
                type(t)(id=t.id, prompt=f"key: {t.meta['key']}", answer=t.answer, meta=t.meta)
                for t in self.tasks], name=self.tasks.name)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        self._read: str | None = None
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None, "call reset() before step()"
        self.turn += 1
        words = action.split()
        if self.hops == 2 and not self.name_key and self.turn == 1:
            words = [self.task.meta["key"]]  # any first reply, even empty, asks for the key
        if not words:
            return self._malformed("Empty reply: reply with one word.")
        word = words[0].lower()
        table: dict[str, str] = self.task.meta["table"]
        if self.hops == 2 and word in table and self.turn < self.max_turns:
            self._read = word
            left = self.max_turns - self.turn
            return (f"{word} = {table[word]} ({left} turn{'s' if left != 1 else ''} left)",
                    0.0, False, False, self.make_info(looked_up=word))
        return self._finish(word)

    def reference_action(self) -> str | None:
        if self.task is None:
            return None
        if self.hops == 2 and self._read != self.task.meta["key"]:
            return self.task.meta["key"]
        return str(self.task.answer)
