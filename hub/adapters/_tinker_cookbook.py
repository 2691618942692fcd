"""The implementation of `skyhub.adapters.tinker_cookbook` (whose docstring says how it maps onto
the framework). It imports the framework at once: the public module loads it on first use."""

from __future__ import annotations

import asyncio
import functools
import os
import random
from collections.abc import Sequence
from typing import Any

try:
    import chz
    import tinker
    from tinker_cookbook.renderers import Renderer, get_renderer
    from tinker_cookbook.renderers.base import get_text_content
    from tinker_cookbook.rl.types import (
        STOP_METRIC_PREFIX,
        Action,
        ActionExtra,
        Env,
        EnvGroupBuilder,
        Observation,
        RLDataset,
        RLDatasetBuilder,
        StepResult,
        StopCondition,
        StopReason,
    )
    from tinker_cookbook.tokenizer_utils import get_tokenizer, register_tokenizer
except ImportError as e:  # pragma: no cover - exercised only without the extra
    from skyhub.errors import MissingDependency

    raise MissingDependency(f"skyhub.adapters.tinker_cookbook needs tinker-cookbook ({e.name} "
                            "is missing): pip install 'skyhub[tinker-cookbook]'") from e

import skyhub
from skyhub.adapters._steps import first_messages, guarded_step, is_infra_error
from skyhub.errors import InfraError, SandboxUnavailable, UsageError

__all__ = ["SkyhubDatasetBuilder", "SkyhubEnv", "SkyhubEnvGroupBuilder", "SkyhubRLDataset",
           "register_local_tokenizer", "stop_condition"]


def register_local_tokenizer(model_name: str, path: str | None = None) -> str:
    """Make the cookbook's `get_tokenizer(model_name)` load the tokenizer in `path` (default:
    `model_name/tokenizer` when that exists, where skyhub's tiny model keeps it, else
    `model_name`) instead of looking `model_name` up on the Hugging Face hub: for a model
    that `skyhub tinker serve` serves from a local directory or as `tiny`. Returns the path."""
    if path is None:
        sub = os.path.join(model_name, "tokenizer")
        path = sub if os.path.isfile(os.path.join(sub, "tokenizer.json")) else model_name
    if not os.path.isdir(path):
        raise UsageError(f"no tokenizer directory at {path!r}: pass the directory that holds "
                         "the served model's tokenizer.json")

    @functools.cache  # the cookbook asks for it per group of envs
    def load() -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)

    register_tokenizer(model_name, load)
    return path


def stop_condition(renderer: Renderer, env_stops: Sequence[str]) -> StopCondition:
    """The renderer's stop sequences plus the env's stop strings, as one list Tinker takes
    (all strings when they must be mixed: see the module docstring)."""
    base = list(renderer.get_stop_sequences())
    extra = [s for s in env_stops if s]
    if not extra:
        return base
    if all(isinstance(s, str) for s in base):
        return [*base, *(s for s in extra if s not in base)]
    as_text = [renderer.tokenizer.decode([int(s)]) if isinstance(s, int) else s for s in base]
    return [*as_text, *(s for s in extra if s not in as_text)]


def _infra(env_id: str, info: dict[str, Any]) -> InfraError:
    return InfraError(f"{env_id}: infra error in task {info.get('task_id')!r} at turn "
                      f"{info.get('turn')}: {info.get('error', 'see the env log')} (not the "
                      "agent's fault: the cookbook's rollout_error_tolerance retries or drops "
                      "the episode)")


