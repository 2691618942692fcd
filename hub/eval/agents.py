"""Agents that `skyhub eval` (and your own loops) can run against an env.

An agent maps the conversation so far to its next action. Built-ins:
- `oracle`: the env's reference action (gold SQL, solution script...), an upper bound that
  checks the env and its reward end to end; with tools (`--tools`), the env's
  `reference_tool_calls()` as structured calls;
- `nop`: does nothing (empty turns until the env ends the episode), the lower bound of a
  task with a verifier: a task that rewards it is broken;
- `random`: the env's `sample_action()`, seeded (protocol-shaped where the env says so, its
  action space otherwise), a lower bound that exercises the env's handling of bad actions;
  with tools, a random tool caller (`skyhub.eval.random_tools`);
- `script:module:function`: any Python callable `function(messages) -> str`;
- `openai:MODEL`: a model behind an OpenAI-compatible chat endpoint (`skyhub.eval.openai_agent`);
- `hf:PATH` and any other `PREFIX:...`: agents that packages register under the entry-point
  group `skyhub.agents` (the trainer registers `hf`, a local transformers model), so that core
  never imports them.

`act` returns the action text, or a `Reply` when the agent knows what the call cost in
tokens. An agent whose model fails for good raises `skyhub.errors.AgentError`: the harness
records that episode as an infra error. An agent with `parallel = True` is called from
several threads at once (one per running episode), which is what a network or model-backed
agent needs to keep `--concurrency` requests in flight.
"""

from __future__ import annotations

import difflib
import importlib
import random
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from skyhub.chat import Message
from skyhub.errors import UsageError
from skyhub.eval.agent import Agent, ReferenceFn, Reply


class OracleAgent(Agent):
    """The env's reference action; in a run that plays tools, its `reference_tool_calls()`
    (the harness's `reference.tool_calls()`), or the reference text where the env has no
    calls for this state."""

    name = "oracle"

    def __init__(self) -> None:
        self.tools = False

    def use_tools(self, tools: list[dict[str, Any]]) -> bool:
        self.tools = True
        return True

    def act(self, messages: list[Message], reference: ReferenceFn) -> Any:
        tool_calls = getattr(reference, "tool_calls", None)
        if self.tools and tool_calls is not None:
            calls = tool_calls()
            if calls:
                return list(calls)
        return reference() or ""


class NopAgent(Agent):
    name = "nop"

    def act(self, messages: list[Message], reference: ReferenceFn) -> str:
        return ""


class RandomAgent(Agent):
    """Random actions from the env's own `sample_action()` (`TextEnv.sample_action`: the
    env's action space unless the env draws protocol-shaped actions), seeded by this agent's
    seed. Outside the harness (a `reference` without `sample_action`), from `UnicodeText`."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed, self.rng = seed, random.Random(seed)
        self.tools: list[dict[str, Any]] | None = None

    def settings(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def use_tools(self, tools: list[dict[str, Any]]) -> bool:
        self.tools = list(tools)
        return True

    def act(self, messages: list[Message], reference: ReferenceFn) -> Any:
        seed = self.rng.randrange(2**31)
        turn_rng = random.Random(seed)
        if self.tools is not None and turn_rng.random() >= 0.15:  # else a text turn
            from skyhub.eval.random_tools import random_tool_turn

            return random_tool_turn(self.tools, turn_rng)
        sample = getattr(reference, "sample_action", None)
        if sample is not None:
            return sample(seed)
        from skyhub.spaces import UnicodeText

        return UnicodeText(seed=seed).sample()


class ScriptAgent(Agent):
    """Wraps a callable `fn(messages) -> str` (or `Reply`). It runs in one thread per running
    episode (a script that calls a model should not serialise the run), so it must be
    thread-safe; pass `parallel=False` for one that is not."""

    def __init__(self, fn: Callable[[list[Message]], Any], name: str = "script",
                 parallel: bool = True) -> None:
        self.fn, self.name, self.parallel = fn, name, parallel

    def act(self, messages: list[Message], reference: ReferenceFn) -> str | Reply:
        out = self.fn(messages)
        return out if isinstance(out, str | Reply) else str(out)


AGENT_HELP = ("oracle, nop, random, script:module:function, openai:MODEL (an OpenAI-compatible "
              "server; --base-url), hf:PATH (a local transformers model; extra 'train')")


def load_agent(spec: str, *, seed: int = 0, **options: Any) -> Agent:
    """An agent from its command-line name (see `AGENT_HELP`).

    `options` go to model-backed agents (`openai:`, `hf:` and plugins): `base_url`,
    `api_key`, `temperature`, `max_tokens`, `timeout`, `max_retries`...; None values are
    dropped so that a plugin's own defaults apply.
    """
    options = {k: v for k, v in options.items() if v is not None}
    if spec == "oracle":
        return OracleAgent()
    if spec == "random":
        return RandomAgent(seed)
    if spec == "nop":
        return NopAgent()
    prefix, sep, target = spec.partition(":")
    plugins = {ep.name: ep for ep in entry_points(group="skyhub.agents")}
    if not sep or not target:
        raise UsageError(f"unknown agent {spec!r}{_did_you_mean(spec, plugins)}: use "
                         f"{AGENT_HELP}")
    if prefix == "script":
        return _script_agent(spec, target)
    if prefix == "openai":
        from skyhub.eval.openai_agent import OpenAIAgent

        return OpenAIAgent(target, seed=seed, **options)
    if prefix not in plugins:
        raise UsageError(f"unknown agent kind {prefix!r} in {spec!r}"
                         f"{_did_you_mean(spec, plugins)}: use {AGENT_HELP}"
                         + (f"; plugins: {', '.join(sorted(plugins))}" if plugins else ""))
    factory = plugins[prefix].load()
    agent = factory(target, seed=seed, **options)
    if not isinstance(agent, Agent):
        raise UsageError(f"agent plugin {prefix!r} returned {type(agent).__name__}, not an Agent")
    return agent


def _did_you_mean(spec: str, plugins: dict[str, Any]) -> str:
    """`; did you mean 'oracle'?` for a mistyped agent (`orcale`, `opnai:gpt-4o`), else ''."""
    prefix, sep, target = spec.partition(":")
    if sep and target:  # the kind is wrong: suggest a kind, keeping the rest
        kinds = ["script", "openai", *plugins]
        close = difflib.get_close_matches(prefix, kinds, n=1, cutoff=0.6)
        return f"; did you mean {close[0]}:{target}?" if close else ""
    names = ["oracle", "nop", "random", *(f"{k}:" for k in ("script", "openai", *plugins))]
    close = difflib.get_close_matches(spec.rstrip(":"), [n.rstrip(":") for n in names], n=1,
                                      cutoff=0.6)
    if not close:
        return ""
    return f"; did you mean {close[0]!r}?" if close[0] in names else \
        f"; did you mean {close[0]}:...?"


def _script_agent(spec: str, target: str) -> Agent:
    mod_name, _, attr = target.rpartition(":")
    if not mod_name or not attr:
        raise UsageError(f"agent {spec!r}: write script:module:function, e.g. "
                         "script:my_agents:always_42")
    try:
        fn: Any = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise UsageError(f"agent {spec!r}: cannot load {target} ({e}). The module must be "
                         "importable from the current directory or PYTHONPATH.") from None
    if not callable(fn):
        raise UsageError(f"agent {spec!r}: {target} is not callable")
    return ScriptAgent(fn, name=spec)
