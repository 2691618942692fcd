"""Harnesses: agent loops that drive a model through `skyhub gateway` and act in a skyhub
env (docs/harnesses.md).

    from skyhub.harness import Endpoint, load_harness, run_episode
    harness = load_harness("mini-swe-agent")
    episode = run_episode(harness, skyhub.make("terminal-synth"), endpoint, seed=0)

`builtin` is skyhub's own loop (the env's protocol, text or native tool calls, one request
per turn); `terminus` plays terminal and harbor envs as Harbor's Terminus-2 does;
`mini-swe-agent` runs the real package, unmodified, in the env's sandbox; `command:<template>`
runs any OpenAI-client program per episode. `skyhub eval --harness` and the trainer's
`rollout.harness` take these names.
"""

from __future__ import annotations

import importlib
from typing import Any

from skyhub.harness.base import Endpoint, Harness, Play, Step, run_episode

#: name -> "module:class" (imported when asked for: each may need its own package)
HARNESSES = {
    "builtin": "skyhub.harness.builtin:Builtin",
    "terminus": "skyhub.harness.terminus:Terminus",
    "mini-swe-agent": "skyhub.harness.mini_swe_agent:MiniSweAgent",
}


def load_harness(spec: str, **kwargs: Any) -> Harness:
    """The harness named `spec` (a key of `HARNESSES`), or `command:<template>` for an
    OpenAI-client program run per episode (`skyhub.harness.command`); `kwargs` go to its
    constructor."""
    from skyhub.errors import UsageError

    if spec.startswith("command:"):
        from skyhub.harness.command import CommandHarness

        return CommandHarness(spec.removeprefix("command:"), **kwargs)
    if spec not in HARNESSES:
        raise UsageError(f"unknown harness {spec!r}: use one of {', '.join(HARNESSES)}, or "
                         "command:'<a program using OPENAI_BASE_URL>'")
    module, cls = HARNESSES[spec].split(":")
    return getattr(importlib.import_module(module), cls)(**kwargs)


__all__ = ["HARNESSES", "Endpoint", "Harness", "Play", "Step", "load_harness", "run_episode"]
