"""skyhub's PPO/GRPO trainer (extra `train`): small modules, each readable top to bottom.

The loop and what it calls:
    loop.py          `train(cfg)`: sync and async training, top to bottom (`run`)
    config.py        dataclass configs from recipes/*.yaml plus key=value overrides
    rollout.py       multi-turn episodes over a VectorEnv, token-in/token-out
    token_layout.py  prompt and observation tokens from the model's chat template (two layouts)
    tool_layout.py   episodes in the model's own tool-call format (rollout.tool_parser)
    harness_rollout.py  episodes played by a harness through an in-process gateway
                     (rollout.harness); `make_rollout` picks it or rollout.py
    stepwise.py      a harness episode's segments as samples with the episode's advantage
                     (rollout.stepwise)
    turn_credit.py   each request of a harness episode credited with the env rewards that
                     followed it (algo.turn_weight)
    tree_advantage.py  each segment of a forked (tree) rollout credited against its siblings
    tree_rollout.py  episodes forked at a turn into children, as prefix and child samples
                     (rollout.branch_at, rollout.branch_n)
    inference/       the LLM inference engines: hf (transformers), vllm (AsyncLLM, weight sync),
                     several as one pool, and their start-up where the placement says
    weight_sync.py   the canary that checks an engine samples from the learner's weights
    learner.py       the PPO/GRPO step: advantages, accumulation, one rank or sharded
    algorithms.py    advantages, PPO losses, KL estimators (plain torch)
    packing.py       episodes of mixed lengths laid out in rows without padding waste
    policy.py        float32 masters, bf16 compute, chunked logprobs, FSDP2 sharding
    dist.py          the learner's ranks: launching them, rank 0 driving the others
    checkpoint.py    checkpoints (transformers' format + sharded state) and exact resume
    evaluator.py     greedy evaluation during training
    stats.py         what a step logs beside the learner's statistics
    run_log.py       live table, metrics.jsonl, TensorBoard/W&B, curves.png
    errors.py        the trainer's exceptions

Where things go and what they need (`skyhub train --dry-run`):
    placement.py     where the rollout engines go beside the learner's ranks
    memory.py        the plan: placement and per-device memory from the config
    model_memory.py  a model's shape and one learner rank's peak, estimated and measured

Around the trainer:
    cli.py           `skyhub train` (found through the `skyhub.cli` entry point)
    tiny.py          a random tiny model and a locally trained tokenizer (no downloads)
    hf_agent.py      `skyhub eval --agent hf:PATH`: a local model as an eval agent
    gateway_backend.py  the engines behind `skyhub gateway` (skyhub.gateway's Backend)
    gateway_cli.py   `skyhub gateway --model ...` (found through the `skyhub.cli` entry point)
    openrlhf.py      the agent adapter for scaling out with OpenRLHF's Ray trainer
    tinker/          a Tinker-compatible training server (`skyhub tinker serve`)

No module imports one that imports it back, counting imports inside functions
(tests/trainer/test_no_import_cycles.py).
`import skyhub` does not import this package, and importing it imports nothing heavy: torch,
transformers and vLLM load inside the modules that use them.
"""
