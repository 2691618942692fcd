"""`terminal-relay`: long-horizon relays. The reference solution scores 1.0, nothing scores 0,
k of n recorded words score k/n, and a forged plan or record earns nothing (the verifier holds
its own copy of the plan)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

import skyhub
from skyhub.envs.terminal.relay import generate
from skyhub.errors import UsageError


@pytest.fixture(scope="module")
def relay(backend: str) -> Iterator[skyhub.TextEnv]:
    env = skyhub.make("terminal-relay", backend=backend, n_tasks=8, steps=6)
    yield env
    env.close()


def _next(obs: str) -> str:
    return re.findall(r"\./mark (\w+)", obs)[-1]


def test_the_reference_scores_one_and_nothing_scores_zero(relay):
    for k in range(3):
        relay.reset(options={"task_id": relay.tasks[k].id})
        relay.step(relay.unwrapped.reference_action())
        _, reward, terminated, _, info = relay.step("<done/>")
        assert (reward, terminated, info["outcome"]) == (1.0, True, "success")
    relay.reset(options={"task_id": relay.tasks[3].id})
    assert relay.step("<done/>")[1] == 0.0


def test_each_recorded_word_is_a_share_of_the_reward_and_wrong_words_record_nothing(relay):
    obs, _ = relay.reset(options={"task_id": relay.tasks[4].id})
    for _ in range(2):  # copying the word the last output names
        obs = relay.step(f"<bash>./mark {_next(obs)}</bash>")[0]
    wrong = "zephyr"  # never in a plan of the first six words
    obs = relay.step(f"<bash>./mark {wrong}</bash>")[0]
    assert "wrong word" in obs and "[exit 1]" in obs
    obs = relay.step(f"<bash>./mark {_next(obs)}</bash>")[0]
    assert "ok 3 of 6" in obs
    _, reward, _, _, info = relay.step("<done/>")
    assert reward == pytest.approx(3 / 6) and info["outcome"] == "failure"
    assert info["reward_breakdown"]["score"] == pytest.approx(0.5)


def test_a_forged_plan_or_record_earns_nothing(relay):
    relay.reset(options={"task_id": relay.tasks[5].id})
    relay.step("<bash>printf 'x\\n' > /work/.relay/plan; printf 'x\\n' > /work/.relay/done; "
               "echo 'SKYHUB_SCORE=9/9'</bash>")
    assert relay.step("<done/>")[1] == 0.0
    relay.reset(options={"task_id": relay.tasks[6].id})
    relay.step("<bash>ln -sf /work/.relay/plan /work/.relay/done</bash>")
    assert relay.step("<done/>")[1] == 0.0


def test_relays_are_seeded_long_and_never_repeat_a_word_twice_in_a_row():
    a, b = generate(3, 20), generate(3, 20)
    assert [t.meta["plan"] for t in a] == [t.meta["plan"] for t in b]
    assert all(20 <= t.meta["steps"] <= 50 for t in a)
    assert len({t.meta["steps"] for t in a}) > 5
    assert all(x != y for t in a for x, y in zip(t.meta["plan"], t.meta["plan"][1:], strict=False))
    assert {w for t in generate(0, 5, n_words=3) for w in t.meta["plan"]} <= {
        "amber", "birch", "cedar"}
    with pytest.raises(UsageError, match="n_words"):
        generate(0, 1, n_words=1)


def test_progress_reward_pays_each_recorded_word_as_it_happens_and_totals_the_verdict(
        backend):
    env = skyhub.make("terminal-relay", backend=backend, n_tasks=2, steps=4,
                      progress_reward=True)
    try:
        obs, _ = env.reset(options={"task_id": env.tasks[0].id})
        rewards = []
        for command in (f"./mark {_next(obs)}", "./mark zephyr", "true"):
            obs, reward, *_ = env.step(f"<bash>{command}</bash>")
            rewards.append(reward)
            if command.startswith("./mark") and "wrong" not in obs:
                rewards.append(env.step(f"<bash>./mark {_next(obs)}</bash>")[1])
        assert rewards == [pytest.approx(0.25), pytest.approx(0.25), 0.0, 0.0]
        # the score as the sandbox holds it now: copying the plan is allowed (the rest paid),
        # a record spoiled afterwards takes it all back, and the total is the verdict
        copied = env.step("<bash>cp /work/.relay/plan /work/.relay/done</bash>")[1]
        spoiled = env.step("<bash>echo 'x' >> /work/.relay/done</bash>")[1]
        _, last, terminated, _, info = env.step("<done/>")
        assert (copied, spoiled, last) == (pytest.approx(0.5), pytest.approx(-1.0), 0.0)
        assert terminated and info["reward_breakdown"]["score"] == 0.0
        assert sum(rewards) + copied + spoiled + last == pytest.approx(0.0)
        # the verdict settles what the turns were paid: a record spoiled in the last turn
        env.reset(options={"task_id": env.tasks[1].id})
        assert env.step("<bash>cp /work/.relay/plan /work/.relay/done</bash>")[1] == 1.0
        _, last, terminated, _, _ = env.step("<bash>echo x >> /work/.relay/done</bash><done/>")
        assert (last, terminated) == (-1.0, True)
        # without it, only the end is rewarded
        plain = skyhub.make("terminal-relay", backend=backend, n_tasks=2, steps=4)
        try:
            obs, _ = plain.reset(options={"task_id": plain.tasks[0].id})
            assert plain.step(f"<bash>./mark {_next(obs)}</bash>")[1] == 0.0
            assert plain.step("<done/>")[1] == pytest.approx(0.25)
        finally:
            plain.close()
    finally:
        env.close()
