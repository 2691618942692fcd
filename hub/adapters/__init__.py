"""A skyhub env inside other training and evaluation stacks, one small module per framework.

- `skyhub.adapters.trl`: the rollout and reward side of TRL's `GRPOTrainer` (its
  `rollout_func`), multi-turn through a `skyhub.VectorEnv`.
- `skyhub.adapters.verifiers`: `load_environment(env_id=...)`, so verifiers' `vf-eval` and
  the trainers built on verifiers (prime-rl) run a skyhub env as a `vf.MultiTurnEnv`.
- `skyhub.adapters.openenv`: a skyhub env served over OpenEnv's HTTP/WebSocket protocol, for
  OpenEnv's own `EnvClient`.
- `skyhub.adapters.skyrl_gym`: a skyhub env as a skyrl-gym `BaseTextEnv`, registered in
  skyrl-gym's registry for SkyRL's generator.
- `skyhub.adapters.tinker_cookbook`: a skyhub env as the Tinker cookbook's RL
  `Env`/`EnvGroupBuilder`.

Each is an optional extra (`pip install 'skyhub[trl]'`, `'skyhub[verifiers]'`, ...) and
imports its framework only when used: importing this package, or one of its modules, imports
no framework, so `import skyhub` stays light. Every adapter keeps skyhub's contract where the
framework can express it: an episode whose env failed (`info["infra_error"]`) is marked the
way that framework drops or masks it (each module's docstring says how), and the env's system
prompt and stop strings reach the model.
"""
