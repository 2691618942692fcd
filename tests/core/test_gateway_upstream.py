"""`skyhub gateway --upstream URL` (eval mode): requests are forwarded to an OpenAI-compatible
server and each session records what was asked and answered; a failing upstream is a 502 that
a harness reports as an infra error."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")
sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from openai_server import ScriptedOpenAIServer  # noqa: E402

import skyhub  # noqa: E402
from skyhub.gateway import Gateway, start  # noqa: E402
from skyhub.gateway.upstream import UpstreamBackend  # noqa: E402
from skyhub.harness import Endpoint, load_harness, run_episode  # noqa: E402


def _answer(messages) -> str:
    last = str(messages[-1]["content"])
    seen = re.findall(r"<result>(.*?)</result>", last)
    if seen:
        return f"<answer>{seen[-1]}</answer>"
    return f"<lookup>{re.findall(r'key (k[0-9]+)', last)[-1]}</lookup>"


def _served(upstream: ScriptedOpenAIServer) -> tuple[Gateway, object]:
    gw = Gateway(UpstreamBackend(upstream.base_url, model="up-model"))
    return gw, start(gw)


def _play(server, session, seed: int):
    """A toy-lookup episode of the builtin harness, in `session` of the gateway `server`."""
    env = skyhub.make("toy-lookup")
    try:
        return run_episode(load_harness("builtin"), env, Endpoint(
            f"{server.http_url}/s/{session.id}/v1", session.key, "up-model"), seed=seed)
    finally:
        env.close()


def test_a_harness_through_the_upstream_gateway_is_scored_and_recorded():
    with ScriptedOpenAIServer(_answer) as upstream:
        gw, server = _served(upstream)
        try:
            session = gw.open_session()
            ep = _play(server, session, 4)
        finally:
            server.stop()
        bodies = upstream.bodies
    assert ep.total_reward == 1.0 and len(ep.actions) == 2
    assert [len(b["messages"]) for b in bodies] == [2, 4]  # the whole conversation, forwarded
    assert all(b["model"] == "up-model" for b in bodies)
    first, second = session.records
    assert first.reply["content"].startswith("<lookup>") and first.completion_ids == []
    assert second.messages[2]["content"] == first.reply["content"]
    assert first.usage is not None  # the upstream's counts, passed on


def test_a_failing_upstream_is_an_infra_error_not_a_zero():
    with ScriptedOpenAIServer(_answer, always_fail=lambda m: True) as upstream:
        gw, server = _served(upstream)
        try:
            session = gw.open_session()
            client = openai.OpenAI(base_url=f"{server.http_url}/s/{session.id}/v1",
                                   api_key=session.key, max_retries=0)
            with pytest.raises(openai.InternalServerError) as e:
                client.chat.completions.create(model="m", messages=[
                    {"role": "user", "content": "hi"}])
            assert e.value.status_code == 502 and "HTTP 503" in str(e.value)
            ep = _play(server, session, 0)
        finally:
            server.stop()
    assert ep.infra_error and ep.error_source == "agent"


def test_cli_gateway_in_upstream_mode():
    with ScriptedOpenAIServer(lambda m: "pong") as upstream:
        proc = subprocess.Popen([sys.executable, "-m", "skyhub.cli.main", "gateway",
                                 "--upstream", upstream.base_url, "--model", "up-model",
                                 "--port", "0"], stderr=subprocess.PIPE, text=True)
        try:
            line = ""
            deadline = time.monotonic() + 60
            while "http://" not in line and time.monotonic() < deadline:
                line = proc.stderr.readline()
            url = re.search(r" at (http://\S+/v1)", line).group(1)
            client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
            r = client.chat.completions.create(model="up-model", messages=[
                {"role": "user", "content": "ping"}])
            assert r.choices[0].message.content == "pong"
            assert [m.id for m in client.models.list()] == ["up-model"]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
