"""The implementation of `skyhub.adapters.skyrl_gym` (whose docstring says how it maps onto
the framework). It imports the framework at once: the public module loads it on first use."""

from __future__ import annotations

from typing import Any

try:
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError as e:  # pragma: no cover - exercised only without the extra
    from skyhub.errors import MissingDependency

    raise MissingDependency(f"skyhub.adapters.skyrl_gym needs skyrl-gym ({e.name} is "
                            "missing): pip install 'skyhub[skyrl-gym]'") from e

import skyhub
from skyhub.adapters._steps import first_messages, guarded_step, is_infra_error
from skyhub.errors import InfraError, UsageError
from skyhub.json_safe import jsonable

__all__ = ["SkyhubTextEnv", "dataset_rows", "generator_stop", "register", "skyrl_id"]

ON_INFRA_ERROR = ("end", "raise")


def skyrl_id(env_id: str) -> str:
    """The skyrl-gym id `register` gives a skyhub env id: `skyhub-<env_id>`."""
    return f"skyhub-{env_id}"


def _pick(extras: dict[str, Any], key: str) -> Any:
    """A row's `key`, at the top level or in `extra_info` (where SkyRL datasets keep it)."""
    if extras.get(key) is not None:
        return extras[key]
    info = extras.get("extra_info")
    return info.get(key) if isinstance(info, dict) else None


class SkyhubTextEnv(BaseTextEnv):
    """One episode of a skyhub env behind skyrl-gym's `init`/`step`/`close`.

    `env_config` and `extras` are what SkyRL's generator passes; `env_id`, `env_kwargs` and
    `on_infra_error` come from `register`. The env is made here (SkyRL makes one per
    trajectory) and reset in `init`.
    """

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None, *,
                 env_id: str, env_kwargs: dict[str, Any] | None = None,
                 on_infra_error: str = "end") -> None:
        super().__init__()
        if on_infra_error not in ON_INFRA_ERROR:
            raise UsageError(f"on_infra_error must be one of {', '.join(ON_INFRA_ERROR)}, "
                             f"not {on_infra_error!r}")
        self.env_id, self.on_infra_error = env_id, on_infra_error
        self.extras = dict(extras or {})
        config = dict(env_config or {})  # a DictConfig section of skyrl_gym's config
        self.env = skyhub.make(env_id, **{**(env_kwargs or {}), **config})
        self.max_turns = self.env.max_turns or 1 << 30
        #: the strings SkyRL should stop sampling at (`generator.sampling_params.stop`)
        self.stop_strings: list[str] = list(getattr(self.env, "stop_strings", ()) or ())
        self.chat_history: list[dict[str, str]] = []
        self.info: dict[str, Any] = {}
        self.total_reward = 0.0
        self.done = False

    def init(self, prompt: list[dict[str, str]] | None = None,
             ) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Reset the env on the row's task (`task_id`, else `seed`) and return its system
        prompt and first observation as the chat to generate from."""
        task_id, seed = _pick(self.extras, "task_id"), _pick(self.extras, "seed")
        options = {"task_id": str(task_id)} if task_id is not None else None
        obs, info = self.env.reset(seed=None if seed is None else int(seed), options=options)
        self.turns, self.total_reward, self.done = 0, 0.0, False
        self.info = dict(info)
        self.chat_history = first_messages(self.env, obs)
        return [dict(m) for m in self.chat_history], jsonable(self.info)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if self.done:
            raise UsageError("step() after the episode ended: SkyRL makes a new env per "
                             "trajectory; call init() again to play another episode")
        self.turns += 1
        obs, reward, terminated, truncated, info = guarded_step(self.env, action)
        self.info = info
        self.chat_history.append({"role": "assistant", "content": action})
        if is_infra_error(info):
            self.done = True
            if self.on_infra_error == "raise":
                self.env.close()  # the generator will not get to close() this episode
                why = info.get("error", "see the env log")
                raise InfraError(f"{self.env_id}: infra error in task {info.get('task_id')!r} "
                                 f"at turn {info.get('turn')}: {why} (the episode is not the "
                                 "agent's fault; skip it)")
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True,
                                         metadata=jsonable(info), postprocessed_action=None)
        self.total_reward += reward
        self.done = terminated or truncated
        new = [] if self.done or not obs else [{"role": "user", "content": obs}]
        self.chat_history += new
        return BaseTextEnvStepOutput(observations=new, reward=reward, done=self.done,
                                     metadata=jsonable(info), postprocessed_action=None)

    def get_metrics(self) -> dict[str, Any]:
        """Per-episode numbers SkyRL averages per env class: `infra_error`, `success`,
        `turns`, and the final step's `reward_breakdown` components."""
        out: dict[str, Any] = {"infra_error": float(is_infra_error(self.info)),
                               "success": float(self.info.get("outcome") == "success"),
                               "turns": float(self.turns)}
        for name, value in (self.info.get("reward_breakdown") or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[f"reward/{name}"] = float(value)
        return out

    def close(self) -> None:
        self.env.close()


def register(env_id: str, *, name: str | None = None, on_infra_error: str = "end",
             **env_kwargs: Any) -> str:
    """Register skyhub's `env_id` in skyrl-gym's registry (as `name`, default
    `skyhub-<env_id>`) and return that id, the dataset's `env_class`. `env_kwargs` go to
    `skyhub.make` (a `skyrl_gym.<id>` config section adds to them). Registering again
    replaces the earlier registration."""
    skyhub.spec(env_id)  # EnvNotFound now, with suggestions, rather than at the first make
    if on_infra_error not in ON_INFRA_ERROR:
        raise UsageError(f"on_infra_error must be one of {', '.join(ON_INFRA_ERROR)}, "
                         f"not {on_infra_error!r}")
    sid = name or skyrl_id(env_id)
    if sid in skyrl_gym.registry:
        skyrl_gym.envs.registration.deregister(sid)
    # by name, so the spec stays JSON (skyrl-gym's `EnvSpec.to_json`)
    skyrl_gym.register(id=sid, entry_point="skyhub.adapters.skyrl_gym:SkyhubTextEnv",
                       kwargs={"env_id": env_id, "env_kwargs": dict(env_kwargs),
                               "on_infra_error": on_infra_error})
    return sid


def generator_stop(env_id: str, **env_kwargs: Any) -> list[str]:
    """The env's stop strings, for SkyRL's `generator.sampling_params.stop`."""
    with skyhub.make(env_id, **env_kwargs) as env:
        return list(getattr(env, "stop_strings", ()) or ())


def dataset_rows(env_id: str, *, n: int | None = None, env_class: str | None = None,
                 data_source: str = "skyhub", **env_kwargs: Any) -> list[dict[str, Any]]:
    """Rows in SkyRL's dataset layout (`prompt`, `env_class`, `reward_spec`, `extra_info`),
    one per task of the env (the first `n`), ready for a parquet file: each row's
    `extra_info.task_id` tells `init` which task to play; the prompt is the env's own start
    of the conversation (which `init` returns again)."""
    rows = []
    with skyhub.make(env_id, **env_kwargs) as env:
        tasks = list(env.tasks)[:n] if n is not None else list(env.tasks)
        for task in tasks:
            obs, _ = env.reset(options={"task_id": task.id})
            rows.append({"data_source": data_source, "prompt": first_messages(env, obs),
                         "env_class": env_class or skyrl_id(env_id),
                         "reward_spec": {"method": "rule", "ground_truth": None},
                         "extra_info": {"task_id": task.id}})
    return rows
