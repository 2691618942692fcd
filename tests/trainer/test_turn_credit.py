"""Turn-level credit (`algo.turn_weight`): each request of a harness episode is credited with
the env rewards that followed it, on top of its episode's advantage. Checked on a hand-built
session (the numbers worked out here), against the learner's gradient, and through a real
gateway with the builtin harness on terminal-relay's progress rewards."""

from __future__ import annotations

import math

import pytest
import torch

from skyhub.errors import UsageError
from skyhub.gateway.sessions import Record, Session
from skyhub.trainer.config import AlgoConfig, OptimConfig, load_config
from skyhub.trainer.learner import Learner
from skyhub.trainer.rollout import Trajectory
from skyhub.trainer.stepwise import from_segments
from skyhub.trainer.tiny import tiny_model
from skyhub.trainer.turn_credit import attribute, discounted_returns, expand, turn_advantages


def test_discounted_returns_and_attribution():
    assert discounted_returns([1.0, 0.0, 2.0], 0.5) == [1.5, 1.0, 2.0]
    assert discounted_returns([1.0, 0.0, 2.0], 0.0) == [1.0, 0.0, 2.0]
    assert discounted_returns([], 0.9) == []
    # steps 0-2 played replies of requests 0, 0 and 2; a step before any request counts nowhere
    assert attribute([0.25, 0.5, 1.0, 9.0], [0, 0, 2, -1], 4) == [0.75, 0.0, 1.0, 0.0]


def _session() -> Session:
    """Three requests: the second extends the first, the third (a summary) starts anew."""
    s = Session("t")
    s.add(Record("a", [], None, [5, 6], [7, 8], [-1.0, -1.0], [0, 0], "stop", {}))
    s.add(Record("b", [], None, [5, 6, 7, 8, 9], [10], [-1.0], [0], "stop", {}))
    s.add(Record("c", [], None, [5, 11], [12, 13], [-1.0, -1.0], [0, 0], "stop", {}))
    return s


def test_spans_locate_each_requests_completion_in_its_sample():
    segs = _session().segments()
    assert [seg.spans for seg in segs] == [[[0, 2], [3, 4]], [[0, 2]]]
    e = Trajectory(group=0, task_id="x")
    from_segments(e, segs, stepwise=True)
    # in sample coordinates (the prompt first): request 0 is ids 7 8, request 1 is id 10
    assert e.parts[0].spans == [(0, 2, 4), (1, 5, 6)]
    assert [e.parts[0].token_ids[a:b] for _, a, b in e.parts[0].spans] == [[7, 8], [10]]
    assert e.parts[1].spans == [(2, 2, 4)] and e.spans == e.parts[1].spans


def test_each_token_carries_its_episodes_advantage_plus_its_requests():
    segs = _session().segments()
    won = Trajectory(group=0, task_id="x", reward=1.0, turn_rewards=[0.0, 1.0, 0.0])
    from_segments(won, segs, stepwise=True)
    lost = Trajectory(group=0, task_id="x", reward=0.0, turn_rewards=[0.0])
    from_segments(lost, segs[1:], stepwise=True)
    lost.spans = [(0, 2, 4)]  # its only request is its record 0
    # gamma 0.5: won's returns 0.5, 1, 0; lost's 0. Standardised over the 4 requests.
    values = torch.tensor([0.5, 1.0, 0.0, 0.0])
    z = ((values - values.mean()) / (values.std() + 1e-6)).tolist()
    turns = turn_advantages([won, lost], 0.5)
    assert turns[id(won)] == pytest.approx(z[:3]) and turns[id(lost)] == pytest.approx(z[3:])
    base = {id(won): torch.tensor(0.7), id(lost): torch.tensor(-0.7)}
    samples, adv = expand([won, lost], base, weight=2.0, gamma=0.5)
    assert samples == [*won.parts, lost]
    first = adv[id(won.parts[0])]  # ids 5 6 7 8 9 10: tensor position i is token i + 1
    assert first.shape == (5,)
    assert first.tolist() == pytest.approx([0.7, 0.7 + 2 * z[0], 0.7 + 2 * z[0], 0.7,
                                            0.7 + 2 * z[1]])
    assert adv[id(won.parts[1])].tolist() == pytest.approx([0.7, 0.7 + 2 * z[2],
                                                            0.7 + 2 * z[2]])
    assert adv[id(lost)].tolist() == pytest.approx([-0.7, -0.7 + 2 * z[3], -0.7 + 2 * z[3]])


