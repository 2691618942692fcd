"""`skyhub replay`: recorded episodes played again on a fresh env are identical when the env is
deterministic, and any change (an observation, a reward, where the episode ends, a reply
drawn from an unseeded random generator) is reported at its first step with a diff."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import skyhub
from skyhub import Task, TaskSet, TextEnv
from skyhub.cli.main import app
from skyhub.env import StepResult
from skyhub.eval import harness
from skyhub.eval.agents import ScriptAgent, load_agent
from skyhub.eval.replay import (
    DIFFERS,
    IDENTICAL,
    UNREPLAYABLE,
    load_episodes,
    recorded_turns,
    replay_file,
    text_diff,
)


class Guess(TextEnv):
    """Guess a digit in 3 turns; a wrong guess gets "wrong" and a ticket number drawn from
    `self.ticket()`: the seeded `np_random` here, so the env is deterministic."""

    def __init__(self) -> None:
        super().__init__(max_turns=3)
        self.tasks = TaskSet(Task(f"d{k}", "Guess my digit, in <answer>.", str(k))
                             for k in range(10))

    def ticket(self) -> int:
        return int(self.np_random.integers(10**9))

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task = self.start_episode(seed, options)
        return task.prompt, self.make_info()

    def step(self, action: str) -> StepResult:
        assert self.task is not None
        self.next_turn()
        if action.strip() == f"<answer>{self.task.answer}</answer>":
            return "", 1.0, True, False, self.make_info("success", reward_breakdown={"hit": 1.0})
        if self.out_of_turns:
            return self.out_of_turns_step(reward_breakdown={"hit": 0.0})
        return (f"wrong; ticket #{self.ticket()} {self.turns_left_note()}", 0.0, False, False,
                self.make_info())

    def reference_action(self) -> str | None:
        return None if self.task is None else f"<answer>{self.task.answer}</answer>"


class UnseededGuess(Guess):
    """The bug replay is for: the ticket comes from the process-wide `random`, not from the
    env's seeded generator, so the same reset and actions get another reply."""

    def ticket(self) -> int:
        return random.randrange(10**9)


class DeclaredGuess(UnseededGuess):
    """The same reply, with the varying part declared: replay ignores it."""

    replay_ignore = (r"ticket #\d+",)


def wrong_then_right(messages: list[dict[str, str]]) -> str:
    """Two wrong guesses, then every digit in turn (so some episodes are solved, some not)."""
    turns = sum(m["role"] == "assistant" for m in messages)
    return "<answer>x</answer>" if turns < 2 else "<answer>2</answer>"


def record_run(tmp_path: Path, env_id: str, agent: Any, n: int = 3, **kwargs: Any) -> Path:
    out = tmp_path / env_id
    harness.run(env_id, agent, n=n, concurrency=2, out=out, env_kwargs=kwargs or None)
    return out


@pytest.fixture
def guess(tmp_env_id: str) -> str:
    skyhub.register(tmp_env_id, Guess)
    return tmp_env_id


def rewrite(run: Path, index: int, change: Any) -> None:
    """Apply `change(record)` to the episode with `index` in run/episodes.jsonl."""
    path = run / "episodes.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        if r["index"] == index:
            change(r)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_deterministic_env_replays_identically_from_the_command_line(
        tmp_path: Path, guess: str) -> None:
    run = record_run(tmp_path, guess, ScriptAgent(wrong_then_right, parallel=False), n=4)
    r = CliRunner().invoke(app, ["replay", str(run / "episodes.jsonl")])
    assert r.exit_code == 0, r.output
    assert "4 identical, 0 differ, 0 could not replay (of 4 episodes)" in r.output
    summary = replay_file(run)
    assert [x.steps for x in summary.results] == [3, 3, 3, 3]  # every recorded action sent
    assert [x.status for x in summary.results] == [IDENTICAL] * 4


