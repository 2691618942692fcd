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
    "make": "skyhub.registry",
    "spec": "skyhub.registry",
    "list_envs": "skyhub.registry",
    "VectorEnv": "skyhub.vector",
    "make_vec": "skyhub.vector",
    "Episode": "skyhub.chat",
    "to_messages": "skyhub.chat",
    "UnicodeText": "skyhub.spaces",
}
_LAZY_MODULES = {"tags", "protocol", "chat", "registry", "vector", "spaces", "checks", "env",
                 "sandbox", "envs", "trainer"}

if TYPE_CHECKING:
    from skyhub.chat import Episode, to_messages
    from skyhub.env import StepResult, TextEnv
    from skyhub.registry import EnvSpec, list_envs, make, register, spec
    from skyhub.spaces import UnicodeText
    from skyhub.vector import VectorEnv, make_vec


# skyhub's ids in gymnasium's registry (`gymnasium.make("skyhub/toy-lookup")`), without
# importing gymnasium here: see skyhub.gymnasium_ids
_gymnasium_ids.install()


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


__all__ = ["EnvSpec", "Episode", "StepResult", "Task", "TaskSet", "TextEnv", "UnicodeText",
           "VectorEnv", "__version__", "errors", "list_envs", "make", "make_vec", "register",
           "spec", "to_messages"]
