"""The `builtin` harness through a real gateway with a scripted model: the env gives the
reward, every turn is re-sent with its sampled ids (the episode is one segment), in the text
protocol and in native tool calls."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("openai")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from scripted_gateway import lookup_then_answer, scripted_gateway, tool_lookup_then_answer

import skyhub
from skyhub.errors import UsageError
from skyhub.harness import load_harness, run_episode


@pytest.mark.parametrize("protocol,reply", [("tags", lookup_then_answer),
                                            ("tools", tool_lookup_then_answer)])
def test_builtin_scores_what_the_env_scores_and_records_one_segment(protocol, reply):
    with scripted_gateway(reply) as gw:
        harness = load_harness("builtin")
        rewards = []
        for seed in range(3):
            env = skyhub.make("toy-lookup", protocol=protocol)
            session, endpoint = gw.session()
            try:
                ep = run_episode(harness, env, endpoint, seed=seed)
            finally:
                env.close()
            rewards.append(ep.total_reward)
            assert len(ep.actions) == 2 and ep.terminated and not ep.infra_error
            # both requests re-sent the first turn as the gateway answered it: one segment,
            # whose sampled tokens are exactly the two replies' ids
            assert [r.reused_ids > 0 for r in session.records] == [False, True]
            (seg,) = session.segments()
            sampled = [t for t, m in zip(seg.token_ids, seg.mask, strict=True) if m]
            assert sampled == [i for r in session.records for i in r.completion_ids]
        assert rewards == [1.0, 1.0, 1.0]


def test_a_dead_endpoint_is_an_infra_error_not_a_zero():
    from skyhub.harness import Endpoint

    env = skyhub.make("toy-lookup")
    try:
        ep = run_episode(load_harness("builtin", request_timeout=2.0), env,
                         Endpoint("http://127.0.0.1:9/v1", "k", "m"), seed=0)
    finally:
        env.close()
    assert ep.infra_error and ep.error_source == "agent"


def test_an_unknown_harness_names_the_choices():
    with pytest.raises(UsageError, match="builtin, terminus, mini-swe-agent"):
        load_harness("claude-code")


def test_a_request_the_server_refuses_cuts_the_episode_as_a_failure():
    """HTTP 400 (e.g. the conversation outgrew the context) is the agent's doing: the episode
    is cut and fails, neither an infra error nor a crash."""
    from openai_server import ScriptedOpenAIServer

    from skyhub.harness import Endpoint

    with ScriptedOpenAIServer(lambda m: "x", reject=lambda body: "context too long") as server:
        env = skyhub.make("toy-lookup")
        try:
            ep = run_episode(load_harness("builtin"), env,
                             Endpoint(server.base_url, "k", "m"), seed=0)
        finally:
            env.close()
    assert ep.cut == "model_rejected" and ep.outcome == "failure" and not ep.infra_error
    assert "context too long" in ep.meta["model_rejected"]


def test_an_env_that_fails_under_a_harness_is_an_infra_error():
    with scripted_gateway(lookup_then_answer) as gw:
        env = skyhub.make("toy-lookup")
        _, endpoint = gw.session()

        def broken(action):
            raise RuntimeError("sandbox gone")

        env.step = broken
        try:
            ep = run_episode(load_harness("builtin"), env, endpoint, seed=0)
        finally:
            env.close()
    assert ep.infra_error and ep.error_source == "env" and len(ep.actions) == 1
    assert "sandbox gone" in ep.final_info["error"]
