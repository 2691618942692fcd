"""skyhub envs as the rollout side of TRL's GRPOTrainer (the real package, pinned), with a
tiny random model and a tokenizer trained here (nothing is downloaded)."""

from __future__ import annotations

import math
import os
import re
import runpy
from pathlib import Path
from typing import Any

import pytest

import skyhub
from skyhub.envs.toy.recall import RecallEnv
from skyhub.errors import InfraError

ROOT = Path(__file__).resolve().parents[2]
SNIPPET = ROOT / "docs" / "snippets" / "adapter_trl.py"
RECALL = {"hops": 2, "name_key": False}  # two turns: any reply reads the key, then the word




try:  # CI installs it (scripts/setup.sh) and sets SKYHUB_REQUIRE_ADAPTERS=1: never a skip
    import torch  # noqa: F401
    import trl
except ImportError as e:
    if os.environ.get("SKYHUB_REQUIRE_ADAPTERS") == "1":
        raise
    pytest.skip(f"{e}: pip install 'skyhub[trl]'", allow_module_level=True)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental

from skyhub.adapters.trl import SkyhubRollout, make_dataset, skyhub_reward  # noqa: E402


class FlakyRecallEnv(RecallEnv):
    """toy-recall whose backend fails (raises InfraError) when stepped on task `bad_task`."""

    def __init__(self, *, bad_task: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bad_task = bad_task

    def step(self, action: str):
        if self.task is not None and self.task.id == self.bad_task:
            raise InfraError("the word table is unreachable")
        return super().step(action)


@pytest.fixture(scope="module")
def tokenizer():
    from skyhub.trainer.tiny import env_corpus, train_tokenizer

    tok = train_tokenizer(env_corpus("toy-recall", RECALL, episodes=32)
                          + env_corpus("toy-lookup", {}, episodes=16))
    tok.padding_side = "left"
    return tok


@pytest.fixture(scope="module")
def flaky_env():
    """A registered flaky toy-recall whose second dataset row (seed 1) is the failing task."""
    env_id = "testtmp-trl-flaky-recall"
    with skyhub.make("toy-recall", **RECALL) as env:
        _, info = env.reset(seed=1)
    skyhub.register(env_id, FlakyRecallEnv, kwargs={**RECALL, "bad_task": info["task_id"]},
                    override=True)
    yield env_id
    from skyhub.registry import unregister

    unregister(env_id)


def _config(tmp_path: Path, **kw: Any) -> Any:
    args = {"output_dir": str(tmp_path / "out"), "per_device_train_batch_size": 8,
            "num_generations": 4, "max_completion_length": 24, "max_steps": 3,
            "learning_rate": 1e-3, "logging_steps": 1, "report_to": [], "save_strategy": "no",
            "use_cpu": True, "bf16": False, "gradient_checkpointing": False, "seed": 0,
            "temperature": 1.0, **kw}
    return trl.GRPOConfig(**args)


def _trainer(tokenizer, tmp_path, env_id, rollout, reward_funcs, n_rows=2, **kw):
    from skyhub.trainer.tiny import tiny_model

    return trl.GRPOTrainer(model=tiny_model(len(tokenizer), seed=0), processing_class=tokenizer,
                           args=_config(tmp_path, **kw), reward_funcs=reward_funcs,
                           train_dataset=make_dataset(env_id, n_rows),
                           rollout_func=rollout)


def test_grpo_trainer_trains_on_env_rewards_and_logs_infra_errors(tokenizer, flaky_env,
                                                                  tmp_path):
    seen: list[tuple[list[float | None], float]] = []

    def reward(**kwargs: Any) -> list[float | None]:
        out = skyhub_reward(**kwargs)
        seen.append((out, sum(kwargs["skyhub_infra_error"]) / len(out)))
        return out

    reward.__name__ = "skyhub_reward"
    rollout = SkyhubRollout(flaky_env, max_turn_tokens=6)
    trainer = _trainer(tokenizer, tmp_path, flaky_env, rollout, [reward])
    trainer.train()
    rollout.close()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert trainer.state.global_step == 3 and len(logs) == len(seen) == 3
    for log, (rewards, infra_share) in zip(logs, seen, strict=True):
        # both dataset rows are in every batch (2 prompts x 4 generations): one always fails
        assert infra_share == 0.5
        assert log["skyhub/infra_error_rate"] == pytest.approx(0.5)
        scored = [r for r in rewards if r is not None]
        assert len(scored) == 4 and set(scored) <= {0.0, 1.0}
        assert log["rewards/skyhub_reward/mean"] == pytest.approx(sum(scored) / len(scored))
        assert log["reward"] == pytest.approx(sum(scored) / len(scored))
        assert math.isfinite(log["loss"])
        # TRL counted only the model's tokens (env_mask): at most 2 turns x 6 tokens
        assert 0 < log["completions/max_length"] <= 12


def test_rollout_is_multi_turn_with_env_tokens_masked(tokenizer, flaky_env, tmp_path):
    rollout = SkyhubRollout(flaky_env, max_turn_tokens=6)
    trainer = _trainer(tokenizer, tmp_path, flaky_env, rollout, [skyhub_reward])
    prompts = [row["prompt"] for row in make_dataset(flaky_env, 2) for _ in range(2)]
    out = rollout(prompts, trainer)
    rollout.close()
    assert out["logprobs"] is None and len(out["completion_ids"]) == 4
    system = RecallEnv(**RECALL).system_prompt
    for i, prompt in enumerate(prompts):
        ids, mask = out["completion_ids"][i], out["env_mask"][i]
        assert len(ids) == len(mask) <= 24
        assert system in tokenizer.decode(out["prompt_ids"][i])
        if out["skyhub_infra_error"][i]:  # the flaky row: failed on its first step
            assert out["skyhub_outcome"][i] == "error" and out["skyhub_turns"][i] == 1
            continue
        assert out["skyhub_turns"][i] == 2
        assert out["skyhub_outcome"][i] in ("success", "failure")
        assert out["skyhub_reward"][i] == float(out["skyhub_outcome"][i] == "success")
        key = prompt[-1]["content"].split()[-1]
        env_text = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m == 0])
        assert re.search(rf"{key} = \w+", env_text)  # the env's reply, masked out of the loss
        assert mask[0] == 1 and 0 in mask
    assert out["skyhub_infra_error"] == [False, False, True, True]
    assert skyhub_reward(completions=[None] * 4, **{k: out[k] for k in (
        "skyhub_reward", "skyhub_infra_error")})[2:] == [None, None]


