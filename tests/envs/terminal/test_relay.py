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
