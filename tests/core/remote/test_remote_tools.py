"""Tool calls across `skyhub serve`: the client's tools come from the server, structured calls
cross the wire as OpenAI entries and are played by the server's env, results come back by
call id; a real uvicorn server and real WebSocket clients."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

from websockets.sync.client import connect

import skyhub
from skyhub import ToolCall
from skyhub.remote.server import ServerThread


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread(["toy-lookup"], allow_kwargs=("protocol", "max_turns"),
                      expose_reference=True) as srv:
        yield srv


def turns(key: str, answer: str) -> list[Any]:
    """A tool episode's turns: a lookup beside a malformed call, a message, then the answer."""
    return [
        [ToolCall("a", "lookup", {"key": key}), ToolCall("b", "grep", {"pattern": "x"})],
        {"role": "assistant", "content": "checking", "tool_calls": [
            {"id": "c", "type": "function",
             "function": {"name": "lookup", "arguments": "{\"key\": "}}]},
        [ToolCall("d", "answer", {"value": answer})],
    ]


def play(env: skyhub.TextEnv, seed: int) -> list[Any]:
    obs, info = env.reset(seed=seed)
    steps: list[Any] = [(obs, info)]
    for action in turns(env.task.meta["key"], "quartz" if seed == 0 else "wrong"):
        steps.append(env.step(action))
    return json.loads(json.dumps(steps))  # as the wire carries it (tuples as lists)


def test_the_clients_tools_and_protocol_come_from_the_server(server: ServerThread) -> None:
    with skyhub.make("toy-lookup", protocol="tools") as local, \
            skyhub.make("toy-lookup", remote=server.url, protocol="tools") as remote:
        assert remote.tools == local.tools and [t["function"]["name"] for t in remote.tools] \
            == ["lookup", "answer"]
        assert remote.protocol == "tools" and remote.system_prompt == local.system_prompt


@pytest.mark.parametrize("seed", [0, 1])
def test_a_remote_tool_episode_equals_the_local_one(server: ServerThread, seed: int) -> None:
    with skyhub.make("toy-lookup", protocol="tools", max_turns=4) as local, \
            skyhub.make("toy-lookup", remote=server.url, protocol="tools", max_turns=4) as remote:
        here, there = play(local, seed), play(remote, seed)
    assert there == here
    *_, (_, reward, terminated, _, info) = there
    assert terminated and reward == (1.0 if seed == 0 else 0.0)
    first = here[1][4]["tool_results"]
    assert [(r["call_id"], r["error"]) for r in first] == [("a", False), ("b", True)]
    assert [r["call_id"] for r in info["tool_results"]] == ["d"]


def test_the_tool_oracle_plays_over_the_wire(server: ServerThread) -> None:
    with skyhub.make("toy-lookup", remote=server.url, protocol="tools") as env:
        env.reset(seed=3)
        total, done = 0.0, False
        while not done:
            calls = env.reference_tool_calls()
            assert calls and all(isinstance(c, ToolCall) for c in calls)
            _, reward, terminated, truncated, info = env.step(calls)
            total, done = total + reward, terminated or truncated
            assert [r["call_id"] for r in info["tool_results"]] == [c.id for c in calls]
        assert (total, info["outcome"]) == (1.0, "success")


def test_a_malformed_tool_turn_on_the_wire_is_an_error_reply(server: ServerThread) -> None:
    with connect(f"{server.url}/v1/envs/toy-lookup/session", compression=None) as ws:
        def ask(msg: dict[str, Any]) -> dict[str, Any]:
            ws.send(json.dumps(msg))
            return json.loads(ws.recv(timeout=30))

        assert ask({"op": "open", "kwargs": {"protocol": "tools"}})["tools"][0]["type"] \
            == "function"
        assert ask({"op": "reset", "seed": 0})["ok"]
        for action in ({"tool_calls": "lookup"}, {"tool_calls": [1]}, {"content": 3,
                       "tool_calls": []}, {"name": "lookup"}, 7):
            reply = ask({"op": "step", "action": action})
            assert not reply["ok"] and reply["error"]["type"] == "BadMessage", reply
        # calls of any content are the env's to answer: a call with nothing usable in it
        reply = ask({"op": "step", "action": {"tool_calls": [{"junk": True}]}})
        assert reply["ok"] and reply["info"]["turn"] == 1
        (result,) = reply["info"]["tool_results"]
        assert result["call_id"] == "call_0" and result["error"]
        assert "unknown tool ''" in result["content"]


def test_a_remote_vector_env_steps_with_tool_calls(server: ServerThread) -> None:
    venv = skyhub.make_vec("toy-lookup", 2, remote=server.url, protocol="tools")
    try:
        obs, _ = venv.reset(seed=0)
        keys = [re.search(r"k\d+", o).group(0) for o in obs]
        obs, _, _, _, infos = venv.step([[ToolCall(f"c{i}", "lookup", {"key": k})]
                                         for i, k in enumerate(keys)])
        assert [i["tool_results"][0]["call_id"] for i in infos] == ["c0", "c1"]
        assert all("no such key" not in o for o in obs)
    finally:
        venv.close()