def test_stop_strings_end_a_turn_and_reach_the_env(tokenizer, tmp_path):
    """With `generate=` (a scripted policy at the generation boundary) on toy-lookup: text
    past a stop string is not kept, and the env receives the action with its stop string."""
    def generate(prompts: list[list[int]], max_new: int) -> list[list[int]]:
        replies = []
        for ids in prompts:
            text = tokenizer.decode(ids)
            if (m := re.search(r"<result>(\w+)</result>", text)) is not None:
                reply = f"<answer>{m.group(1)}</answer> and more"
            else:
                reply = f"<lookup>{re.findall(r'key (k[0-9]+)', text)[-1]}</lookup> junk"
            replies.append(tokenizer.encode(reply, add_special_tokens=False))
        return replies

    rollout = SkyhubRollout("toy-lookup", generate=generate)
    trainer = _trainer(tokenizer, tmp_path, "toy-lookup", rollout, [skyhub_reward],
                       max_completion_length=96)
    prompts = [row["prompt"] for row in make_dataset("toy-lookup", 2)]
    out = rollout(prompts, trainer)
    rollout.close()
    assert out["skyhub_reward"] == [1.0, 1.0] and out["skyhub_turns"] == [2, 2]
    for ids, mask in zip(out["completion_ids"], out["env_mask"], strict=True):
        turns = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m]).split("</")
        text = tokenizer.decode(ids)
        assert "junk" not in text and "and more" not in text
        assert text.count("</lookup>") == 1 and text.count("</answer>") == 1
        assert len(turns) == 3

    # the trainer's own model generates with the env's stop strings (transformers' generate)
    sampled = SkyhubRollout("toy-lookup", max_turn_tokens=12)
    out = sampled(prompts, trainer)
    sampled.close()
    assert all(1 <= t <= 3 for t in out["skyhub_turns"])  # what a random model's text allows
    for ids, mask in zip(out["completion_ids"], out["env_mask"], strict=True):
        model_ids = [t for t, m in zip(ids, mask, strict=True) if m]
        assert 0 < len(model_ids) <= 3 * 12


def test_readme_snippet_runs(tokenizer, tmp_path, monkeypatch, capsys):
    from skyhub.trainer.tiny import tiny_model

    model_dir = tmp_path / "tiny"
    tiny_model(len(tokenizer), seed=0).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    monkeypatch.setenv("MODEL", str(model_dir))
    monkeypatch.setenv("OUT", str(tmp_path / "run"))
    monkeypatch.setenv("STEPS", "1")
    runpy.run_path(str(SNIPPET), run_name="__main__")
    printed = capsys.readouterr().out.splitlines()[-1]
    assert "'skyhub/infra_error_rate': 0.0" in printed and "'reward':" in printed
