"""One slow episode never holds the others: an env whose earlier steps were fast
was stepped inline on the VectorEnv's own thread, so a nop agent's last step ran a 600 s
verifier there and every other episode waited (a healthcheck task got one turn in 603 s). A
step that may block (`may_block`: the env says so, holds a sandbox, or is on its last turn)
now always runs on its env's thread, and in lockstep the threaded envs start first.

Synchronised by events: env A's blocking step waits for an Event that only the test (or env
B's step) sets; on a VectorEnv that ran it inline that Event is never set while A blocks, and
A's step gives up after `GIVE_UP_S`, reporting "starved"."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from skyhub.env import TextEnv
from skyhub.task import Task, TaskSet
from skyhub.vector import VectorEnv
from skyhub.vector.env import may_block

pytestmark = [pytest.mark.hostile]

GIVE_UP_S = 30.0  # only reached when the VectorEnv starves env B (the bug)
WARMUP = 8  # fast steps: more than enough to be stepped inline


class GateEnv(TextEnv):
    """Fast steps, except "block", which waits until `gate` is set (a verifier that takes
    as long as it takes), and "open", which sets `gate`."""

    def __init__(self, gate: threading.Event, started: threading.Event, *,
                 max_turns: int | None = None, sandbox: Any = None,
                 blocking_steps: bool | None = None) -> None:
        super().__init__(max_turns=max_turns)
        self.tasks = TaskSet([Task("t0", "a task")])
        self.gate, self.started = gate, started
        self.sandbox = sandbox  # held as a sandbox env holds its own
        if blocking_steps is not None:
            self.blocking_steps = blocking_steps

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.start_episode(seed, options)
        return "start", self.make_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.next_turn()
        thread = threading.current_thread().name
        if action == "block":
            self.started.set()
            obs = "released" if self.gate.wait(GIVE_UP_S) else "starved"
            return obs, 1.0, True, False, self.make_info("success", thread=thread,
                                                        reward_breakdown={"verified": 1.0})
        if action == "open":
            during = self.started.is_set() and not self.gate.is_set()
            self.gate.set()
            return "opened", 0.0, False, False, self.make_info(thread=thread, during=during)
        during = self.started.is_set() and not self.gate.is_set()
        return "ok", 0.0, False, False, self.make_info(thread=thread, during=during)


@pytest.fixture(params=["last_turn", "holds_sandbox", "declared"])
def blocking_env(request: pytest.FixtureRequest) -> Iterator[Callable[..., GateEnv]]:
    """How the VectorEnv can tell that env A's step may block, without being told per step:
    its turn budget ends with it, it holds a sandbox, or it declares `blocking_steps`."""
    sandbox = None
    if request.param == "holds_sandbox":
        request.getfixturevalue("bwrap")
        import skyhub.sandbox

        sandbox = skyhub.sandbox.create(backend="local")

    def make(gate: threading.Event, started: threading.Event) -> GateEnv:
        if request.param == "last_turn":
            return GateEnv(gate, started, max_turns=WARMUP + 1)
        if request.param == "holds_sandbox":
            return GateEnv(gate, started, sandbox=sandbox)
        return GateEnv(gate, started, blocking_steps=True)

    make.kind = request.param  # type: ignore[attr-defined]
    try:
        yield make
    finally:
        if sandbox is not None:
            sandbox.close()


def test_other_episodes_step_while_one_blocks_in_send_recv(
        blocking_env: Callable[..., GateEnv]) -> None:
    gate, started = threading.Event(), threading.Event()
    a, b = blocking_env(gate, started), GateEnv(gate, started)
    main = threading.current_thread().name
    with VectorEnv([lambda: a, lambda: b], autoreset_mode="disabled") as venv:
        venv.reset()
        threads: dict[int, list[str]] = {0: [], 1: []}
        for _ in range(WARMUP):  # both envs' steps are fast: B (and A, where it may) go inline
            venv.send(["go", "go"])
            ids, _, _, _, _, infos = venv.recv(min_ready=2)
            for i, info in zip(ids, infos, strict=True):
                threads[int(i)].append(info["thread"])
        assert main in threads[1], "fast steps should have been stepped inline"
        if blocking_env.kind == "last_turn":  # type: ignore[attr-defined]
            assert main in threads[0]  # A's early turns were inline: only its last may block
        else:
            assert main not in threads[0]  # a sandbox env or a declared one: never inline
        venv.send(["block"], [0])  # A's verifier: must not run on this thread
        assert started.wait(GIVE_UP_S)
        for _ in range(3):  # B keeps stepping while A's step is in progress
            venv.send(["go"], [1])
            ids, obs, _, _, _, infos = venv.recv(min_ready=1)
            assert list(ids) == [1] and obs == ("ok",) and infos[0]["during"] is True
        gate.set()
        ids, obs, rewards, terms, _, infos = venv.recv(min_ready=1)
        assert list(ids) == [0] and obs == ("released",) and terms[0] and rewards[0] == 1.0
        assert infos[0]["thread"] != main


def test_lockstep_starts_the_other_envs_while_one_blocks(
        blocking_env: Callable[..., GateEnv]) -> None:
    """Env A (first in order) blocks until env B's step of the same lockstep step runs."""
    gate, started = threading.Event(), threading.Event()
    a, b = blocking_env(gate, started), GateEnv(gate, started)
    with VectorEnv([lambda: a, lambda: b], autoreset_mode="disabled") as venv:
        venv.reset()
        for _ in range(WARMUP):
            venv.step(["go", "go"])
        # "released": B's step ran while A's was waiting for it; held behind A (inline on
        # this thread, first in order), B would only have run once A gave up ("starved")
        obs, rewards, terms, _, _ = venv.step(["block", "open"])
        assert obs == ("released", "opened") and terms[0] and rewards[0] == 1.0


