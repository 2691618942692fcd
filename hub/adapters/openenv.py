"""A skyhub env served over OpenEnv's protocol, so OpenEnv clients (and the trainers that
speak it, such as TRL's and SkyRL's OpenEnv integrations) play it.

    from skyhub.adapters.openenv import OpenEnvServer, SkyhubAction, SkyhubEnvClient
    with OpenEnvServer("toy-lookup") as server:                # or: serve("toy-lookup", port=8000)
        with SkyhubEnvClient(base_url=server.url).sync() as env:
            result = env.reset(seed=0)                         # result.observation.messages
            result = env.step(SkyhubAction(text="<lookup>k1</lookup>"))

How it maps (read against openenv-core 0.3): `SkyhubEnvironment` is an OpenEnv
`Environment` whose `reset`/`step` are the skyhub env's, and `create_app` is OpenEnv's own
`create_app` over it, so the routes, the WebSocket session protocol (`/ws`: one env per
connection, in its own thread), `/schema`, `/health` and `/metadata` are OpenEnv's. Use the
WebSocket client (`SkyhubEnvClient`, an OpenEnv `EnvClient`): OpenEnv's HTTP `/reset` and
`/step` make a fresh env per request, so an episode of more than one step needs a session.

- `reset(seed=..., task_id=...)` picks the task (OpenEnv's `episode_id` is recorded in the
  state); any other reset argument is refused, so a client cannot choose env kwargs (files,
  data dirs): those are the operator's, given to `create_app`/`serve`.
- `SkyhubObservation.text` is the env's observation; `messages` is what to append to the
  conversation: on reset the system prompt (passed through as a `system` message) and the
  first observation, then one `user` message per non-empty observation. `stop_strings`
  (every observation) are the env's, for the client's sampler. `info` is the step's skyhub
  info (JSON-safe); `task_id`, `turn`, `outcome`, `terminated`, `truncated` are copied out.

Infra errors (`info["infra_error"]`, an exception from the env's `step`, or `InfraError` /
`SandboxUnavailable` from its `reset`): the observation ends the episode (`done=True`, reward
0.0) with `infra_error=True` and `outcome="error"`, a field of the observation itself (OpenEnv
drops an observation's `metadata` on the wire). A trainer drops such an episode, or masks
it, by that field instead of scoring it 0.

No authentication exists in OpenEnv's protocol: `serve` binds to loopback unless told
`public=True` (then put it behind something that authenticates).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyhub.adapters._lazy import lazy_names

if TYPE_CHECKING:
    from skyhub.adapters._openenv import (
        OpenEnvServer,
        SkyhubAction,
        SkyhubEnvClient,
        SkyhubEnvironment,
        SkyhubObservation,
        SkyhubState,
        create_app,
        serve,
    )

__all__ = ["OpenEnvServer", "SkyhubAction", "SkyhubEnvClient", "SkyhubEnvironment",
           "SkyhubObservation", "SkyhubState", "create_app", "serve"]


# the names above, loaded (with the framework) on first use
__getattr__, __dir__ = lazy_names(__name__, "skyhub.adapters._openenv", __all__)
