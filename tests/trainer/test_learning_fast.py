"""Learning is checked in seconds, not only by the slow runs: a few learner steps on a fixed
bandit batch must raise the rewarded answer's probability (a flipped advantage sign lowers
it) and must not learn the env's tokens (a loss mask off by one, inverted or ignored trains
on the observation that follows the agent's answer)."""

from __future__ import annotations

from skyhub.trainer.config import AlgoConfig, OptimConfig
from skyhub.trainer.learner import Learner
from skyhub.trainer.rollout import Trajectory
from skyhub.trainer.tiny import tiny_model

PROMPT = [10, 11, 12, 13]


def episode(answer: int, obs: int | None, reward: float, group: int = 0) -> Trajectory:
    e = Trajectory(group=group, task_id="t", reward=reward)
    e.add(PROMPT, agent=False)
    e.add([answer], agent=True, logprobs=[-5.0], versions=[0])
    if obs is not None:
        e.add([obs, 14], agent=False)  # the env's reply, then more of the conversation
    return e


def logprob(learner: Learner, tokens: list[int]) -> float:
    """log p(last token | the ones before) under the learner's policy."""
    e = Trajectory(group=0, task_id="probe")
    e.add(tokens, agent=False)
    return float(learner.logprobs([e])[0][-1])


def trained(batch: list[Trajectory], steps: int = 6, **algo) -> tuple[Learner, Learner]:
    """(the learner before, the learner after `steps` steps on `batch`), same initial weights."""
    def make() -> Learner:
        return Learner(tiny_model(64, seed=3), AlgoConfig(**algo), OptimConfig(
            lr=3e-3, train_batch_size=1, mini_batch_size=1, micro_batch_tokens=256))

    before, after = make(), make()
    for _ in range(steps):
        after.train_step(batch, group_size=len(batch))
    return before, after


def test_rewarded_answers_become_likelier_and_unrewarded_ones_rarer():
    good, bad = 20, 21
    batch = [episode(good, None, 1.0) for _ in range(4)] + [episode(bad, None, 0.0)
                                                             for _ in range(4)]
    before, after = trained(batch)
    gap = lambda lr: logprob(lr, [*PROMPT, good]) - logprob(lr, [*PROMPT, bad])  # noqa: E731
    assert logprob(after, [*PROMPT, good]) > logprob(before, [*PROMPT, good]) + 0.5
    assert logprob(after, [*PROMPT, bad]) < logprob(before, [*PROMPT, bad]) - 0.5
    assert gap(after) > gap(before) + 2.0


def test_the_envs_tokens_are_not_trained_on():
    # Every episode gives the same answer; what follows it (the env's reply) is what differs
    # with the reward. The agent's tokens carry no signal (GRPO's advantages sum to zero over
    # the group), so a correct loss mask leaves the reply's odds where they were; a mask that
    # lets the reply in teaches the policy to predict the rewarded reply.
    answer, rewarded_obs, other_obs = 20, 30, 31
    batch = [episode(answer, rewarded_obs, 1.0) for _ in range(4)] + [
        episode(answer, other_obs, 0.0) for _ in range(4)]
    before, after = trained(batch)

    def odds(lr: Learner) -> float:
        ctx = [*PROMPT, answer]
        return logprob(lr, [*ctx, rewarded_obs]) - logprob(lr, [*ctx, other_obs])

    assert abs(odds(after) - odds(before)) < 0.3, (odds(before), odds(after))
    # ... while the same steps with the reward on the answer do move the answer's odds: the
    # steps are large enough to show a mask leak of the same size
    before, after = trained([episode(answer, rewarded_obs, 1.0) for _ in range(4)]
                            + [episode(21, rewarded_obs, 0.0) for _ in range(4)])
    assert logprob(after, [*PROMPT, answer]) > logprob(before, [*PROMPT, answer]) + 0.5
