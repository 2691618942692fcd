"""python-code and python-math with native tool calls (`run_code`, `submit`): the same
actions as tag turns and as tool calls get the same verdict, on real kernels in Docker."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import skyhub
from skyhub import ToolCall
from skyhub.envs.python import protocol
from skyhub.errors import UsageError
from skyhub.eval.checks import check_env

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from scored_play import play

pytestmark = [pytest.mark.slow, pytest.mark.docker]

KWARGS = {"max_turns": 3, "cell_timeout_s": 5}


@pytest.fixture(scope="module")
def code_env(docker_backend: str) -> Iterator[skyhub.TextEnv]:
    env = skyhub.make("python-code", backend=docker_backend, test_timeout_s=5, **KWARGS)
    yield env
    env.close()


@pytest.fixture(scope="module")
def math_env(docker_backend: str) -> Iterator[skyhub.TextEnv]:
    env = skyhub.make("python-math", backend=docker_backend, **KWARGS)
    yield env
    env.close()


def as_tags(calls: list[ToolCall]) -> list[str]:
    """The same actions in the text protocol (no code here holds a tag)."""
    out = []
    for c in calls:
        args = c.arguments
        assert isinstance(args, dict)
        out.append(f"<python>{args['code']}</python>" if c.name == "run_code" else
                   f"<answer>{args.get('program', args.get('answer'))}</answer>")
    return out


def code_episodes(task: skyhub.Task) -> list[list[ToolCall]]:
    program = str(task.answer)
    return [
        [ToolCall("a", "run_code", {"code": "x = 6 * 7\nprint(x)"}),
         ToolCall("b", "submit", {"program": program})],
        [ToolCall("a", "run_code", {"code": "1 / 0"}),
         ToolCall("b", "submit", {"program": f"```python\n{program}\n```"})],
        [ToolCall("a", "submit", {"program": "def nothing():\n    pass\n"})],
        [ToolCall("a", "run_code", {"code": "   "}),
         ToolCall("b", "run_code", {"code": "import time\ntime.sleep(0.1)"}),
         ToolCall("c", "run_code", {"code": "print('out of turns')"})],
    ]


def test_tag_and_tool_episodes_of_python_code_score_alike(code_env: skyhub.TextEnv) -> None:
    tasks = list(code_env.tasks)
    kinds = {t.meta["tests"]["kind"] for t in tasks}
    sample = [next(t for t in tasks if t.meta["tests"]["kind"] == k) for k in sorted(kinds)]
    seen = set()
    for task in sample:
        for calls in code_episodes(task):
            by_tags = play(code_env, task.id, as_tags(calls))
            by_tools = play(code_env, task.id, [[c] for c in calls])
            assert by_tools == by_tags, (task.id, calls)
            seen.add(by_tools[3])
    assert seen == {"success", "failure"}


def test_tag_and_tool_episodes_of_python_math_score_alike(math_env: skyhub.TextEnv) -> None:
    outcomes = []
    sample = list(math_env.tasks)[::4]  # a reset is a new kernel: ~2 s on a loaded machine
    for task in sample:
        gold = str(task.answer)
        for calls in ([ToolCall("a", "run_code", {"code": "import sympy\nsympy.Integer(7)"}),
                       ToolCall("b", "submit", {"answer": gold})],
                      [ToolCall("a", "submit", {"answer": f"\\boxed{{{gold}}}"})],
                      [ToolCall("a", "submit", {"answer": "-12345/7"})]):
            by_tags = play(math_env, task.id, as_tags(calls))
            by_tools = play(math_env, task.id, [[c] for c in calls])
            assert by_tools == by_tags, (task.id, calls)
            outcomes.append(by_tools[3])
    assert outcomes.count("success") == 2 * len(sample)
    assert outcomes.count("failure") == len(sample)


def test_the_tool_oracle_scores_what_the_tag_oracle_does(code_env: skyhub.TextEnv,
                                                         math_env: skyhub.TextEnv) -> None:
    for env, tasks in ((code_env, list(code_env.tasks)), (math_env, list(math_env.tasks)[::2])):
        for task in tasks:
            env.reset(options={"task_id": task.id})
            tag = env.step(env.reference_action())
            env.reset(options={"task_id": task.id})
            calls = env.reference_tool_calls()
            assert calls is not None and [c.name for c in calls] == ["submit"]
            tool = env.step(calls)
            assert (tool[1], tool[4]["outcome"]) == (tag[1], tag[4]["outcome"]) == (
                1.0, "success"), task.id
            assert tool[4]["reward_breakdown"] == tag[4]["reward_breakdown"]
            assert [r["call_id"] for r in tool[4]["tool_results"]] == [calls[0].id]


def test_code_holding_tags_runs_as_sent(code_env: skyhub.TextEnv) -> None:
    """A `run_code` call is never parsed as text: code printing `<answer>` or `</python>` runs
    in the kernel (as a tag turn it would have been an answer)."""
    code_env.reset(options={"task_id": code_env.tasks[0].id})
    code = "s = '</python><answer>x</answer>'\nprint(s * 2)"
    obs, reward, terminated, _trunc, info = code_env.step(ToolCall("c1", "run_code",
                                                                   {"code": code}))
    assert not terminated and reward == 0.0 and info["outcome"] == "running"
    (result,) = info["tool_results"]
    assert result == {"call_id": "c1", "name": "run_code", "error": False,
                      "content": "</python><answer>x</answer></python><answer>x</answer>\n"
                                 "(2 turns left)"}
    assert obs == result["content"]  # the wrapping is the text protocol's, not the tool's
    assert code_env.step(f"<python>{code}</python>")[2]  # as a tag turn: an answer


def test_malformed_calls_are_answered_never_raised(math_env: skyhub.TextEnv) -> None:
    task = math_env.tasks[0]
    math_env.reset(options={"task_id": task.id})
    calls = [ToolCall("u", "run_python", {"code": "1"}),
             ToolCall("j", "run_code", '{"code": "1"'),
             ToolCall("t", "run_code", {"code": 5})]
    obs, reward, terminated, truncated, info = math_env.step(calls)
    results = info["tool_results"]
    assert [r["call_id"] for r in results] == ["u", "j", "t"]
    assert all(r["error"] for r in results) and truncated and not terminated
    assert "unknown tool 'run_python'" in results[0]["content"]
    assert "not valid JSON" in results[1]["content"]
    assert "parameter 'code' must be string" in results[2]["content"]
    assert info["reward_breakdown"]["format_errors"] == 3.0 and reward == 0.0

    math_env.reset(options={"task_id": task.id})
    calls = [ToolCall("s", "submit", {"answer": str(task.answer)}),
             ToolCall("r", "run_code", {"code": "print(1)"}),
             ToolCall("w", "submit", {"answer": 42})]
    _obs, reward, terminated, _trunc, info = math_env.step(calls)
    assert reward == 1.0 and terminated and info["outcome"] == "success"
    assert [(r["call_id"], r["error"]) for r in info["tool_results"]] == [
        ("s", False), ("r", True), ("w", True)]
    assert all("not run: the episode ended at call s" in r["content"]
               for r in info["tool_results"][1:])

    math_env.reset(options={"task_id": task.id})
    obs, _r, terminated, _t, info = math_env.step(ToolCall("w", "submit", {"answer": 42}))
    assert not terminated and info["tool_results"][0]["error"]
    assert "parameter 'answer' must be string" in obs


def test_tools_protocol_changes_only_the_system_prompt() -> None:
    for env_id, tags, tools in (
            ("python-code", protocol.CODE_SYSTEM_PROMPT, protocol.CODE_TOOLS_SYSTEM_PROMPT),
            ("python-math", protocol.MATH_SYSTEM_PROMPT, protocol.MATH_TOOLS_SYSTEM_PROMPT)):
        default = skyhub.make(env_id, max_turns=5, cell_timeout_s=7)
        by_tags = skyhub.make(env_id, max_turns=5, cell_timeout_s=7, protocol="tags")
        by_tools = skyhub.make(env_id, max_turns=5, cell_timeout_s=7, protocol="tools")
        assert default.system_prompt == by_tags.system_prompt == tags.format(max_turns=5,
                                                                              timeout=7)
        assert by_tools.system_prompt == tools.format(max_turns=5, timeout=7)
        assert "`run_code`" in by_tools.system_prompt and "<python>" not in \
            by_tools.system_prompt and "5 turns" in by_tools.system_prompt
        assert default.tools == by_tools.tools and [t["function"]["name"] for t in
                                                    default.tools] == ["run_code", "submit"]
        assert (default.protocol, by_tools.protocol) == ("tags", "tools")
        for env in (default, by_tags, by_tools):
            env.close()
    with pytest.raises(UsageError, match="protocol must be one of tags, tools"):
        skyhub.make("python-code", protocol="xml")


def test_check_env_passes_with_the_tools_protocol(docker_backend: str) -> None:
    report = check_env("python-code", env_kwargs={"protocol": "tools", "backend": docker_backend,
                                                  **KWARGS}, episodes=1)
    assert report.ok, str(report)
    assert "tools" in [r.name for r in report.results]
