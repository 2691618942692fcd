"""skyhub's PPO/GRPO trainer (extra `train`): small modules, each readable top to bottom.

    rollout.py      multi-turn episodes over a VectorEnv, token-in/token-out
    token_layout.py prompt and observation tokens from the model's chat template (two layouts)
    inference/      the LLM inference engines: hf (transformers), vllm (AsyncLLM, weight sync)
    algorithms.py   advantages, PPO losses, KL estimators (plain torch)
    learner.py      the PPO/GRPO step: advantages, accumulation, one rank or sharded
    policy.py       float32 masters, bf16 compute, chunked logprobs, FSDP2 sharding
    dist.py         the learner's ranks: launching them, rank 0 driving the others
    checkpoint.py   checkpoints (transformers' format + sharded state) and exact resume
    memory.py       placement and per-device memory from the config (`--dry-run`)
    packing.py      episodes of mixed lengths laid out in rows without padding waste
    loop.py         sync and async training, eval, logging (`train(cfg)`)
    config.py       dataclass configs from recipes/*.yaml plus key=value overrides
    run_log.py      live table, metrics.jsonl, TensorBoard/W&B, curves.png
    tiny.py         a random tiny model and a locally trained tokenizer (no downloads)
    openrlhf.py     the agent adapter for scaling out with OpenRLHF's Ray trainer

`import skyhub` does not import this package, and importing it imports nothing heavy: torch,
transformers and vLLM load inside the modules that use them.
"""