def test_changed_observation_is_the_first_difference_with_a_diff(
        tmp_path: Path, guess: str) -> None:
    run = record_run(tmp_path, guess, ScriptAgent(wrong_then_right, parallel=False))

    def edit(rec: dict[str, Any]) -> None:
        second = [m for m in rec["messages"] if m["role"] == "user"][2]  # step 2's reply
        second["content"] = second["content"].replace("wrong", "close")

    rewrite(run, 1, edit)
    summary = replay_file(run)
    assert [x.status for x in summary.results] == [IDENTICAL, DIFFERS, IDENTICAL]
    diff = summary.results[1].difference
    assert (diff.where, diff.what) == ("step 2", "observation")
    assert diff.recorded.startswith("close; ticket #") and diff.replayed.startswith("wrong")
    assert "recorded: close; ticket #" in str(diff) and "(from character 0)" in str(diff)
    r = CliRunner().invoke(app, ["replay", str(run)])
    assert r.exit_code == 1 and "2 identical, 1 differ, 0 could not replay" in r.output


def test_changed_reward_and_outcome_are_reported(tmp_path: Path, guess: str) -> None:
    run = record_run(tmp_path, guess, ScriptAgent(wrong_then_right, parallel=False))
    rewrite(run, 0, lambda rec: rec["rewards"].__setitem__(0, 0.5))
    rewrite(run, 1, lambda rec: rec.__setitem__("outcome", "success"))
    summary = replay_file(run)
    reward, outcome = summary.results[0].difference, summary.results[1].difference
    assert (reward.where, reward.what, reward.recorded, reward.replayed) == (
        "step 1", "reward", 0.5, 0.0)
    assert (outcome.what, outcome.recorded, outcome.replayed) == ("outcome", "success",
                                                                   "failure")


def test_episode_that_ends_elsewhere_is_reported(tmp_path: Path, guess: str) -> None:
    run = record_run(tmp_path, guess, load_agent("oracle"), n=2)

    def one_more_step(rec: dict[str, Any]) -> None:  # as if the env had not ended there
        rec["messages"].append({"role": "assistant", "content": "<answer>0</answer>"})
        rec["rewards"].append(0.0)

    rewrite(run, 0, one_more_step)
    rewrite(run, 1, lambda rec: rec.update(terminated=False, truncated=True))
    first, second = replay_file(run).results
    assert (first.difference.what, first.difference.replayed) == (
        "end", "the replay ended after 1 of 2 steps")
    assert (second.difference.what, second.difference.recorded,
            second.difference.replayed) == ("end (terminated, truncated)", (False, True),
                                            (True, False))


def test_env_that_draws_its_reply_unseeded_differs_at_its_first_reply(
        tmp_path: Path, tmp_env_id: str) -> None:
    skyhub.register(tmp_env_id, UnseededGuess)
    run = record_run(tmp_path, tmp_env_id, ScriptAgent(wrong_then_right, parallel=False))
    r = CliRunner().invoke(app, ["replay", str(run)])
    assert r.exit_code == 1, r.output
    assert "0 identical, 3 differ" in r.output
    for result in replay_file(run).results:
        diff = result.difference
        assert (diff.where, diff.what) == ("step 1", "observation")
        assert diff.recorded.startswith("wrong; ticket #") and diff.recorded != diff.replayed
    # --ignore masks what varies: then nothing differs
    r = CliRunner().invoke(app, ["replay", str(run), "--ignore", r"#\d+"])
    assert r.exit_code == 0 and "3 identical" in r.output, r.output


def test_env_declared_replay_ignore_masks_its_varying_part(tmp_path: Path,
                                                             tmp_env_id: str) -> None:
    skyhub.register(tmp_env_id, DeclaredGuess)
    run = record_run(tmp_path, tmp_env_id, ScriptAgent(wrong_then_right, parallel=False))
    assert replay_file(run).counts == {IDENTICAL: 3, DIFFERS: 0, UNREPLAYABLE: 0}


