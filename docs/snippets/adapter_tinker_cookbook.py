"""Tinker cookbook: its RL loop trains on a skyhub env, against `skyhub tinker serve`:

    skyhub tinker serve --base-model DIR &           # DIR: a local model directory
    TINKER_BASE_URL=http://127.0.0.1:8000 TINKER_API_KEY=tml-local SKYHUB_MODEL=DIR \\
        python adapter_tinker_cookbook.py
"""
import asyncio
import os

from tinker_cookbook.rl import train

from skyhub.adapters.tinker_cookbook import SkyhubDatasetBuilder, register_local_tokenizer

model = os.environ["SKYHUB_MODEL"]
register_local_tokenizer(model)                      # the served model's tokenizer, not the hub's
config = train.Config(
    dataset_builder=SkyhubDatasetBuilder(
        env_id="toy-recall", env_kwargs={"n_tasks": 16}, model_name_for_tokenizer=model,
        renderer_name="role_colon", groups_per_batch=2, group_size=4),
    model_name=model, renderer_name="role_colon", recipe_name="skyhub-toy-recall",
    base_url=os.environ["TINKER_BASE_URL"], learning_rate=1e-3, lora_rank=8, max_tokens=4,
    max_steps=3, eval_every=0, save_every=0, log_path="runs/skyhub-toy-recall",
    rollout_error_tolerance=True)                    # infra-error episodes: retried, never a 0
asyncio.run(train.main(config))
