"""Training through a harness (`rollout.harness`): the builtin harness behind the gateway
gives the episodes, token for token, that the trainer's own loop gives; step-wise episodes
train; a 3-step `skyhub train` with a harness runs."""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future
from dataclasses import replace

import pytest

import skyhub
from skyhub.errors import UsageError
from skyhub.trainer.config import RolloutConfig, load_config
from skyhub.trainer.harness_rollout import HarnessRollout, make_rollout
from skyhub.trainer.inference import Completion
from skyhub.trainer.loop import train
from skyhub.trainer.rollout import Rollout

pytest.importorskip("openai")


class Replies:
    """An engine whose reply to a prompt depends only on the prompt (so two rollouts that
    send the same prompts get the same replies): a lookup of a key derived from the prompt's
    length, then an answer."""

    version = 0

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.lock = threading.Lock()
        self.prompts: list[list[int]] = []

    def submit(self, prompt, params, seed):
        with self.lock:
            self.prompts.append(list(prompt))
        text = f"<lookup>k{len(prompt) % 7}</lookup>" if len(prompt) % 3 else "<answer>x</answer>"
        ids = [*self.tokenizer.encode(text, add_special_tokens=False),
               self.tokenizer.eos_token_id]
        f: Future[Completion] = Future()
        f.set_result(Completion(ids, [-0.1 * (k + 1) for k in range(len(ids))],
                                [0] * len(ids), "stop", text))
        return f


def test_builtin_harness_episodes_equal_the_trainers_own_loop(tokenizer, chat):
    cfg = RolloutConfig(max_tokens_per_turn=32, max_input_tokens=1024, temperature=1.0)
    tasks = [f"lookup-0-{k}" for k in range(4)]
    venv = skyhub.make_vec("toy-lookup", 4, autoreset_mode="disabled")
    try:
        with skyhub.make("toy-lookup") as env:
            tasks = [t.id for t in env.unwrapped.tasks][:4]
        own = Rollout(venv, Replies(tokenizer), chat, cfg)
        harnessed = make_rollout(venv, Replies(tokenizer), chat, replace(cfg, harness="builtin"))
        assert isinstance(harnessed, HarnessRollout)
        try:
            a = own.run(tasks, 2, seed=5)
            b = harnessed.run(tasks, 2, seed=5)
        finally:
            own.close()
            harnessed.close()
    finally:
        venv.close()
    assert [e.turns for e in a] == [e.turns for e in b] and max(e.turns for e in a) > 1
    for x, y in zip(a, b, strict=True):
        assert (x.task_id, x.reward, x.outcome) == (y.task_id, y.reward, y.outcome)
        assert y.token_ids == x.token_ids[:len(y.token_ids)]
        # the trainer's loop ends with the last observation; the gateway's record ends with
        # the last reply (nothing after it is trained)
        assert all(m == 0 for m in x.loss_mask[len(y.token_ids):])
        assert y.loss_mask == x.loss_mask[:len(y.loss_mask)]
        assert y.logprobs == x.logprobs[:len(y.logprobs)] and y.prompt_len == x.prompt_len


def test_stepwise_needs_a_harness(tokenizer, chat):
    venv = skyhub.make_vec("toy-lookup", 1, autoreset_mode="disabled")
    try:
        with pytest.raises(UsageError, match=r"rollout\.harness"):
            make_rollout(venv, Replies(tokenizer), chat, RolloutConfig(stepwise=True))
        with pytest.raises(UsageError, match=r"rollout\.branch_at"):
            make_rollout(venv, Replies(tokenizer), chat,
                         RolloutConfig(harness="builtin", branch_at=1))
    finally:
        venv.close()


def test_three_training_steps_through_the_builtin_harness_stepwise(tmp_path):
    cfg = load_config("tiny-cpu", [
        "rollout.samples_per_prompt=4", "optim.train_batch_size=4", "optim.mini_batch_size=4",
        "env.num_envs=4", "loop.eval_every=2", "loop.eval_tasks=8", "loop.tensorboard=false",
        f"loop.out={tmp_path}", "loop.max_steps=3", "rollout.harness=builtin",
        "rollout.stepwise=true"])
    s = train(cfg, live=False)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert s.steps == 3 and [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["episodes"] == 16 and r["response_tokens_mean"] >= 1 for r in rows)
    assert "eval_reward_mean" in rows[1]