def test_records_without_what_replay_needs_say_why(tmp_path: Path, guess: str) -> None:
    run = record_run(tmp_path, guess, load_agent("oracle"), n=3)
    rewrite(run, 0, lambda rec: rec.update(infra_error=True, error="docker went away",
                                           error_source="env"))
    rewrite(run, 1, lambda rec: rec.pop("seed"))
    rewrite(run, 2, lambda rec: rec.pop("rewards"))
    reasons = [x.reason for x in replay_file(run).results]
    assert "ended in an infra error (env: docker went away)" in reasons[0]
    assert "has no seed" in reasons[1] and "no per-step rewards" in reasons[2]
    r = CliRunner().invoke(app, ["replay", str(run)])
    assert r.exit_code == 0 and "0 identical, 0 differ, 3 could not replay" in r.output
    assert CliRunner().invoke(app, ["replay", str(run), "--strict"]).exit_code == 1


def test_kwargs_come_from_run_json_or_the_command_line(tmp_path: Path) -> None:
    run = record_run(tmp_path, "toy-lookup", load_agent("oracle"), n=2, max_turns=2)
    lines = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    assert all(r["env_kwargs"] == {"max_turns": 2} for r in lines)  # each line has its own
    copied = tmp_path / "copied.jsonl"  # the episodes without their run.json
    copied.write_text((run / "episodes.jsonl").read_text())
    assert replay_file(copied).counts[IDENTICAL] == 2
    alone = tmp_path / "alone.jsonl"  # ... and from before records carried their kwargs
    alone.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "env_kwargs"})
                             + "\n" for r in lines))
    assert replay_file(run).counts[IDENTICAL] == 2  # max_turns=2 from run.json
    missing = replay_file(alone).results[0]
    assert missing.status == UNREPLAYABLE and "--default-kwargs" in missing.reason
    # with other kwargs the system prompt (it states the budget) is not the recorded one
    other = replay_file(alone, env_kwargs={}).results[0]
    assert (other.status, other.difference.what) == (DIFFERS, "system prompt")
    r = CliRunner().invoke(app, ["replay", str(alone), "max_turns=2"])
    assert r.exit_code == 0 and "2 identical" in r.output, r.output


def test_json_output_and_index_selection(tmp_path: Path, guess: str) -> None:
    run = record_run(tmp_path, guess, ScriptAgent(wrong_then_right, parallel=False), n=3)
    r = CliRunner().invoke(app, ["replay", str(run), "--json", "--index", "2"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert (out["identical"], out["episodes"]) == (1, 1)
    assert [(x["index"], x["status"], x["steps"]) for x in out["results"]] == [
        (2, "identical", 3)]


def test_unknown_env_or_file_is_reported_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text(json.dumps({"index": 0, "env_id": "no-such-env", "seed": 0,
                                "env_kwargs": {}, "messages": [], "rewards": []}) + "\n")
    result = replay_file(path).results[0]
    assert result.status == UNREPLAYABLE and "EnvNotFound" in result.reason
    r = CliRunner().invoke(app, ["replay", str(tmp_path / "missing.jsonl")])
    assert r.exit_code == 2 and "not found" in r.output


def test_load_episodes_keeps_the_last_line_per_index_and_skips_a_torn_line(
        tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    lines = [{"index": 1, "v": "a"}, {"index": 0, "v": "b"}, {"index": 1, "v": "c"},
             {"v": "no index"}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"index": 2, "v"')
    assert [r["v"] for r in load_episodes(path)] == ["b", "c", "no index"]


def test_observations_are_read_back_from_messages_empty_ones_included() -> None:
    from skyhub.chat import to_messages

    turns = [("<lookup>k1</lookup>", "k1 = amber"), ("hm", ""), ("<answer>amber</answer>", "")]
    record = {"messages": to_messages("rules", "first", turns)}
    assert recorded_turns(record) == ("rules", "first", [a for a, _ in turns],
                                      [o for _, o in turns])


def test_multiline_texts_get_a_unified_diff() -> None:
    diff = text_diff("a\nb\nc\n", "a\nB\nc\n")
    assert "-b" in diff and "+B" in diff and "--- recorded" in diff
