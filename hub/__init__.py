"""skyhub: a hub of resettable text environments with verifiable rewards, for RL on LLM agents.

    import skyhub
    env = skyhub.make("toy-arith")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("<answer>42</answer>")

`import skyhub` is deliberately light (no gymnasium, numpy, torch, or env family is imported):
names below resolve on first use, and env families load from their entry points when an env
is made or listed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from skyhub import errors
from skyhub import gymnasium_ids as _gymnasium_ids
from skyhub.task import Task, TaskSet

__version__ = "0.1.0"

# public name -> module that defines it (imported on first attribute access)
_LAZY = {
    "TextEnv": "skyhub.env",
    "StepResult": "skyhub.env",
    "EnvSpec": "skyhub.registry",
    "register": "skyhub.registry",
    "spec": "skyhub.registry",
    "list_envs": "skyhub.registry",
    "VectorEnv": "skyhub.vector",
    "make_vec": "skyhub.vector",
    "Episode": "skyhub.chat",
    "to_messages": "skyhub.chat",
    "UnicodeText": "skyhub.spaces",
    "ToolCall": "skyhub.tools",
    "ToolResult": "skyhub.tools",
}
_LAZY_MODULES = {"tags", "tools", "chat", "registry", "vector", "spaces", "env",
                 "sandbox", "envs", "trainer"}

if TYPE_CHECKING:
    from skyhub.chat import Episode, to_messages
    from skyhub.env import StepResult, TextEnv
    from skyhub.registry import EnvSpec, list_envs, register, spec
    from skyhub.spaces import UnicodeText
    from skyhub.tools import ToolCall, ToolResult
    from skyhub.vector import VectorEnv, make_vec


def make(env_id: str, *, remote: str | None = None, token: str | None = None,
         **kwargs: Any) -> TextEnv:
    """Create the env registered as `env_id`; `kwargs` override the registered defaults.

    With `remote="ws://host:port"` the env runs on a `skyhub serve` server instead and this
    returns a `TextEnv` client for it (extra `serve`); `kwargs` go to the server's
    constructor, `token` (default `$SKYHUB_TOKEN`) authenticates. The id need not be
    registered here. (Defined here, above both, so that the registry knows nothing of
    `skyhub.remote`: a local env is `skyhub.spec(env_id).make(**kwargs)`.)
    """
    if remote is not None:
        from skyhub.remote.client import make_remote

        return make_remote(env_id, remote, token=token, **kwargs)
    from skyhub.registry import spec

    return spec(env_id).make(**kwargs)


def _registered_ids() -> list[str]:
    from skyhub.registry import list_envs

    return [s.id for s in list_envs()]


# skyhub's ids in gymnasium's registry (`gymnasium.make("skyhub/toy-lookup")`), without
# importing gymnasium here: see skyhub.gymnasium_ids
_gymnasium_ids.install(make=make, list_ids=_registered_ids)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _LAZY_MODULES:
        return importlib.import_module(f"skyhub.{name}")
    raise AttributeError(f"module 'skyhub' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY, *_LAZY_MODULES])


__all__ = ["EnvSpec", "Episode", "StepResult", "Task", "TaskSet", "TextEnv", "ToolCall",
           "ToolResult", "UnicodeText",
           "VectorEnv", "__version__", "errors", "list_envs", "make", "make_vec", "register",
           "spec", "to_messages"]
