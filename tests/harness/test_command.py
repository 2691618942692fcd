"""The `command` harness: a user's OpenAI-client program, run per episode, reaching the model
through its gateway session (OPENAI_BASE_URL / OPENAI_API_KEY) and the env through MCP; the
env scores what it did and the gateway records its tokens."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("openai")
pytest.importorskip("mcp")
pytest.importorskip("transformers")
SUPPORT = Path(__file__).parents[1] / "support"
sys.path.insert(0, str(SUPPORT))
from scripted_gateway import scripted_gateway, tool_lookup_then_answer  # noqa: E402

import skyhub  # noqa: E402
from skyhub.errors import UsageError  # noqa: E402
from skyhub.harness import load_harness, run_episode  # noqa: E402

AGENT = f"{sys.executable} {SUPPORT / 'mcp_agent.py'}"


def test_a_program_plays_through_mcp_and_the_gateway():
    with scripted_gateway(tool_lookup_then_answer) as gw:
        harness = load_harness(f"command:{AGENT}")
        for seed in range(2):
            env = skyhub.make("toy-lookup", protocol="tools")
            session, endpoint = gw.session()
            try:
                ep = run_episode(harness, env, endpoint, seed=seed)
            finally:
                env.close()
            assert ep.total_reward == 1.0 and ep.terminated, ep.meta
            assert ep.meta["command"]["returncode"] == 0
            assert "agent done" in ep.meta["command"]["output_tail"]
            # its two tool calls are the episode's two turns; its two requests one segment
            assert [a.name for a in ep.actions] == ["lookup", "answer"]
            assert len(session.records) == 2 and len(session.segments()) == 1


def test_a_program_that_quits_early_leaves_the_episode_cut():
    with scripted_gateway(tool_lookup_then_answer) as gw:
        env = skyhub.make("toy-lookup", protocol="tools")
        _, endpoint = gw.session()
        try:
            ep = run_episode(load_harness("command:exit 3"), env, endpoint, seed=0)
        finally:
            env.close()
    assert ep.cut == "harness" and ep.outcome == "failure" and not ep.infra_error
    assert ep.meta["command"]["returncode"] == 3


def test_a_program_past_its_timeout_is_killed():
    with scripted_gateway(tool_lookup_then_answer) as gw:
        env = skyhub.make("toy-lookup", protocol="tools")
        _, endpoint = gw.session()
        try:
            ep = run_episode(load_harness("command:sleep 60", timeout=1.0), env, endpoint,
                             seed=0)
        finally:
            env.close()
    assert ep.meta["command"]["timed_out"] and ep.cut == "harness"


def test_an_empty_command_is_refused():
    with pytest.raises(UsageError, match="command line"):
        load_harness("command: ")
