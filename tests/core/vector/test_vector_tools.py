"""VectorEnv carries structured actions (tool calls) to its envs, in threads and in worker
processes, lockstep and send/recv, and brings their `tool_results` back."""

from __future__ import annotations

import re
from typing import Any

import pytest

import skyhub
from skyhub import ToolCall


@pytest.fixture(params=["threads", "processes"])
def executor(request: pytest.FixtureRequest) -> str:
    return request.param


def key_of(observation: str) -> str:
    found = re.search(r"k\d+", observation)
    assert found is not None, observation
    return found.group(0)


def test_lockstep_tool_calls_are_played_in_each_env(executor: str) -> None:
    with skyhub.make("toy-lookup", protocol="tools") as local:
        local.reset(seed=0)
        answers = [local.task.answer]
    venv = skyhub.make_vec("toy-lookup", 2, executor=executor, protocol="tools")
    try:
        obs, _ = venv.reset(seed=0)
        keys = [key_of(o) for o in obs]
        message = {"role": "assistant", "content": "", "tool_calls": [
            {"id": "m1", "type": "function",
             "function": {"name": "lookup", "arguments": f'{{"key": "{keys[1]}"}}'}},
            {"id": "m2", "type": "function", "function": {"name": "nope", "arguments": "{}"}}]}
        obs, rewards, _, _, infos = venv.step([[ToolCall("a", "lookup", {"key": keys[0]})],
                                               message])
        assert obs[0].startswith(answers[0])
        assert [r["call_id"] for r in infos[0]["tool_results"]] == ["a"]
        assert [(r["call_id"], r["error"]) for r in infos[1]["tool_results"]] == [
            ("m1", False), ("m2", True)]
        assert [i["turn"] for i in infos] == [1, 2]
        values = [infos[k]["tool_results"][0]["content"].split()[0] for k in range(2)]
        obs, rewards, terminated, _, infos = venv.step(
            [ToolCall("z", "answer", {"value": v}) for v in values])
        assert list(rewards) == [1.0, 1.0] and all(terminated)
        assert all(i["outcome"] == "success" for i in infos)
    finally:
        venv.close()


def test_send_recv_carries_tool_calls(executor: str) -> None:
    venv = skyhub.make_vec("toy-lookup", 3, executor=executor, protocol="tools")
    try:
        obs, _ = venv.reset(seed=1)
        calls: list[Any] = [ToolCall(f"c{i}", "lookup", {"key": key_of(o)})
                            for i, o in enumerate(obs)]
        venv.send(calls[1:], env_ids=[1, 2])
        got: dict[int, dict[str, Any]] = {}
        while len(got) < 2:
            ids, _, _, _, _, infos = venv.recv(min_ready=1, timeout=60)
            got.update(zip(ids, infos, strict=True))
        assert sorted(got) == [1, 2]
        assert {i: info["tool_results"][0]["call_id"] for i, info in got.items()} == \
            {1: "c1", 2: "c2"}
    finally:
        venv.close()
