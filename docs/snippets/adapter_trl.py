"""TRL: GRPO on a skyhub env with TRL's own GRPOTrainer; the env plays the rollouts, several
turns each, through a skyhub VectorEnv (TRL's `rollout_func`). MODEL: a Hub id or a local
directory holding a causal LM and its tokenizer (with a chat template)."""
import os

import torch
from trl import GRPOConfig, GRPOTrainer

from skyhub.adapters.trl import SkyhubRollout, make_dataset, skyhub_reward

env_id, env_kwargs = "toy-recall", {"hops": 2, "name_key": False}   # two turns an episode
trainer = GRPOTrainer(
    model=os.environ.get("MODEL", "Qwen/Qwen2.5-0.5B-Instruct"),
    reward_funcs=[skyhub_reward],                 # the env's reward; None on infra errors
    rollout_func=SkyhubRollout(env_id, env_kwargs=env_kwargs, max_turn_tokens=8),
    train_dataset=make_dataset(env_id, 64, env_kwargs=env_kwargs),
    args=GRPOConfig(output_dir=os.environ.get("OUT", "runs/trl-toy-recall"), num_generations=4,
                    per_device_train_batch_size=8, max_completion_length=32,
                    max_steps=int(os.environ.get("STEPS", 200)), logging_steps=1,
                    report_to=[],
                    bf16=torch.cuda.is_available()),            # CPU: float32
)
trainer.train()
last = [h for h in trainer.state.log_history if "reward" in h][-1]
print({k: v for k, v in last.items() if "reward" in k or "skyhub" in k})
