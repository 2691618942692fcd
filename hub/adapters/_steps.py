"""What the OpenEnv, skyrl-gym and Tinker cookbook adapters share: one env step that never
raises for a broken environment, and infos that survive JSON.

skyhub reserves exceptions from `reset`/`step` for infrastructure (a malformed action is an
observation, never an exception), so an adapter that lets one escape would crash the other
framework's whole batch for what is one episode's infra error. `guarded_step` turns such an
exception into the final step of an `infra_error` episode, the way `VectorEnv` does; each
adapter then marks that episode in its framework's own terms.
"""

from __future__ import annotations

import traceback
from typing import Any

from skyhub.chat import infra_error_info, to_messages


def infra_info(env: Any, error: str, tb: str = "") -> dict[str, Any]:
    """The info of a step that ended an episode because the environment, not the agent,
    failed (`skyhub.chat.infra_error_info`, the keys `VectorEnv` reports)."""
    task = getattr(env, "task", None)
    return infra_error_info(error, getattr(task, "id", None),
                            int(getattr(env, "turn", 0) or 0), tb)


def guarded_step(env: Any, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """`env.step(action)`, except that an exception becomes a truncated final step with
    reward 0 and `infra_error=True` (and `error` naming the exception)."""
    try:
        obs, reward, terminated, truncated, info = env.step(action)
    except Exception as e:
        return "", 0.0, False, True, infra_info(env, f"{type(e).__name__}: {e}",
                                                traceback.format_exc())
    return str(obs), float(reward), bool(terminated), bool(truncated), dict(info)


def is_infra_error(info: dict[str, Any]) -> bool:
    return bool(info.get("infra_error"))


def first_messages(env: Any, observation: str) -> list[dict[str, str]]:
    """The conversation an episode starts with: the env's system prompt (when it has one),
    then its first observation as the user's message."""
    return to_messages(getattr(env, "system_prompt", None), observation)
