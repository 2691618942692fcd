"""A skyhub env as the Tinker cookbook's RL `Env` / `EnvGroupBuilder` / `RLDataset`, so the
cookbook's RL loop (`tinker_cookbook.rl.train.main`) trains on it, against Tinker or against
`skyhub tinker serve` (the cookbook's `Config(base_url=...)`).

    from skyhub.adapters.tinker_cookbook import SkyhubDatasetBuilder
    from tinker_cookbook.rl import train
    config = train.Config(dataset_builder=SkyhubDatasetBuilder(
                              env_id="toy-lookup", model_name_for_tokenizer=MODEL,
                              renderer_name="role_colon", groups_per_batch=8, group_size=4),
                          model_name=MODEL, renderer_name="role_colon", base_url=URL,
                          rollout_error_tolerance=True, ...)
    asyncio.run(train.main(config))

How it maps (read against tinker-cookbook 0.6.1):
- `SkyhubEnv` is one episode (the cookbook's envs are single-use). Its conversation is the
  env's system prompt (passed through as a `system` message), the first observation as the
  `user` message, then one (assistant, user) pair per turn, rendered by the cookbook's
  renderer for every sampling call; the agent's tokens are parsed back to text with the
  renderer (the raw decoded text when the renderer's end-of-turn is missing: a turn cut at
  an env stop string or at `max_tokens` still reaches the env, which answers any text).
- stop strings: each sampling call stops at the renderer's stop sequences and the env's
  `stop_strings`. Tinker takes a list of strings or of token ids, not both: with a renderer
  whose stops are token ids, those ids go in as their text (a sampler that matches stop
  strings on special tokens' text needs nothing more; `env_stop_strings=False` keeps the
  renderer's own stops only).
- `SkyhubEnvGroupBuilder` makes `group_size` envs on one task (the group GRPO centres
  rewards over); it holds only ids and kwargs, so it pickles for the cookbook's rollout
  executors, and its `cleanup` closes the envs of episodes cut short (a rollout that timed
  out), so no sandbox outlives its group. `SkyhubRLDataset` deals the env's tasks
  (shuffled by `seed`) into batches; `SkyhubDatasetBuilder` is the `chz` config the
  cookbook's `Config.dataset_builder` takes.
- the final step's metrics: `skyhub/success`, `skyhub/turns` and each `reward_breakdown`
  component as `skyhub/reward/<name>`, plus the cookbook's one-hot stop reason
  (`stop/completed` when the task ended, `stop/max_turns` when its budget did); its logs
  carry `task_id` and `outcome`.

Infra errors (`info["infra_error"]`, or an exception from the env's `reset`/`step`, which
skyhub reserves for infrastructure): `step` raises `skyhub.errors.InfraError`, the cookbook's
signal for a failed rollout (a crashed container, a sandbox flake). Its rollout strategies
then retry the episode on a fresh env (`Config(rollout_error_tolerance=True)`, i.e.
`RetryOnFailure`) or drop it from the group (`MinViableGroup`), and count it in the
`rollout_errors` metrics; it is never trained on as a 0. With the cookbook's default for
most models (`FailFast`) the exception stops the run, so set `rollout_error_tolerance`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyhub.adapters._lazy import lazy_names

if TYPE_CHECKING:
    from skyhub.adapters._tinker_cookbook import (
        SkyhubDatasetBuilder,
        SkyhubEnv,
        SkyhubEnvGroupBuilder,
        SkyhubRLDataset,
        register_local_tokenizer,
        stop_condition,
    )

__all__ = ["SkyhubDatasetBuilder", "SkyhubEnv", "SkyhubEnvGroupBuilder", "SkyhubRLDataset",
           "register_local_tokenizer", "stop_condition"]


# the names above, loaded (with the framework) on first use
__getattr__, __dir__ = lazy_names(__name__, "skyhub.adapters._tinker_cookbook", __all__)
