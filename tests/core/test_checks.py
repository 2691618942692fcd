"""`skyhub.eval.checks.check_env`: each check passes a correct env and catches the bug it is for.

The broken envs below each break one rule of the contract on top of `SayEnv` (tests/support),
a small correct env, so a failing check points at exactly one bug (and the other checks show
they still ran).
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium
import pytest

import skyhub
from skyhub.env import TextEnv
from skyhub.errors import EnvNotFound, UsageError
from skyhub.eval.checks import MALFORMED_ACTIONS, CheckReport, check_env
from skyhub.registry import unregister

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from skyhub_testenvs import SayEnv

ALL_CHECKS = ["gymnasium", "spaces", "info", "malformed", "turns", "seeding", "reference",
              "replay", "fork", "tools", "cleanup"]


class RaisesOnMalformed(SayEnv):
    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not action.startswith("<answer>"):
            raise ValueError("no <answer> tag")
        return super().step(action)


class MissingInfraError(SayEnv):
    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        del info["infra_error"]
        return obs, reward, terminated, truncated, info


class UnknownOutcome(SayEnv):
    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "outcome": "done"}


class NoRewardBreakdown(SayEnv):
    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        del info["reward_breakdown"]
        return obs, reward, terminated, truncated, info


class BoolReward(SayEnv):
    def step(self, action: str) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward > 0, terminated, truncated, info


class IgnoresSeed(SayEnv):
    """Walks through its tasks in order whatever the seed."""

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._calls = getattr(self, "_calls", -1) + 1
        self.task = self.tasks[self._calls % len(self.tasks)]
        return self.task.prompt, self.make_info()


class AlwaysFirstTask(SayEnv):
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.task = self.tasks[0]
        return self.task.prompt, self.make_info()


class WrongReference(SayEnv):
    def reference_action(self) -> str | None:
        return "<answer>wrong</answer>"


class BrokenReference(SayEnv):
    def reference_action(self) -> str | None:
        raise RuntimeError("reference broke")


class NeverEndsOnGarbage(SayEnv):
    """Asks again, forever, until it gets an <answer>."""

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if "<answer>" not in action:
            self.turn += 1
            return "Answer inside <answer></answer>.", 0.0, False, False, self.make_info()
        return super().step(action)


class Retries(SayEnv):
    """A correct env with a turn budget: a reply without an answer tag costs a turn."""

    def __init__(self) -> None:
        super().__init__()
        self.max_turns = 3

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if "<answer>" in action:
            return super().step(action)
        self.next_turn()
        if self.out_of_turns:
            return self.out_of_turns_step(reward_breakdown={"correct": 0.0})
        return (f"Answer inside <answer></answer>. {self.turns_left_note()}", 0.0, False, False,
                self.make_info())


class ForgetsToCountTurns(Retries):
    """Declares max_turns = 3 but never counts a turn, so its budget never runs out."""

    def next_turn(self) -> int:
        return self.turn


class IgnoresItsBudget(Retries):
    """Counts its turns but asks again, forever, whatever max_turns says."""

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if "<answer>" in action:
            return super().step(action)
        self.next_turn()
        return "Answer inside <answer></answer>.", 0.0, False, False, self.make_info()


class RandomHint(Retries):
    """From the second turn on, adds a hint drawn from the process-wide `random` (not the
    seeded `self.np_random`): the same reset and actions get another reply. (gymnasium's
    checker compares first steps only, so it does not see this.)"""

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        if obs and self.turn >= 2:
            obs = f"{obs} Hint #{random.randrange(10**9)}."
        return obs, reward, terminated, truncated, info


class SeededHint(Retries):
    """The same hint drawn from `self.np_random`, which reset seeds: deterministic."""

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        if obs and self.turn >= 2:
            obs = f"{obs} Hint #{int(self.np_random.integers(10**9))}."
        return obs, reward, terminated, truncated, info


class TimedHint(RandomHint):
    """RandomHint whose varying part is declared: replay ignores it."""

    replay_ignore = (r"Hint #\d+\.",)


class DiscreteActions(SayEnv):
    def __init__(self) -> None:
        super().__init__()
        self.action_space = gymnasium.spaces.Discrete(3)


class CloseRaises(SayEnv):
    def close(self) -> None:
        raise OSError("connection already gone")


_leftovers: list[Callable[[], None]] = []  # how to stop what the leaky envs left behind


class LeavesThread(SayEnv):
    def __init__(self) -> None:
        super().__init__()
        stop = threading.Event()
        threading.Thread(target=stop.wait, name="leaky-poller", daemon=True).start()
        _leftovers.append(stop.set)


class LeavesProcess(SayEnv):
    def __init__(self) -> None:
        super().__init__()
        proc = subprocess.Popen(["sleep", "60"])
        _leftovers.append(lambda: (proc.kill(), proc.wait()))


class StopsItsThread(SayEnv):
    """Has a worker thread, and stops it in close(): no leak."""

    def __init__(self) -> None:
        super().__init__()
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._stop.wait, name="tidy-worker", daemon=True)
        self._worker.start()

    def close(self) -> None:
        self._stop.set()
        self._worker.join()


@pytest.fixture
def register() -> Iterator[Callable[[type[TextEnv]], str]]:
    """Register an env class as `test-<name>`; unregistered (and leftovers stopped) after."""
    ids: list[str] = []

    def _register(cls: type[TextEnv]) -> str:
        env_id = f"test-{cls.__name__.lower()}"
        skyhub.register(env_id, cls, override=True)
        ids.append(env_id)
        return env_id

    yield _register
    for env_id in ids:
        unregister(env_id)
    while _leftovers:
        _leftovers.pop()()


def failed(report: CheckReport) -> list[str]:
    return [r.name for r in report.failed]


def test_correct_env_passes_every_check(register: Callable[[type[TextEnv]], str]) -> None:
    report = check_env(register(SayEnv))
    assert [r.name for r in report.results] == ALL_CHECKS
    assert report.ok, str(report)


@pytest.mark.parametrize(("env_id", "kwargs"), [
    ("toy-arith", {}), ("toy-lookup", {}), ("toy-lookup", {"max_turns": 2}),
    ("toy-arith", {"max_turns": 3}),
])
def test_toy_envs_pass_every_check(env_id: str, kwargs: dict[str, Any]) -> None:
    report = check_env(env_id, env_kwargs=kwargs)
    assert report.ok, str(report)


def test_check_flags_env_that_raises_on_malformed_action(register: Callable[..., str]) -> None:
    report = check_env(register(RaisesOnMalformed))
    assert "malformed" in failed(report)
    message = report["malformed"].message
    assert "ValueError: no <answer> tag" in message
    assert "empty ''" in message and "NUL byte 'a\\x00b'" in message
    # the other checks still ran and judged their own rules
    assert report["seeding"].passed and report["reference"].passed and report["cleanup"].passed


def test_check_flags_missing_info_key(register: Callable[..., str]) -> None:
    report = check_env(register(MissingInfraError))
    assert failed(report) == ["info"]
    assert "lacks 'infra_error'" in report["info"].message


def test_check_flags_outcome_outside_the_contract(register: Callable[..., str]) -> None:
    report = check_env(register(UnknownOutcome))
    assert "info" in failed(report)
    assert "outcome 'done'" in report["info"].message


def test_check_flags_final_step_without_reward_breakdown(register: Callable[..., str]) -> None:
    report = check_env(register(NoRewardBreakdown))
    assert failed(report) == ["info"]
    assert "reward_breakdown" in report["info"].message


def test_check_flags_bool_reward_and_keeps_gymnasium_warning_as_note(
        register: Callable[..., str]) -> None:
    report = check_env(register(BoolReward))
    assert failed(report) == ["info"]
    assert "is not a finite float" in report["info"].message
    gym = report["gymnasium"]
    assert gym.passed and any("reward" in note for note in gym.notes)
    assert not any("\x1b[" in note for note in gym.notes)


def test_check_flags_reset_that_ignores_the_seed(register: Callable[..., str]) -> None:
    report = check_env(register(IgnoresSeed))
    assert "seeding" in failed(report)
    assert "reset(seed=0) chose task" in report["seeding"].message


def test_check_flags_env_that_always_picks_the_same_task(register: Callable[..., str]) -> None:
    report = check_env(register(AlwaysFirstTask))
    assert failed(report) == ["seeding"]
    assert "16 different seeds all chose task 'say-0'" in report["seeding"].message


def test_single_task_env_gets_a_note_not_a_failure(register: Callable[..., str]) -> None:
    env_id = register(AlwaysFirstTask)
    report = check_env(env_id, env_kwargs={"n_tasks": 1})
    assert report.ok, str(report)
    assert any("1 task" in n for n in report["seeding"].notes)


def test_check_flags_reference_that_does_not_solve_the_task(register: Callable[..., str]) -> None:
    report = check_env(register(WrongReference))
    assert failed(report) == ["reference"]
    assert "outcome 'failure'" in report["reference"].message


def test_crashing_reference_is_reported_with_its_exception(register: Callable[..., str]) -> None:
    report = check_env(register(BrokenReference))
    assert failed(report) == ["reference"]
    assert "RuntimeError: reference broke" in report["reference"].message
    assert "in reference_action" in report["reference"].message


class NoReference(SayEnv):
    def reference_action(self) -> str | None:
        return None


def test_env_without_reference_skips_that_check_with_a_note() -> None:
    report = check_env(NoReference())
    assert report.ok, str(report)
    assert any("no reference" in n for n in report["reference"].notes)


def test_garbage_episode_that_never_ends_is_a_note(register: Callable[..., str]) -> None:
    report = check_env(register(NeverEndsOnGarbage))
    assert report.ok, str(report)
    assert any("did not end in 50 steps" in n and "NUL byte" in n
               for n in report["malformed"].notes)


def test_env_with_a_turn_budget_passes_the_turns_check(register: Callable[..., str]) -> None:
    report = check_env(register(Retries))
    assert report.ok, str(report)
    assert "within the turn budget" in report["turns"].message


def test_env_without_a_turn_budget_skips_the_turns_check_with_a_note() -> None:
    report = check_env(SayEnv())
    assert report["turns"].passed and report["turns"].message == "skipped"
    assert any("no max_turns" in n for n in report["turns"].notes)


def test_check_fails_env_that_forgets_to_count_turns(register: Callable[..., str]) -> None:
    report = check_env(register(ForgetsToCountTurns))
    assert failed(report) == ["turns"]
    assert "info['turn'] is 0, not 1" in report["turns"].message
    assert "next_turn()" in report["turns"].message


def test_check_fails_env_that_does_not_end_within_max_turns(register: Callable[..., str]) -> None:
    report = check_env(register(IgnoresItsBudget))
    assert failed(report) == ["turns"]
    assert "did not end within its turn budget (3 turns, max_turns=3)" in report["turns"].message


def test_check_flags_env_whose_reply_is_not_reproducible(register: Callable[..., str]) -> None:
    report = check_env(register(RandomHint))
    # and a fork by replay is refused, for the same reason
    assert failed(report) == ["replay", "fork"]
    assert "cannot be forked by replay" in report["fork"].message
    message = report["replay"].message
    # the first differing observation, both versions: the random-action episode's first reply
    assert "the random-action episode (reset seed 1, task 'say-1')" in message
    assert "at step 2: observation differs" in message
    assert message.count("Hint #") == 2 and "replay_ignore" in message


def test_replay_check_passes_seeded_randomness_and_declared_variation(
        register: Callable[..., str]) -> None:
    for cls in (SeededHint, TimedHint):
        report = check_env(register(cls))
        assert report.ok, str(report)
        assert report["replay"].message == ("replayed episodes were identical: reference "
                                            "(1 step), random (3 steps)")


def test_check_flags_non_text_action_space(register: Callable[..., str]) -> None:
    report = check_env(register(DiscreteActions))
    assert "spaces" in failed(report)
    assert "action_space is Discrete" in report["spaces"].message


def test_check_flags_close_that_raises(register: Callable[..., str]) -> None:
    report = check_env(register(CloseRaises))
    assert "cleanup" in failed(report) and report["seeding"].passed
    assert "OSError: connection already gone" in report["cleanup"].message


def test_check_flags_thread_left_running_after_close(register: Callable[..., str]) -> None:
    report = check_env(register(LeavesThread))
    assert failed(report) == ["cleanup"]
    assert "thread 'leaky-poller'" in report["cleanup"].message


def test_check_flags_child_process_left_running_after_close(
        register: Callable[..., str]) -> None:
    report = check_env(register(LeavesProcess))
    assert failed(report) == ["cleanup"]
    assert "sleep 60" in report["cleanup"].message


def test_threads_stopped_in_close_are_not_flagged(register: Callable[..., str]) -> None:
    report = check_env(register(StopsItsThread))
    assert report.ok, str(report)


def test_check_accepts_an_instance_and_closes_it() -> None:
    env = skyhub.make("toy-arith")
    report = check_env(env)
    assert report.ok, str(report)
    assert env.closed


def test_instance_without_spec_skips_cross_instance_seeding_with_a_note() -> None:
    report = check_env(SayEnv())
    assert report.ok, str(report)
    assert any("no spec" in n for n in report["seeding"].notes)


def test_env_kwargs_with_an_instance_is_a_usage_error() -> None:
    with pytest.raises(TypeError, match="env id"):
        check_env(SayEnv(), env_kwargs={"n_tasks": 2})


class BrokenInit(SayEnv):
    def __init__(self, **kwargs: Any) -> None:
        raise ZeroDivisionError("the env's own bug")


def test_env_that_cannot_be_made_is_one_failed_check(register: Callable[..., str]) -> None:
    report = check_env(register(BrokenInit))
    assert [r.name for r in report.results] == ["make"]
    assert not report.ok
    assert "ZeroDivisionError: the env's own bug" in report["make"].message


def test_kwargs_the_env_refuses_are_the_callers_usage_error() -> None:
    """A value the env refuses (max_turns=0) is the caller's to fix, like an unknown kwarg:
    it propagates instead of being reported as the env failing a check."""
    with pytest.raises(UsageError, match="max_turns must be >= 1"):
        check_env("toy-arith", env_kwargs={"max_turns": 0})


def test_unknown_env_id_raises_env_not_found() -> None:
    with pytest.raises(EnvNotFound, match="toy-arith"):
        check_env("toy-arth")


def test_report_renders_as_a_table_with_a_row_per_check(register: Callable[..., str]) -> None:
    from rich.console import Console

    report = check_env(register(WrongReference))
    table = report.to_table()
    assert table.row_count == len(ALL_CHECKS)
    console = Console(width=200, record=True)
    console.print(table)
    text = console.export_text()
    assert "FAIL" in text and "PASS" in text and "1 of 11 checks failed" in text


def test_every_malformed_action_is_tried() -> None:
    seen: list[str] = []

    class Recording(SayEnv):
        def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
            seen.append(action)
            return super().step(action)

    check_env(Recording())
    for action in MALFORMED_ACTIONS.values():
        if action is not None:
            assert action in seen
    assert any(len(a) == 100_000 for a in seen)


class LeavesContainer(SayEnv):
    """Starts a Docker sandbox and never closes it."""

    def __init__(self) -> None:
        super().__init__()
        import skyhub.sandbox

        box = skyhub.sandbox.create(backend="docker")
        _leftovers.append(box.close)


class ClosesItsContainer(SayEnv):
    def __init__(self) -> None:
        super().__init__()
        import skyhub.sandbox

        self.box = skyhub.sandbox.create(backend="docker")

    def close(self) -> None:
        self.box.close()


@pytest.mark.docker
def test_container_left_running_fails_cleanup(register: Callable[[type[TextEnv]], str],
                                              docker_daemon: None) -> None:
    from skyhub.sandbox import images

    images.build(["default"], quiet=True)
    report = check_env(register(LeavesContainer))
    assert failed(report) == ["cleanup"]
    assert "container" in report.results[-1].message
    tidy = check_env(register(ClosesItsContainer))
    assert tidy.ok, str(tidy)
    assert "container" in tidy.results[-1].message  # containers were looked at


def test_a_process_wide_daemon_thread_is_not_an_envs_leak() -> None:
    """The SQLite watchdog starts with the first statement of the process and serves every
    env after it: the cleanup check must not blame whichever env happened to start it."""
    import threading

    from skyhub.eval.checks import process_wide

    stop = threading.Event()
    shared = threading.Thread(target=stop.wait, daemon=True, name="x-shared")
    shared.skyhub_process_wide = True  # type: ignore[attr-defined]
    plain = threading.Thread(target=stop.wait, daemon=True, name="x-plain")
    joined = threading.Thread(target=stop.wait, name="x-marked-but-not-daemon")
    joined.skyhub_process_wide = True  # type: ignore[attr-defined]
    assert process_wide(shared) and not process_wide(plain) and not process_wide(joined)
    assert process_wide(threading.Thread(target=stop.wait, daemon=True, name="tqdm_monitor"))