class SkyhubEnv(Env):
    """One episode of `env_id` on `task_id` (else a choice drawn with `seed`), played
    through `renderer`. Env calls run in a worker thread so the cookbook's event loop, which
    runs a whole batch of rollouts, never waits on one env."""

    def __init__(self, env_id: str, renderer: Renderer, *, task_id: str | None = None,
                 seed: int | None = None, env_kwargs: dict[str, Any] | None = None,
                 env_stop_strings: bool = True) -> None:
        self.env_id, self.renderer = env_id, renderer
        self.task_id, self.seed = task_id, seed
        self.env_kwargs = dict(env_kwargs or {})
        self.env_stop_strings = env_stop_strings
        self.env: Any = None
        self.messages: list[dict[str, str]] = []
        self.stop: StopCondition = list(renderer.get_stop_sequences())
        #: read by the cookbook when it stores trajectories
        self.example_id: str | None = task_id

    def _start(self) -> tuple[str, dict[str, Any]]:
        self.env = skyhub.make(self.env_id, **self.env_kwargs)
        options = {"task_id": self.task_id} if self.task_id is not None else None
        return self.env.reset(seed=self.seed, options=options)

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        try:
            obs, info = await asyncio.to_thread(self._start)
        except (InfraError, SandboxUnavailable) as e:
            await self.close()
            raise _infra(self.env_id, {"task_id": self.task_id, "turn": 0,
                                       "error": f"{type(e).__name__}: {e}"}) from e
        if is_infra_error(info):
            await self.close()
            raise _infra(self.env_id, info)
        self.example_id = info.get("task_id", self.task_id)
        stops = getattr(self.env, "stop_strings", ()) if self.env_stop_strings else ()
        self.stop = stop_condition(self.renderer, list(stops or ()))
        self.messages = first_messages(self.env, obs)
        return self.renderer.build_generation_prompt(self.messages), self.stop

    def _text(self, action: Action) -> str:
        message, termination = self.renderer.parse_response(action)
        if termination.is_clean:
            return get_text_content(message)
        return str(self.renderer.tokenizer.decode(action))  # cut short: the text as sampled

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        if self.env is None:
            raise UsageError("step() with no episode running (before initial_observation(), "
                             "or after the episode ended): a cookbook Env plays one episode")
        text = self._text(action)
        obs, reward, terminated, truncated, info = await asyncio.to_thread(
            guarded_step, self.env, text)
        if is_infra_error(info):
            await self.close()
            raise _infra(self.env_id, info)
        self.messages.append({"role": "assistant", "content": text})
        if not (terminated or truncated):
            self.messages.append({"role": "user", "content": obs})
            return StepResult(reward=reward, episode_done=False,
                              next_observation=self.renderer.build_generation_prompt(
                                  self.messages),
                              next_stop_condition=self.stop, logs={"observation": obs[:200]})
        await self.close()
        return StepResult(reward=reward, episode_done=True,
                          next_observation=tinker.ModelInput.empty(),
                          next_stop_condition=self.stop, metrics=self._final_metrics(
                              info, terminated),
                          logs={"task_id": str(info.get("task_id")),
                                "outcome": str(info.get("outcome"))})

    def _final_metrics(self, info: dict[str, Any], terminated: bool) -> dict[str, float]:
        reason = StopReason.COMPLETED if terminated else StopReason.MAX_TURNS
        metrics = {"skyhub/success": float(info.get("outcome") == "success"),
                   "skyhub/turns": float(info.get("turn", 0) or 0),
                   f"{STOP_METRIC_PREFIX}{reason}": 1.0}
        for name, value in (info.get("reward_breakdown") or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                metrics[f"skyhub/reward/{name}"] = float(value)
        return metrics

    async def close(self) -> None:
        """Close the skyhub env (idempotent); the episode's end does it, and so does its
        group's `cleanup` for an episode cut short."""
        if self.env is not None:
            env, self.env = self.env, None
            await asyncio.to_thread(env.close)


class SkyhubEnvGroupBuilder(EnvGroupBuilder):
    """`group_size` episodes of one task. Holds ids and kwargs only (picklable); the
    renderer and the envs are made in `make_envs`."""

    def __init__(self, env_id: str, *, task_id: str | None, group_size: int,
                 model_name_for_tokenizer: str, renderer_name: str,
                 env_kwargs: dict[str, Any] | None = None, seed: int | None = None,
                 env_stop_strings: bool = True) -> None:
        if group_size < 1:
            raise UsageError(f"group_size must be >= 1, got {group_size}")
        self.env_id, self.task_id, self.group_size = env_id, task_id, group_size
        self.model_name_for_tokenizer, self.renderer_name = model_name_for_tokenizer, renderer_name
        self.env_kwargs, self.seed = dict(env_kwargs or {}), seed
        self.env_stop_strings = env_stop_strings

    async def make_envs(self) -> Sequence[Env]:
        renderer = get_renderer(self.renderer_name, get_tokenizer(self.model_name_for_tokenizer))
        envs = [SkyhubEnv(self.env_id, renderer, task_id=self.task_id, seed=self.seed,
                          env_kwargs=self.env_kwargs, env_stop_strings=self.env_stop_strings)
                for _ in range(self.group_size)]
        self._made = [*getattr(self, "_made", []), *envs]  # a retry makes a fresh group
        return envs

    async def cleanup(self) -> None:
        """Close the envs of episodes that did not finish (a rollout cancelled or timed out
        mid-episode): their sandboxes must not outlive the group."""
        made, self._made = getattr(self, "_made", []), []
        for env in made:
            await env.close()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_made"}

    def logging_tags(self) -> list[str]:
        return ["skyhub", self.env_id]


class SkyhubRLDataset(RLDataset):
    """The env's tasks, shuffled by `seed`, `groups_per_batch` groups (one task each) per
    batch; `n_batches` caps the number of batches (default: as many as the tasks fill)."""

    def __init__(self, env_id: str, *, model_name_for_tokenizer: str, renderer_name: str,
                 groups_per_batch: int, group_size: int, n_batches: int | None = None,
                 env_kwargs: dict[str, Any] | None = None, seed: int = 0,
                 env_stop_strings: bool = True) -> None:
        if groups_per_batch < 1:
            raise UsageError(f"groups_per_batch must be >= 1, got {groups_per_batch}")
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        with skyhub.make(env_id, **self.env_kwargs) as env:
            task_ids = [t.id for t in env.tasks]
        if not task_ids:
            raise UsageError(f"{env_id} has no tasks to train on (check its env kwargs)")
        random.Random(seed).shuffle(task_ids)
        self.task_ids, self.groups_per_batch = task_ids, groups_per_batch
        full = len(task_ids) // groups_per_batch
        if full == 0:
            raise UsageError(f"{env_id} has {len(task_ids)} tasks, fewer than groups_per_batch"
                             f"={groups_per_batch}: lower groups_per_batch")
        self.n_batches = full if n_batches is None else min(int(n_batches), full)
        self._builder_kwargs = {"group_size": group_size, "renderer_name": renderer_name,
                                "model_name_for_tokenizer": model_name_for_tokenizer,
                                "env_kwargs": self.env_kwargs,
                                "env_stop_strings": env_stop_strings}

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not 0 <= index < self.n_batches:
            raise IndexError(f"batch {index} of {self.n_batches}")
        start = index * self.groups_per_batch
        return [SkyhubEnvGroupBuilder(self.env_id, task_id=tid, **self._builder_kwargs)
                for tid in self.task_ids[start:start + self.groups_per_batch]]

    def __len__(self) -> int:
        return self.n_batches


@chz.chz
class SkyhubDatasetBuilder(RLDatasetBuilder):
    """The cookbook config for training on `env_id` (`Config.dataset_builder`): batches of
    `groups_per_batch` tasks, `group_size` episodes each. `test_env_kwargs` (e.g.
    `{"split": "dev"}`) adds a test set, one episode per task, for the loop's evaluations."""

    env_id: str
    model_name_for_tokenizer: str
    renderer_name: str
    groups_per_batch: int = 8
    group_size: int = 4
    n_batches: int | None = None
    env_kwargs: dict[str, Any] = chz.field(default_factory=dict)
    test_env_kwargs: dict[str, Any] | None = None
    seed: int = 0
    env_stop_strings: bool = True

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        common = {"model_name_for_tokenizer": self.model_name_for_tokenizer,
                  "renderer_name": self.renderer_name, "seed": self.seed,
                  "env_stop_strings": self.env_stop_strings}
        train = await asyncio.to_thread(
            SkyhubRLDataset, self.env_id, groups_per_batch=self.groups_per_batch,
            group_size=self.group_size, n_batches=self.n_batches, env_kwargs=self.env_kwargs,
            **common)
        test = None
        if self.test_env_kwargs is not None:
            test = await asyncio.to_thread(
                SkyhubRLDataset, self.env_id, groups_per_batch=1, group_size=1,
                env_kwargs={**self.env_kwargs, **self.test_env_kwargs}, **common)
        return train, test
