"""Rollout: token-in/token-out multi-turn episodes over a real VectorEnv."""

from __future__ import annotations

from typing import ClassVar

import torch

import skyhub
from skyhub.env import TextEnv
from skyhub.task import Task, TaskSet
from skyhub.trainer.config import AlgoConfig, OptimConfig
from skyhub.trainer.inference.hf import HFEngine
from skyhub.trainer.learner import Learner
from skyhub.trainer.rollout import Rollout, RolloutConfig


class RecordingEngine(HFEngine):
    """Remembers every (prompt, completion) it produced, by sampling seed (one per episode
    turn: the rollout seeds turn k of an episode with `episode.seed * 64 + k`)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls = {}

    def generate(self, prompts, params, seeds=None):
        outs = super().generate(prompts, params, seeds)
        for p, s, c in zip(prompts, seeds, outs, strict=True):
            self.calls[s] = (list(p), c)
        return outs


def test_learner_trains_on_exactly_engine_tokens_and_env_tokens(model, tokenizer, chat):
    engine = RecordingEngine(model, tokenizer)
    venv = skyhub.make_vec("toy-lookup", 4, autoreset_mode="disabled")
    probe = skyhub.make("toy-lookup")
    task_ids = [t.id for t in probe.unwrapped.tasks][:3]
    rollout = Rollout(venv, engine, chat, RolloutConfig(max_turns_cap=3, max_tokens_per_turn=12,
                                                        stop=("</lookup>", "</answer>")))
    try:
        episodes = rollout.run(task_ids, group_size=2, seed=1)
    finally:
        venv.close()
    assert [e.group for e in episodes] == [0, 0, 1, 1, 2, 2]
    assert all(e.turns >= 2 for e in episodes)  # random text is malformed: turns go on
    for ep in episodes:
        # Rebuild the sequence from the engine's outputs and the env's observations.
        obs, _ = probe.reset(options={"task_id": ep.task_id})
        seq = chat.prompt_ids(obs, probe.system_prompt)
        mask = [0] * len(seq)
        assert ep.prompt_len == len(seq)
        for k in range(ep.turns):
            prompt, c = engine.calls[ep.seed * 64 + k]
            assert prompt == seq  # the engine was given exactly the sequence so far
            seq, mask = seq + c.token_ids, mask + [1] * len(c.token_ids)
            obs, *_ = probe.step(c.text)  # the same env, replayed
            if k + 1 < ep.turns:
                seq += chat.observation_ids(obs, c.token_ids[-1] in chat.stop_token_ids)
                mask += [0] * (len(seq) - len(mask))
        assert seq == ep.token_ids
        assert mask == ep.loss_mask
        assert [v for v, m in zip(ep.versions, mask, strict=True) if m] == [0] * sum(mask)
    # The learner's logprobs of the agent's tokens match the engine's for the same weights.
    learner = Learner(model, AlgoConfig(), OptimConfig(micro_batch_tokens=512))
    for ep, lp in zip(episodes, learner.logprobs(episodes), strict=True):
        agent = torch.tensor(ep.loss_mask[1:]).bool()
        engine_lp = torch.tensor(ep.logprobs[1:])[agent]
        assert agent.sum() == ep.agent_tokens > 0
        assert torch.allclose(lp[agent], engine_lp, atol=1e-4)


def test_stop_strings_end_a_turn_and_the_env_sees_the_text(model, tokenizer, chat):
    class Echo(TextEnv):
        """Ends when the agent's text contains the stop string; records what it got."""

        system_prompt = "say anything"
        stop_strings = ("e",)
        seen: ClassVar[list[str]] = []

        def __init__(self):
            super().__init__()
            self.tasks = TaskSet([Task(id="t", prompt="go", answer="")])

        def reset(self, *, seed=None, options=None):
            self.start_episode(seed, options)
            return "go", self.make_info()

        def step(self, action):
            self.turn += 1
            Echo.seen.append(action)
            return "", 1.0, True, False, self.make_info("success", reward_breakdown={})

    venv = skyhub.VectorEnv([Echo, Echo], autoreset_mode="disabled")
    engine = HFEngine(model, tokenizer)
    rollout = Rollout(venv, engine, chat, RolloutConfig(max_tokens_per_turn=40, stop=("e",)))
    try:
        episodes = rollout.run(["t"], group_size=4)
    finally:
        venv.close()
    assert [e.reward for e in episodes] == [1.0] * 4
    assert all(ep.agent_tokens <= 40 for ep in episodes)
    assert any("e" in t for t in Echo.seen)
    for t in Echo.seen:  # generation stopped at the first token that completed an "e"
        if "e" in t:
            assert "e" not in t[:t.index("e")]


def test_infra_errors_are_flagged_and_left_out_of_the_loss(model, tokenizer, chat):
    class Flaky(TextEnv):
        """Task "bad" breaks the env (an exception: the VectorEnv reports infra_error)."""

        system_prompt = "answer"

        def __init__(self):
            super().__init__()
            self.tasks = TaskSet([Task(id="good", prompt="go", answer=""),
                                  Task(id="bad", prompt="go", answer="")])

        def reset(self, *, seed=None, options=None):
            self.start_episode(seed, options)
            return "go", self.make_info()

        def step(self, action):
            self.turn += 1
            if self.task.id == "bad":
                raise RuntimeError("the database went away")
            return "", float(len(action) % 2), True, False, self.make_info(
                "success", reward_breakdown={})

    venv = skyhub.VectorEnv([Flaky] * 3, autoreset_mode="disabled")
    rollout = Rollout(venv, HFEngine(model, tokenizer), chat,
                      RolloutConfig(max_tokens_per_turn=5))
    try:
        episodes = rollout.run(["good", "bad"], group_size=3)
    finally:
        venv.close()
    assert [e.infra_error for e in episodes] == [False] * 3 + [True] * 3
    learner = Learner(model, AlgoConfig(), OptimConfig(micro_batch_tokens=512))
    adv = learner._episode_advantages(episodes, 3)
    assert set(adv) == {id(e) for e in episodes[:3]}  # the broken group gets no advantage
    before = {k: v.clone() for k, v in model.state_dict().items()}
    metrics = learner.train_step(episodes[3:], 3)  # only infra errors: nothing to learn from
    assert metrics["skipped"] == 1.0 and metrics["infra_errors"] == 3.0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
