"""harbor-examples with native tool calls (`bash`, `done`): the tool oracle (solve.sh run as
Harbor's oracle runs it) and the same actions as tag turns score alike, in Docker."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import skyhub
from skyhub import ToolCall

pytestmark = [pytest.mark.slow, pytest.mark.docker]


@pytest.fixture(scope="module")
def examples(docker_daemon: None) -> Iterator[skyhub.TextEnv]:
    env = skyhub.make("harbor-examples", max_turns=4)
    yield env
    env.close()


def ended(env: skyhub.TextEnv, actions: list[Any] | Callable[[], Any]) -> tuple[Any, ...]:
    """Play `actions` (or a policy, at most 3 turns) until the episode ends: what is scored."""
    for action in actions if isinstance(actions, list) else (actions for _ in range(3)):
        _obs, reward, terminated, truncated, info = env.step(
            action if isinstance(actions, list) else actions())
        if terminated or truncated:
            break
    return (reward, terminated, truncated, info["outcome"], info["infra_error"],
            info["reward_breakdown"], info.get("ended_by"))


def test_the_tool_oracle_scores_what_the_tag_oracle_does(examples: skyhub.TextEnv) -> None:
    for task in examples.tasks:
        scored = []
        for oracle in (examples.reference_action, examples.reference_tool_calls):
            examples.reset(options={"task_id": task.id})
            scored.append(ended(examples, oracle))
        assert scored[1] == scored[0], task.id
        assert scored[0][:4] == (1.0, True, False, "success"), task.id
    examples.reset(options={"task_id": examples.tasks[0].id})
    info = examples.step(examples.reference_tool_calls())[4]  # run as Harbor's oracle runs it
    assert "[solve.sh: exit 0]" in info["tool_results"][0]["content"]


def test_tag_and_tool_episodes_score_alike(examples: skyhub.TextEnv) -> None:
    task = examples.tasks[0]
    for calls in ([ToolCall("a", "bash", {"command": "ls -la /app 2>&1; pwd"}),
                   ToolCall("b", "done", {})],
                  [ToolCall("a", "bash", {"command": "  "}),
                   ToolCall("b", "bash", {"command": "echo 1 > /tmp/one"}),
                   ToolCall("c", "bash", {"command": "false"}),
                   ToolCall("d", "bash", {"command": "true"})]):
        examples.reset(options={"task_id": task.id})
        by_tags = ended(examples, [f"<bash>{dict(c.arguments)['command']}</bash>"
                                   if c.name == "bash" else "<done/>" for c in calls])
        examples.reset(options={"task_id": task.id})
        by_tools = ended(examples, [[c] for c in calls])
        assert by_tools == by_tags, calls
        assert by_tools[3] == "failure"


def test_malformed_and_late_calls_are_answered(examples: skyhub.TextEnv) -> None:
    examples.reset(options={"task_id": examples.tasks[0].id})
    calls = [ToolCall("u", "python", {"code": "1"}), ToolCall("j", "bash", "not json"),
             ToolCall("d", "done", {}), ToolCall("b", "bash", {"command": "true"})]
    _obs, _r, terminated, _t, info = examples.step(calls)
    assert terminated and info["outcome"] == "failure"
    assert [(r["call_id"], r["error"]) for r in info["tool_results"]] == [
        ("u", True), ("j", True), ("d", False), ("b", True)]
    assert info["reward_breakdown"]["format_errors"] == 2.0


def test_the_tools_prompt_follows_the_isolation(docker_daemon: None) -> None:
    tags = skyhub.make("harbor-examples")
    tools = skyhub.make("harbor-examples", protocol="tools")
    strict = skyhub.make("harbor-examples", protocol="tools", isolation="training")
    assert "<bash>" in tags.system_prompt and "`bash`" not in tags.system_prompt
    assert "`bash`" in tools.system_prompt and "<bash>" not in tools.system_prompt
    assert "there is no network" not in tools.system_prompt
    assert "there is no network" in strict.system_prompt
    for env in (tags, tools, strict):
        env.close()
