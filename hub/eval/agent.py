"""The agent contract: `Agent` (`act(messages, reference)` -> the next action) and `Reply`.

An action is text (the env's text protocol), or a tool turn: a `Reply` with `tool_calls`, an
OpenAI assistant message (its dict, with `tool_calls`), a `skyhub.ToolCall` or a list of them.
The harness sends it to `env.step` as it is (an env with `tools` plays the calls:
`skyhub.tools.play_tool_turn`) and records it; the next `messages` then hold the assistant's
`tool_calls` and one `role: "tool"` message per call. An agent plays tools in a run only
after `use_tools` (the run's `--tools` decision: `skyhub.eval.harness.run`).

What every agent implements, below the agents that implement it: the built-ins and
`load_agent` (`skyhub.eval.agents`), the OpenAI agent (`skyhub.eval.openai_agent`), the
trainer's local model (`skyhub.trainer.hf_agent`), and the harness that drives them.
"""

from __future__ import annotations

import abc
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skyhub.chat import Message
from skyhub.tools import ToolCall

#: What `act` gets to ask the env: called, the env's reference action for the current state
#: (the oracle's); in the harness it also has `sample_action(seed) -> str` (the random agent's).
ReferenceFn = Callable[[], "str | None"]


@dataclass
class Reply:
    """An action and, when the agent knows it, the tokens the call used."""

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: The tool calls of the reply (an OpenAI response's `tool_calls`), None for a text reply.
    tool_calls: list[ToolCall] | None = None


class Agent(abc.ABC):
    """Base class: `act(messages, reference)` returns the next action.

    `reference` returns the env's reference action for the current state (may be None);
    only the oracle uses it.
    """

    name = "agent"
    parallel = False  # True: safe (and worth it) to call from one thread per running episode
    #: Where `notice` lines go (`skyhub eval` prints them above its progress bar); None: stderr.
    on_notice: Callable[[str], None] | None = None

    #: Whether a run plays tools with this agent by default (`--tools` unset): True for
    #: model agents built for function calling (`openai:`), False for agents that play the
    #: text protocol unless asked (`oracle`, `random`, scripts).
    speaks_tools = False
    #: Set by an agent whose endpoint rejected `tools` mid-run (it went on in text): the
    #: run's reports then say "text".
    tools_rejected = False

    @abc.abstractmethod
    def act(self, messages: list[Message], reference: ReferenceFn) -> Any: ...

    def use_tools(self, tools: list[dict[str, Any]]) -> bool:
        """The env's tools (OpenAI function schemas), given before the first `act` of a run
        that plays tools. Returns False when the agent cannot (its endpoint rejects `tools`):
        the run then uses the text protocol. Default: True (an agent that returns text is
        still understood by an env with tools)."""
        return True

    def settings(self) -> dict[str, Any]:
        """What, besides its name, changes this agent's results (sampling, endpoint, the
        weights' path and hash): recorded in run.json, and `--resume` refuses a change."""
        return {}

    def use_stop_strings(self, stop: tuple[str, ...]) -> None:
        """The env's stop strings (`</sql>`, `</answer>`...), given before the first `act`.
        A model agent ends its turn there, as the trainer's rollout does, and keeps the stop
        string in its action (the env parses `<sql>...</sql>`). Others ignore them."""
        return None

    def sampling(self) -> str | None:
        """How a model agent samples (temperature, max tokens, stop) in one line, and where
        each setting came from; `skyhub eval` prints it with the summary. None: not a model."""
        return None

    def notice(self, line: str) -> None:
        """Tell the user something as it happens (a failed attempt and its retry): to
        `on_notice` when set, else a line on stderr. Called from the agent's threads."""
        if self.on_notice is not None:
            self.on_notice(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        """Release what the agent holds (a model, a connection pool); idempotent."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


__all__ = ["Agent", "ReferenceFn", "Reply"]
