"""The training loop with the vLLM engine (CPU build, in the virtualenv that
`bash scripts/vllm-venv.sh` makes): weights reach the engine after every step, in sync and in
async mode."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_training_with_vllm_rollouts(tmp_path, mode, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    from skyhub.trainer.config import load_config
    from skyhub.trainer.loop import train

    cfg = load_config("tiny-cpu", [
        "rollout.engine=vllm", "rollout.engine_kwargs={dtype: float32, enforce_eager: true}",
        "rollout.samples_per_prompt=4", "optim.train_batch_size=4", "optim.mini_batch_size=4",
        "env.num_envs=4", "loop.max_steps=3", "loop.eval_every=3", "loop.eval_tasks=8",
        "loop.tensorboard=false", f"loop.mode={mode}", f"loop.out={tmp_path}"])
    s = train(cfg, live=False)
    assert [r["step"] for r in s.metrics] == [1, 2, 3]
    for r in s.metrics:
        assert r["episodes"] == 16 and r["infra_errors"] == 0
        # vLLM's logprobs and the learner's agree for the weights that sampled: the TIS
        # weight exp(learner - engine) stays near 1 in sync mode (same weights)
        if mode == "sync":
            assert abs(r["tis_weight_mean"] - 1.0) < 0.01
    assert max(r["staleness_max"] for r in s.metrics) <= 1
    assert "eval_reward_mean" in s.metrics[-1]
