"""`skyhub mcp`: an env served over the Model Context Protocol, driven by the official `mcp`
SDK's own clients: stdio (the client starts `skyhub mcp toy-lookup`), streamable HTTP (one
server for the module, sessions as independent episodes), and the SDK's in-memory pair for
an env without tools."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

import skyhub

SKYHUB = str(Path(sys.executable).with_name("skyhub"))
sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from polling import eventually  # noqa: E402


def text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


async def play_lookup(session: ClientSession, seed: int, *, right: bool) -> dict[str, Any]:
    """reset, lookup, answer (the value read, or a wrong one); returns episode_status."""
    reset = await session.call_tool("reset", {"seed": seed})
    assert not reset.isError, text(reset)
    assert "`lookup` tool" in reset.structuredContent["system_prompt"]
    key = re.search(r"k\d+", reset.structuredContent["observation"]).group(0)
    looked = await session.call_tool("lookup", {"key": key})
    assert not looked.isError and "turns left" in text(looked)
    value = text(looked).split()[0] if right else "certainly-not-it"
    answered = await session.call_tool("answer", {"value": value})
    assert not answered.isError and "The episode has ended" in text(answered)
    return (await session.call_tool("episode_status", {})).structuredContent


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(fn)


def test_stdio_lists_tools_plays_and_reads_the_reward_back() -> None:
    async def main() -> None:
        params = StdioServerParameters(command=SKYHUB, args=["mcp", "toy-lookup"])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            init = await s.initialize()
            assert "reset" in init.instructions
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert list(tools) == ["lookup", "answer", "reset", "episode_status"]
            assert tools["lookup"].inputSchema["required"] == ["key"]
            early = await s.call_tool("lookup", {"key": "k1"})
            assert early.isError and "call `reset` first" in text(early)
            status = await play_lookup(s, 0, right=True)
            assert (status["reward"], status["done"], status["outcome"]) == (1.0, True, "success")
            assert status["reward_breakdown"]["correct"] == 1.0
            late = await s.call_tool("answer", {"value": "x"})
            assert late.isError and "call `reset` to start another" in text(late)
            status = await play_lookup(s, 1, right=False)  # a second episode, same session
            assert (status["reward"], status["outcome"]) == (0.0, "failure")

    run(main)


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    proc = subprocess.Popen([SKYHUB, "mcp", "toy-lookup", "--transport", "http", "--port", "0"],
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+/mcp", line)
        assert found, line + proc.stderr.read()
        yield found.group(0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()


def test_http_sessions_are_independent_episodes(http_url: str) -> None:
    async def main() -> None:
        async with streamable_http_client(http_url) as (r1, w1, _), \
                ClientSession(r1, w1) as one, \
                streamable_http_client(http_url) as (r2, w2, _), ClientSession(r2, w2) as two:
            await one.initialize()
            await two.initialize()
            first = await play_lookup(one, 0, right=True)
            # the second session has no episode yet: the first one's is not shared
            assert (await two.call_tool("episode_status", {})).structuredContent["started"] \
                is False
            second = await play_lookup(two, 0, right=False)
            assert first["task_id"] == second["task_id"]  # same seed, same task
            assert (first["reward"], second["reward"]) == (1.0, 0.0)
            again = (await one.call_tool("episode_status", {})).structuredContent
            assert (again["reward"], again["outcome"]) == (1.0, "success")

    run(main)


def test_http_malformed_calls_are_tool_errors_scored_by_the_env(http_url: str) -> None:
    async def main() -> None:
        async with streamable_http_client(http_url) as (r, w, _), ClientSession(r, w) as s:
            await s.initialize()
            await s.call_tool("reset", {"seed": 2, "task_id": None})
            bad = await s.call_tool("lookup", {"kee": "k1"})
            assert bad.isError and "missing the required parameter 'key'" in text(bad)
            unknown = await s.call_tool("grep", {})
            assert unknown.isError and "unknown tool 'grep'" in text(unknown)
            status = (await s.call_tool("episode_status", {})).structuredContent
            assert status["turn"] == 2 and not status["done"]  # each malformed call a turn
            wrong_id = await s.call_tool("reset", {"task_id": "no-such-task"})
            assert wrong_id.isError and "no-such-task" in text(wrong_id)
            bad_seed = await s.call_tool("reset", {"seed": -1})
            assert bad_seed.isError and "seed must be an integer >= 0" in text(bad_seed)

    run(main)


def test_http_refuses_a_foreign_host(http_url: str) -> None:
    import httpx

    response = httpx.post(http_url, headers={"Host": "evil.example",
                                             "Content-Type": "application/json"},
                          content=b"{}", timeout=10)
    assert response.status_code == 421


def test_an_env_without_tools_is_played_through_act(tmp_env_id: str) -> None:
    from mcp.shared.memory import create_connected_server_and_client_session

    from skyhub.mcp.server import build_server

    skyhub.register(tmp_env_id, "skyhub_testenvs:SayEnv", kwargs={"strict": True})
    server, envs = build_server(tmp_env_id)
    made_at_startup = envs._spare  # the first session's env

    async def main() -> None:
        async with create_connected_server_and_client_session(server) as s:
            names = [t.name for t in (await s.list_tools()).tools]
            assert names == ["act", "reset", "episode_status"]
            reset = await s.call_tool("reset", {"task_id": "say-3"})
            assert text(reset).endswith("Say 3.")
            done = await s.call_tool("act", {"action": "<answer>3</answer>"})
            assert not done.isError and "reward 1" in text(done)
            await s.call_tool("reset", {"task_id": "say-4"})
            broken = await s.call_tool("act", {"action": "four"})  # strict SayEnv raises
            assert broken.isError and "infra error" in text(broken)
            status = (await s.call_tool("episode_status", {})).structuredContent
            assert (status["done"], status["outcome"], status["infra_error"]) == (
                True, "error", True)

    try:
        run(main)
        assert made_at_startup is not None and eventually(lambda: made_at_startup.closed)
    finally:
        envs.close()
