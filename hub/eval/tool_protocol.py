"""Which protocol an eval run plays, "tools" (native tool calls) or "text", and its envs.

`skyhub eval --tools/--no-tools` (`harness.run(..., tools=...)`): with neither, a run plays
tools where the env declares them (`env.tools`) and the agent speaks them
(`Agent.speaks_tools`: model agents such as `openai:`; the oracle and random agents play the
text protocol unless asked). With tools, the envs are made with `protocol="tools"` where
the family takes that kwarg (read from its constructor, or tried and dropped when the env
refuses it), so their system prompt describes the tools; the agent gets the schemas
(`Agent.use_tools`), and an agent that cannot use them (an endpoint that rejects `tools`)
turns the run back to text before it starts, with the envs made again without the kwarg.
A `protocol=` the user passed is kept as given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from skyhub.chat import Message
from skyhub.errors import UsageError
from skyhub.eval.agent import Agent


def takes_protocol(env_id: str, env_kwargs: dict[str, Any]) -> bool | None:
    """Whether `env_id`'s constructor takes `protocol=`; None when its kwargs cannot be
    known (a `**kwargs` that cannot be followed, an env that is not registered here)."""
    try:
        from skyhub.env_kwargs import accepted_kwargs
        from skyhub.registry import spec

        accepted, complete = accepted_kwargs(spec(env_id), env_kwargs)
    except Exception:
        return None
    if "protocol" in accepted:
        return True
    return False if complete else None


def open_envs(env_id: str, env_kwargs: dict[str, Any], agent: Agent, tools: bool | None,
              make: Callable[[dict[str, Any]], Any]) -> tuple[Any, dict[str, Any], str]:
    """`(envs, the kwargs they were made with, "tools" or "text")`: `make(kwargs)` makes the
    envs (a VectorEnv); the rules are the module docstring's. `tools=True` on an env without
    tools is a `UsageError`."""
    if not (agent.speaks_tools if tools is None else tools):
        return make(env_kwargs), env_kwargs, "text"
    kwargs, added = dict(env_kwargs), False
    if "protocol" not in kwargs and takes_protocol(env_id, kwargs) is not False:
        kwargs["protocol"], added = "tools", True
    try:
        envs = make(kwargs)
    except Exception as e:  # a family whose kwargs could not be read refused it
        if not added or "protocol" not in str(e):
            raise
        kwargs, added = dict(env_kwargs), False
        envs = make(kwargs)
    try:
        schemas = envs.get_attr("tools", env_ids=[0])[0]
        if schemas and agent.use_tools([dict(t) for t in schemas]):
            return envs, kwargs, "tools"
        if not schemas and tools:
            raise UsageError(f"--tools: {env_id} declares no tools (env.tools is None), so "
                             "its agents answer in its text protocol: run without --tools")
    except BaseException:
        envs.close()
        raise
    if not added:
        return envs, kwargs, "text"
    envs.close()
    return make(env_kwargs), env_kwargs, "text"


def wire_messages(messages: list[Message], tools: bool) -> list[Message]:
    """The conversation as a chat-completions request carries it. With tools: assistant
    messages keep their `tool_calls`, tool results are `{"role": "tool", "tool_call_id",
    "content"}` (the `name` some records keep is left out: OpenAI's schema has none).
    Without (a server that rejected tools): calls and results become text, so the request is
    one any server takes."""
    out: list[Message] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            out.append({"role": "tool", "tool_call_id": m.get("tool_call_id", ""),
                        "content": m.get("content", "")} if tools else
                       {"role": "user", "content": f"[{m.get('name') or 'tool'} result] "
                                                   f"{m.get('content', '')}"})
        elif role == "assistant" and m.get("tool_calls"):
            if tools:
                out.append({"role": "assistant", "content": m.get("content") or "",
                            "tool_calls": m["tool_calls"]})
            else:
                calls = "\n".join(f"{c.get('function', {}).get('name')}"
                                  f"({c.get('function', {}).get('arguments')})"
                                  for c in m["tool_calls"] if isinstance(c, dict))
                out.append({"role": "assistant",
                            "content": "\n".join(p for p in (m.get("content"), calls) if p)})
        else:
            out.append(m)
    return out


__all__ = ["open_envs", "takes_protocol", "wire_messages"]