class FastEnv(TextEnv):
    """Fast steps; "wait" waits (at most `GIVE_UP_S`) for `started` to be set."""

    def __init__(self, started: threading.Event) -> None:
        super().__init__()
        self.tasks = TaskSet([Task("t0", "a task")])
        self.started = started

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.start_episode(seed, options)
        return "start", self.make_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.next_turn()
        waited = self.started.wait(GIVE_UP_S) if action == "wait" else True
        return "ok" if waited else "starved", 0.0, False, False, self.make_info(
            thread=threading.current_thread().name)


def test_fast_envs_still_step_inline_after_the_threaded_ones_start() -> None:
    """The fast path stays: an env that cannot block is stepped inline, and only once the
    envs that go to their threads were started: the inline step (first in env order) waits
    for the threaded one to begin."""
    gate, started = threading.Event(), threading.Event()
    fast = FastEnv(started)
    slow = GateEnv(gate, started, blocking_steps=True)
    main = threading.current_thread().name
    with VectorEnv([lambda: fast, lambda: slow]) as venv:
        venv.reset()
        for _ in range(WARMUP):
            venv.step(["go", "go"])
        gate.set()  # the slow env's step returns as soon as it starts
        obs, _, _, _, infos = venv.step(["wait", "block"])
        assert obs == ("ok", "released")
        assert infos[0]["thread"] == main and infos[1]["thread"] != main


def test_may_block_reads_the_declaration_the_turn_budget_and_sandboxes() -> None:
    gate, started = threading.Event(), threading.Event()
    env = GateEnv(gate, started, max_turns=3)
    assert not may_block(env)
    env.turn = 2
    assert may_block(env)  # the next step is the last
    env.blocking_steps = False  # the env's own word wins
    assert not may_block(env)
    assert not may_block(GateEnv(gate, started))


class _Clock:
    """`time` for the shell env's module, with `idle` seconds added: the wall time an
    episode spends between its steps, without waiting for it."""

    def __init__(self) -> None:
        import time

        self.real, self.idle = time, 0.0

    def monotonic(self) -> float:
        return self.real.monotonic() + self.idle

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_an_episode_s_deadline_counts_its_own_time_not_the_time_between_its_steps(
        bwrap: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A terminal (and Harbor) episode waiting between its steps, for the agent's model or
    for other episodes of a batch, keeps its time: an hour between two steps of a task with a
    few minutes' limit still lets the next step's commands run."""
    import skyhub
    from skyhub.shell import env as shell_env

    clock = _Clock()
    monkeypatch.setattr(shell_env, "time", clock)
    with skyhub.make("terminal-synth", backend="local", seed=0, n_tasks=1) as env:
        env.reset(seed=0)
        assert float(env.task.meta["timeout_s"]) < 3600  # type: ignore[union-attr]
        obs, _, term, trunc, _ = env.step("<bash>echo first</bash>")
        assert "first" in obs and not (term or trunc)
        clock.idle += 3600.0  # an hour spent outside the env
        obs, _, term, trunc, info = env.step("<bash>echo second</bash>")
        assert "second" in obs and "used up" not in obs, obs
        assert not (term or trunc) and info.get("ended_by") is None, info
