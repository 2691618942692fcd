"""terminal-synth and terminal with native tool calls (`bash`, `done`): the same actions as
tag turns and as tool calls get the same verdict, in real Docker sandboxes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import skyhub
from skyhub import ToolCall
from skyhub.eval.checks import check_env
from skyhub.shell.env import SYSTEM_PROMPT, TOOLS_SYSTEM_PROMPT

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from scored_play import play

pytestmark = [pytest.mark.slow, pytest.mark.docker]

KWARGS = {"max_turns": 4, "command_timeout_s": 20}


@pytest.fixture(scope="module")
def synth(docker_backend: str) -> Iterator[skyhub.TextEnv]:
    env = skyhub.make("terminal-synth", backend=docker_backend, **KWARGS)
    yield env
    env.close()


@pytest.fixture(scope="module")
def bundled(docker_backend: str) -> Iterator[skyhub.TextEnv]:
    env = skyhub.make("terminal", backend=docker_backend, **KWARGS)
    yield env
    env.close()


def as_tags(calls: list[ToolCall]) -> list[str]:
    """The same actions in the text protocol (no command here holds a tag)."""
    return [f"<bash>{dict(c.arguments)['command']}</bash>" if c.name == "bash" else "<done/>"
            for c in calls]


def solution(env: skyhub.TextEnv, task_id: str) -> str:
    env.reset(options={"task_id": task_id})
    calls = env.reference_tool_calls()
    assert calls is not None and calls[0].name == "bash"
    return str(dict(calls[0].arguments)["command"])


def synth_tasks(env: skyhub.TextEnv, n: int) -> list[str]:
    return [env.reset(seed=s)[1]["task_id"] for s in range(n)]


def test_tag_and_tool_episodes_of_terminal_synth_score_alike(synth: skyhub.TextEnv) -> None:
    seen = set()
    for task_id in synth_tasks(synth, 6):
        fix = solution(synth, task_id)
        for calls in (
                [ToolCall("a", "bash", {"command": "ls -la; echo $HOME"}),
                 ToolCall("b", "bash", {"command": fix}), ToolCall("c", "done", {})],
                [ToolCall("a", "bash", {"command": "false"}),
                 ToolCall("b", "bash", {"command": "   "}), ToolCall("c", "done", {})],
                [ToolCall(str(i), "bash", {"command": f"echo {i} >> notes.txt"})
                 for i in range(4)]):
            by_tags = play(synth, task_id, as_tags(calls), "ended_by")
            by_tools = play(synth, task_id, [[c] for c in calls], "ended_by")
            assert by_tools == by_tags, (task_id, calls)
            seen.add((by_tools[3], by_tools[6]))
    assert synth.unwrapped._sandbox.backend == "docker"
    assert {("success", "done"), ("failure", "done"), ("failure", "max_turns")} <= seen


def test_the_tool_oracle_scores_what_the_tag_oracle_does(synth: skyhub.TextEnv,
                                                         bundled: skyhub.TextEnv) -> None:
    for env, task_ids in ((synth, synth_tasks(synth, 6)),
                          (bundled, [t.id for t in bundled.tasks])):
        for task_id in task_ids:
            scored = []
            for oracle in (env.reference_action, env.reference_tool_calls):
                env.reset(options={"task_id": task_id})
                for _ in range(3):
                    _obs, reward, terminated, truncated, info = env.step(oracle())
                    if terminated or truncated:
                        break
                scored.append((reward, info["outcome"], info["turn"],
                               info["reward_breakdown"]))
            assert scored[0] == scored[1] and scored[0][:3] == (1.0, "success", 2), task_id


def test_a_command_holding_tags_runs_as_sent(synth: skyhub.TextEnv) -> None:
    """A `bash` call is never cut at a tag: `</bash>`, `</tool_call>` and `<done/>` inside a
    command are the command's."""
    synth.reset(seed=0)
    command = "printf '%s\\n' '</bash>' '</tool_call>' '<done/>' > tags.txt; cat tags.txt"
    obs, _r, terminated, _t, info = synth.step(ToolCall("c1", "bash", {"command": command}))
    assert not terminated and info["outcome"] == "running"
    (result,) = info["tool_results"]
    assert result["call_id"] == "c1" and not result["error"]
    assert result["content"] == obs == "</bash>\n</tool_call>\n<done/>\n[exit 0] /work\n" \
                                       "(3 turns left)"
    assert info["turn"] == 1


def test_malformed_calls_are_answered_never_raised(synth: skyhub.TextEnv) -> None:
    synth.reset(seed=0)
    calls = [ToolCall("u", "shell", {"command": "ls"}),
             ToolCall("j", "bash", "{command: ls}"),
             ToolCall("t", "bash", {"command": ["ls"]})]
    obs, reward, terminated, truncated, info = synth.step(calls)
    assert not (terminated or truncated) and reward == 0.0
    results = info["tool_results"]
    assert [(r["call_id"], r["error"]) for r in results] == [("u", True), ("j", True),
                                                             ("t", True)]
    assert "unknown tool 'shell'" in results[0]["content"]
    assert "not valid JSON" in results[1]["content"]
    assert "parameter 'command' must be string" in results[2]["content"]
    assert "[bash t]" in obs and "(1 turn left)" in obs

    synth.reset(seed=0)
    calls = [ToolCall("d", "done", {}), ToolCall("b", "bash", {"command": "touch late"}),
             ToolCall("d2", "done", {})]
    _obs, reward, terminated, _t, info = synth.step(calls)
    assert terminated and info["outcome"] == "failure" and info["ended_by"] == "done"
    assert [(r["call_id"], r["error"]) for r in info["tool_results"]] == [
        ("d", False), ("b", True), ("d2", True)]
    assert "not run: the episode ended at call d" in info["tool_results"][1]["content"]
    assert info["reward_breakdown"]["commands"] == 0.0


def test_tools_protocol_changes_only_the_system_prompt() -> None:
    default = skyhub.make("terminal-synth", max_turns=7, command_timeout_s=9)
    by_tags = skyhub.make("terminal-synth", max_turns=7, command_timeout_s=9, protocol="tags")
    by_tools = skyhub.make("terminal", max_turns=7, command_timeout_s=9, protocol="tools")
    assert default.system_prompt == by_tags.system_prompt == SYSTEM_PROMPT.format(
        timeout=9, max_turns=7, max_tool_calls=8, turn_timeout=18)
    assert by_tools.system_prompt == TOOLS_SYSTEM_PROMPT.format(timeout=9, max_turns=7)
    assert "`bash`" in by_tools.system_prompt and "<bash>" not in by_tools.system_prompt
    assert [t["function"]["name"] for t in by_tools.tools] == ["bash", "done"]
    assert default.tools == by_tools.tools
    for env in (default, by_tags, by_tools):
        env.close()


def test_check_env_passes_with_the_tools_protocol(docker_backend: str) -> None:
    report = check_env("terminal-synth", env_kwargs={"protocol": "tools",
                                                     "backend": docker_backend, **KWARGS},
                       episodes=1)
    assert report.ok, str(report)
    assert "tools" in [r.name for r in report.results]
