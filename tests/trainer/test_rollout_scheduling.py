"""Request-level rollout: each episode alternates generate -> env step on its own,
all of a step's episodes may be in flight even with fewer envs, and the results are the old
batch-barrier rollout's.

A scripted engine holds chosen requests until a condition on what it has been sent holds, so
the tests assert ordering, never wall-clock times; each hold has a generous deadline after
which the request is released anyway, so a scheduler that cannot meet the condition fails
an assertion instead of hanging.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest
import torch

import skyhub
from benchmarks.rollout import BarrierRollout
from skyhub.env import TextEnv
from skyhub.errors import UsageError
from skyhub.task import Task, TaskSet
from skyhub.trainer.inference import BatchSubmitter, Completion, SamplingParams, submitter
from skyhub.trainer.inference.hf import HFEngine
from skyhub.trainer.rollout import Rollout, RolloutConfig

DEADLINE_S = 60.0  # only reached when the property under test does not hold


class ThreeTurns(TextEnv):
    """Three instant turns per episode, reward 1 at the end."""

    system_prompt = "act"

    def __init__(self) -> None:
        super().__init__()
        self.tasks = TaskSet([Task(id=f"t{k}", prompt=f"task {k}", answer="") for k in range(4)])

    def reset(self, *, seed=None, options=None):
        self.start_episode(seed, options)
        return self.task.prompt, self.make_info()

    def step(self, action):
        self.turn += 1
        if self.turn >= 3:
            return "", 1.0, True, False, self.make_info("success", reward_breakdown={})
        return "more", 0.0, False, False, self.make_info()


class GatedEngine:
    """Completes each request on a thread of its own, at once unless `hold(seed)` says to
    wait: then when `release(engine)` becomes true (checked at every submit) or after
    `DEADLINE_S`. Records ("submit", seed) and ("done", seed) in order."""

    version = 0

    def __init__(self, tokenizer: Any, hold: Callable[[int], bool],
                 release: Callable[[GatedEngine], bool]) -> None:
        self.tokenizer, self.hold, self.release = tokenizer, hold, release
        self.events: list[tuple[str, int]] = []
        self.outstanding = self.peak = 0
        self._lock = threading.Lock()
        self._gate = threading.Event()

    def submit(self, prompt, params, seed) -> Future[Completion]:
        future: Future[Completion] = Future()
        with self._lock:
            self.events.append(("submit", seed))
            self.outstanding += 1
            self.peak = max(self.peak, self.outstanding)
            if self.release(self):
                self._gate.set()
        held = self.hold(seed)
        threading.Thread(target=self._finish, args=(future, seed, held), daemon=True).start()
        return future

    def _finish(self, future: Future[Completion], seed: int, held: bool) -> None:
        if held:
            self._gate.wait(DEADLINE_S)
        ids = self.tokenizer.encode(f"turn {seed % 64}", add_special_tokens=False)
        with self._lock:
            self.events.append(("done", seed))
            self.outstanding -= 1
        future.set_result(Completion(ids, [-0.5] * len(ids), [0] * len(ids), "stop",
                                     f"turn {seed % 64}"))

    def generate(self, prompts, params, seeds=None):
        return [f.result() for f in (self.submit(p, params, s) for p, s in
                                     zip(prompts, seeds, strict=True))]

    def update_weights(self, weights, version):
        self.version = version

    def close(self):
        pass


def test_a_turn_goes_to_the_engine_while_another_episodes_long_generation_runs(tokenizer,
                                                                               chat):
    # Episode 0 (seed 0): its first request (seed 0 * 64 + 0) is long. Episode 1 (seed 1)
    # must get its second and third turns to the engine while that request still runs.
    engine = GatedEngine(tokenizer, hold=lambda s: s == 0,
                         release=lambda e: ("submit", 64 + 2) in e.events)
    venv = skyhub.VectorEnv([ThreeTurns, ThreeTurns], autoreset_mode="disabled")
    rollout = Rollout(venv, engine, chat, RolloutConfig(max_turns_cap=5, max_tokens_per_turn=8))
    try:
        episodes = rollout.run(["t0", "t1"], group_size=1)
    finally:
        venv.close()
    order = engine.events
    long_done = order.index(("done", 0))
    assert order.index(("submit", 64 + 1)) < long_done
    assert order.index(("submit", 64 + 2)) < long_done  # its env stepped twice meanwhile
    assert [e.turns for e in episodes] == [3, 3] and [e.reward for e in episodes] == [1, 1]


def test_all_episodes_of_a_step_in_flight_with_fewer_envs(tokenizer, chat):
    """6 episodes on a 2-env VectorEnv: every first request is held until 6 are in the
    engine at once, which only a rollout with all 6 in flight reaches."""
    engine = GatedEngine(tokenizer, hold=lambda s: s % 64 == 0,
                         release=lambda e: e.outstanding >= 6)
    venv = skyhub.VectorEnv([ThreeTurns] * 2, autoreset_mode="disabled")
    rollout = Rollout(venv, engine, chat, RolloutConfig(max_turns_cap=5, max_tokens_per_turn=8))
    try:
        episodes = rollout.run(["t0", "t1", "t2"], group_size=2)
        own = rollout._own
        assert own is not None and own.num_envs == 6  # its own, wider VectorEnv
        rollout.close()
        assert own.closed and not venv.closed  # closes what it made, never what it was given
    finally:
        venv.close()
    assert engine.peak == 6
    assert rollout.stats["peak_in_flight"] == 6 == rollout.stats["peak_requests"]
    assert rollout.stats["envs"] == 6 and rollout.stats["requests"] == 18
    assert [e.group for e in episodes] == [0, 0, 1, 1, 2, 2]
    assert [e.task_id for e in episodes] == ["t0", "t0", "t1", "t1", "t2", "t2"]
    assert all(e.turns == 3 and e.reward == 1.0 and not e.infra_error for e in episodes)


def test_max_in_flight_caps_the_episodes_playing_at_once(tokenizer, chat):
    engine = GatedEngine(tokenizer, hold=lambda s: s % 64 == 0,
                         release=lambda e: e.outstanding >= 2)
    venv = skyhub.VectorEnv([ThreeTurns] * 4, autoreset_mode="disabled")
    rollout = Rollout(venv, engine, chat, RolloutConfig(max_turns_cap=5, max_tokens_per_turn=8,
                                                        max_in_flight=2))
    try:
        episodes = rollout.run(["t0", "t1", "t2"], group_size=2)
    finally:
        venv.close()
    assert engine.peak == 2 and rollout.stats["peak_in_flight"] == 2
    assert rollout._own is None and rollout.stats["envs"] == 4  # the envs it was given
    assert all(e.turns == 3 for e in episodes)
    with pytest.raises(UsageError, match="max_in_flight"):
        Rollout(venv, engine, chat, RolloutConfig(max_in_flight=0))


@pytest.mark.parametrize("max_input_tokens", [4096, 60])
def test_results_are_the_batch_barrier_rollouts(model, tokenizer, chat, max_input_tokens):
    """The HF engine is deterministic given each request's seed: request-level scheduling
    (continuous batching, episodes on their own) gives what the old scheduling gave, token
    for token, including where the input budget cuts turns short and ends episodes."""
    cfg = RolloutConfig(max_turns_cap=3, max_tokens_per_turn=12, max_input_tokens=max_input_tokens,
                        stop=("</lookup>", "</answer>"))
    probe = skyhub.make("toy-lookup")
    task_ids = [t.id for t in probe.unwrapped.tasks][:2]
    runs = []
    for cls in (Rollout, BarrierRollout):
        venv = skyhub.make_vec("toy-lookup", 4, autoreset_mode="disabled")
        rollout = cls(venv, HFEngine(model, tokenizer), chat, cfg)
        try:
            runs.append(rollout.run(task_ids, group_size=2, seed=3))
        finally:
            rollout.close()
            venv.close()
    ours, old = runs
    if max_input_tokens < 4096:
        assert any(e.info.get("overlong") for e in old)  # the budget was exercised
    for a, b in zip(ours, old, strict=True):
        assert (a.group, a.task_id, a.seed, a.turns) == (b.group, b.task_id, b.seed, b.turns)
        assert a.token_ids == b.token_ids and a.loss_mask == b.loss_mask
        assert a.versions == b.versions and a.prompt_len == b.prompt_len
        assert (a.reward, a.outcome, a.truncated, a.finish_reason) == \
            (b.reward, b.outcome, b.truncated, b.finish_reason)
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


class _BatchOnly:
    """A third-party engine with `generate` alone."""

    version = 0

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.threads: set[str] = set()

    def generate(self, prompts, params, seeds=None):
        self.threads.add(threading.current_thread().name)
        self.calls.append(list(seeds))
        if any(s < 0 for s in seeds):
            raise ValueError("negative seed")
        return [Completion([s], [0.0], [0], "length", str(s)) for s in seeds]


def test_an_engine_without_submit_is_served_through_generate():
    engine = _BatchOnly()
    submit = submitter(engine)
    params = SamplingParams(max_tokens=1)
    futures = [submit([1, 2], params, s) for s in (5, 6, 7)]
    assert [f.result(DEADLINE_S).token_ids for f in futures] == [[5], [6], [7]]
    assert sorted(s for call in engine.calls for s in call) == [5, 6, 7]
    assert len(engine.threads) == 1  # one worker at a time calls the engine
    bad = submit([1], params, -1)
    with pytest.raises(ValueError, match="negative seed"):
        bad.result(DEADLINE_S)
    assert submit([1], params, 9).result(DEADLINE_S).token_ids == [9]  # it goes on


def test_an_overridden_generate_is_not_bypassed_by_an_inherited_submit(model, tokenizer):
    class Recording(HFEngine):
        def generate(self, prompts, params, seeds=None):
            return super().generate(prompts, params, seeds)

    assert isinstance(submitter(Recording(model, tokenizer)).__self__, BatchSubmitter)
    engine = HFEngine(model, tokenizer)
    assert submitter(engine) == engine.submit