def test_one_reward_at_the_end_credits_every_turn_of_an_episode_alike():
    """gamma 1 with the reward on the last request: every request of an episode has the
    episode's reward as its return, so the turn term only scales the episode's sign."""
    a = Trajectory(group=0, task_id="x", turn_rewards=[0.0, 0.0, 1.0])
    b = Trajectory(group=0, task_id="x", turn_rewards=[0.0, 0.0])
    turns = turn_advantages([a, b], 1.0)
    assert len(set(turns[id(a)])) == 1 and len(set(turns[id(b)])) == 1
    assert turns[id(a)][0] > 0 > turns[id(b)][0]
    # a group of one request has no spread: no turn term
    (c,) = [Trajectory(group=1, task_id="y", turn_rewards=[1.0])]
    assert turn_advantages([c], 1.0)[id(c)] == [0.0]


def test_the_learner_trains_on_the_turn_advantages():
    """Two episodes per group with equal totals: GRPO alone gives no gradient; turn credit
    does (the earlier reward is credited to the earlier request); weight 0 is the plain
    episode gradient."""
    def batch(rewards):
        out = []
        for g in range(2):
            for r in rewards:
                e = Trajectory(group=g, task_id=str(g), reward=sum(r), turn_rewards=list(r))
                from_segments(e, _session().segments(), stepwise=True)
                out.append(e)
        return out

    def grads(eps, **algo):
        model = tiny_model(300, seed=1)
        learner = Learner(model, AlgoConfig(**algo), OptimConfig(
            micro_batch_tokens=150, train_batch_size=2, mini_batch_size=2))
        learner.opt.step = lambda: None
        learner.train_step(eps, 2)
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    rewards = [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]  # equal totals: no episode advantage
    plain = grads(batch(rewards))
    credited = grads(batch(rewards), turn_weight=1.0, turn_gamma=0.0)
    assert plain.abs().max() == 0.0  # GRPO: equal rewards, no signal
    assert credited.abs().max() > 1e-4  # the turns differ: the earlier reward is credited
    assert torch.allclose(grads(batch(rewards), turn_weight=0.0), plain)


@pytest.mark.parametrize("override,match", [
    (["algo.turn_weight=1"], "rollout.harness"),
    (["algo.turn_weight=-1"], "turn_weight must be"),
    (["algo.turn_weight=1", "algo.turn_gamma=1.5"], "turn_gamma"),
    (["algo.turn_weight=1", "rollout.harness=builtin", "algo.advantage=reinforce++"],
     "per-episode advantage"),
])
def test_misuse_is_refused(override, match):
    with pytest.raises(UsageError, match=match):
        load_config("tiny-cpu", override)


class Relay:
    """An engine that plays a relay through the builtin harness: the word the last output
    names, except a wrong word at its second reply, and `<done/>` at its sixth."""

    version = 0

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.replies = tokenizer, 0

    def submit(self, prompt, params, seed):
        import re
        from concurrent.futures import Future

        from skyhub.trainer.inference import Completion

        words = re.findall(r"\./mark (\w+)", self.tokenizer.decode(list(prompt)))
        k, self.replies = self.replies, self.replies + 1
        text = ("<done/>" if k >= 5 else "<bash>./mark zephyr</bash>" if k == 1 else
                f"<bash>./mark {words[-1]}</bash>")
        ids = [*self.tokenizer.encode(text, add_special_tokens=False),
               self.tokenizer.eos_token_id]
        f: Future[Completion] = Future()
        f.set_result(Completion(ids, [-0.1] * len(ids), [0] * len(ids), "stop", text))
        return f


def test_harness_rollout_credits_each_request_with_the_progress_it_made(tokenizer, chat):
    """The builtin harness plays terminal-relay (progress rewards) through the gateway: each
    request that typed a right word is credited 1/n, the wrong word and `<done/>` nothing, and
    the credits add up to the episode's reward."""
    pytest.importorskip("openai")
    import skyhub
    from skyhub.trainer.config import RolloutConfig
    from skyhub.trainer.harness_rollout import HarnessRollout

    kwargs = {"backend": "local", "n_tasks": 1, "steps": 4, "progress_reward": True}
    with skyhub.make("terminal-relay", **kwargs) as env:
        task = env.unwrapped.tasks[0].id
    venv = skyhub.make_vec("terminal-relay", 1, autoreset_mode="disabled", **kwargs)
    try:
        rollout = HarnessRollout(venv, Relay(tokenizer), chat, RolloutConfig(
            harness="builtin", max_tokens_per_turn=64, max_input_tokens=100_000))
        try:
            (t,) = rollout.run([task], 1)
        finally:
            rollout.close()
    finally:
        venv.close()
    assert t.reward == pytest.approx(1.0) and t.outcome == "success"
    assert t.turn_rewards == pytest.approx([0.25, 0.0, 0.25, 0.25, 0.25, 0.0])
    assert math.isclose(sum(t.turn_rewards), t.reward)
    assert [k for k, _, _ in t.spans] == list(range(6))
