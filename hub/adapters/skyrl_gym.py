"""A skyhub env as a skyrl-gym `BaseTextEnv`, so SkyRL's generator trains on it.

    from skyhub.adapters.skyrl_gym import register
    register("toy-lookup")                      # skyrl-gym id "skyhub-toy-lookup"
    env = skyrl_gym.make("skyhub-toy-lookup", env_config={}, extras={"task_id": "lookup-0-1"})

How SkyRL uses it (read against skyrl-gym 0.4 and skyrl-train's `SkyRLGymGenerator`): per
trajectory the generator calls `skyrl_gym.make(env_class, env_config=cfg.skyrl_gym.<env_class>,
extras=<the dataset row's extra columns>)`, then `env.init(prompt)` for the first chat history,
then `env.step(text)` until `done`, then `get_metrics()` and `close()`. So:

- call `register` in the process that runs the generator (SkyRL's examples register their
  envs in the Ray entrypoint); the dataset's `env_class` column is the id it returns, and a
  row says which task to play with `task_id` (or `seed`), at the top level or inside
  `extra_info`; `dataset_rows` writes such rows. Without either, a seeded choice from the
  env's task set is played.
- `init` returns the env's own conversation: its system prompt (passed through as the
  `system` message) and first observation; the prompt in the dataset only stands in for it.
- each observation comes back as one `user` message, as skyrl-gym's own envs do; the final
  step's is empty (`[]`) and its `metadata` is the skyhub info (JSON-safe).
- stop strings: SkyRL takes them from `generator.sampling_params.stop`, not from the env, so
  set that to the env's `stop_strings` (`BaseTextEnv.stop_strings` here, or
  `generator_stop(env_id)`), with `generator.append_eos_token_after_stop_str_in_multi_turn`.
- the env's own turn budget ends the episode; the generator's `extras["max_turns"]` is not
  passed on (give `max_turns` in `register`'s kwargs to change the budget).

Infra errors (`info["infra_error"]`, or an exception from the env's `step`, which skyhub
reserves for infrastructure): skyrl-gym's step output has no mask a generator reads, so the
episode ends at once (`done=True`, reward 0), `metadata["infra_error"]` is True and
`get_metrics()["infra_error"]` is 1.0, which SkyRL averages per env class into its rollout
metrics (the rate shows in the logs). To have the trajectory dropped rather than scored 0,
pass `on_infra_error="raise"`: `step` then raises `skyhub.errors.InfraError`, which a
skyrl-train that skips failed rollouts (`generator.skip_failed_rollouts`, proposed in SkyRL's
PR #1986: a zero-loss-mask placeholder replaces the trajectory) leaves out of training;
without that option the exception ends the training step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyhub.adapters._lazy import lazy_names

if TYPE_CHECKING:
    from skyhub.adapters._skyrl_gym import (
        SkyhubTextEnv,
        dataset_rows,
        generator_stop,
        register,
        skyrl_id,
    )

__all__ = ["SkyhubTextEnv", "dataset_rows", "generator_stop", "register", "skyrl_id"]


# the names above, loaded (with the framework) on first use
__getattr__, __dir__ = lazy_names(__name__, "skyhub.adapters._skyrl_gym", __all__)
