"""Agents that `skyhub eval` (and your own loops) can run against an env.

An agent maps the conversation so far to its next action. Built-ins:
- `oracle`: the env's reference action (gold SQL, solution script...), an upper bound that
  checks the env and its reward end to end;
- `nop`: does nothing (empty turns until the env ends the episode), the lower bound of a
  task with a verifier: a task that rewards it is broken;
- `random`: a seeded choice among plausible protocol snippets and garbage, a lower bound
  that exercises the env's handling of malformed actions;
- `script:module:function`: any Python callable `function(messages) -> str`.
"""

from __future__ import annotations

import abc
import importlib
import random
from collections.abc import Callable
from typing import Any

from skyhub.chat import Message

ReferenceFn = Callable[[], "str | None"]


class Agent(abc.ABC):
    """Base class: `act(messages, reference)` returns the next action.

    `reference` returns the env's reference action for the current state (may be None);
    only the oracle uses it.
    """

    name = "agent"

    @abc.abstractmethod
    def act(self, messages: list[Message], reference: ReferenceFn) -> str: ...

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class OracleAgent(Agent):
    name = "oracle"

    def act(self, messages: list[Message], reference: ReferenceFn) -> str:
        return reference() or ""


class NopAgent(Agent):
    name = "nop"

    def act(self, messages: list[Message], reference: ReferenceFn) -> str:
        return ""


class RandomAgent(Agent):
    """Plausible-looking actions chosen at random: tags with random content, empty actions,
    unclosed tags and free text."""

    name = "random"
    _SNIPPETS = ("<answer>{w}</answer>", "<lookup>{w}</lookup>", "<sql>SELECT {w}</sql>",
                 "<answer>{n}</answer>", "<lookup>k{n}</lookup>", "", "I think it is {w}.",
                 "<answer>{w}", "<solution>{n}</solution>")
    _WORDS = ("amber", "birch", "cobalt", "delta", "ember", "fjord", "0", "1", "42", "yes", "no")

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def act(self, messages: list[Message], reference: ReferenceFn) -> str:
        s = self.rng.choice(self._SNIPPETS)
        return s.format(w=self.rng.choice(self._WORDS), n=self.rng.randint(-50, 2500))


class ScriptAgent(Agent):
    """Wraps a callable `fn(messages) -> str`."""

    def __init__(self, fn: Callable[[list[Message]], str], name: str = "script") -> None:
        self.fn, self.name = fn, name

    def act(self, messages: list[Message], reference: ReferenceFn) -> str:
        out = self.fn(messages)
        return out if isinstance(out, str) else str(out)


def load_agent(spec: str, *, seed: int = 0) -> Agent:
    """An agent from its command-line name: `oracle`, `nop`, `random`,
    `script:module:function`."""
    if spec == "oracle":
        return OracleAgent()
    if spec == "random":
        return RandomAgent(seed)
    if spec == "nop":
        return NopAgent()
    if spec.startswith("script:"):
        target = spec[len("script:"):]
        mod_name, _, attr = target.rpartition(":")
        if not mod_name or not attr:
            raise ValueError(f"agent {spec!r}: write script:module:function, e.g. "
                             "script:my_agents:always_42")
        try:
            fn: Any = getattr(importlib.import_module(mod_name), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"agent {spec!r}: cannot load {target} ({e}). The module must be "
                             "importable from the current directory or PYTHONPATH.") from None
        if not callable(fn):
            raise ValueError(f"agent {spec!r}: {target} is not callable")
        return ScriptAgent(fn, name=spec)
    raise ValueError(f"unknown agent {spec!r}: use oracle, nop, random or script:module:function "
                     "(model-backed agents arrive with `skyhub eval`'s full harness)")
