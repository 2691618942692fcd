"""`skyhub gateway`: the latency a request gains by going through the gateway.

    python -m benchmarks.gateway [--requests 200] [--turns 8]

Ours: a keep-alive HTTP client (httpx, what the `openai` client uses underneath, without its
response models) sends a chat request over loopback to the gateway (served from a thread of
this process), which matches the history against its records,
renders the new messages with the chat template, calls the engine, parses the reply for tool
calls and records it. Baseline: the same engine called in-process with the prompt ids the
gateway sent it (`submit(...).result()`). The conversation grows by one assistant turn and one
tool result per request (`--turns` deep, then a new session), as an agent's does.

Two engines: an instant one (fixed replies: the difference is all the gateway's) and skyhub's
`hf` engine over the tiny random model (8 sampled tokens, greedy, one torch thread). Goal: the
gateway adds < 5 ms p50 per request.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from benchmarks._common import result, write

TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Run a command.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}]


class Instant:
    """An engine that answers at once with a fixed hermes tool call (sampled ids as given)."""

    version = 0

    def __init__(self, tokenizer: Any) -> None:
        from skyhub.trainer.inference import Completion

        text = 'Next.<tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}</tool_call>'
        ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
        self.done = Completion(ids, [-0.1] * len(ids), [0] * len(ids), "stop",
                               tokenizer.decode(ids, skip_special_tokens=True))

    def submit(self, prompt: Any, params: Any, seed: int) -> Future[Any]:
        f: Future[Any] = Future()
        f.set_result(self.done)
        return f


def measure(engine: Any, tokenizer: Any, requests: int, turns: int,
            max_tokens: int) -> tuple[list[float], list[float]]:
    """(seconds per request through the gateway, seconds per direct engine call)."""
    import httpx

    from skyhub.gateway import Gateway, start
    from skyhub.trainer.gateway_backend import EngineBackend
    from skyhub.trainer.inference import SamplingParams, submitter

    backend = EngineBackend(engine, tokenizer, model="tiny", tool_parser="hermes",
                            max_tokens=max_tokens)
    gw = Gateway(backend)
    server = start(gw)
    via, direct = [], []
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0,
                            stop_token_ids=backend.chat.stop_token_ids)
    submit = submitter(engine)
    try:
        done = 0
        while done < requests:
            session = gw.open_session()
            c = httpx.Client(base_url=f"{server.http_url}/s/{session.id}/v1",
                             headers={"Authorization": f"Bearer {session.key}"})
            msgs: list[dict[str, Any]] = [
                {"role": "system", "content": "You are an agent in a shell."},
                {"role": "user", "content": "Find the biggest file in /etc."}]
            for turn in range(turns):
                t0 = time.perf_counter()
                r = c.post("/chat/completions", json={
                    "model": "tiny", "messages": msgs, "tools": TOOLS, "temperature": 0.0,
                    "max_tokens": max_tokens})
                r.raise_for_status()
                via.append(time.perf_counter() - t0)
                prompt = session.records[-1].prompt_ids
                t0 = time.perf_counter()
                submit(prompt, params, 0).result()
                direct.append(time.perf_counter() - t0)
                m = r.json()["choices"][0]["message"]
                msgs.append(m)
                calls = m.get("tool_calls")
                msgs.append({"role": "tool", "tool_call_id": calls[0]["id"],
                             "content": f"total {turn}\n-rw-r--r-- 1 root root 4{turn} x"}
                            if calls else {"role": "user", "content": "go on"})
                done += 1
            c.close()
    finally:
        server.stop()
    return via, direct


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--turns", type=int, default=8)
    args = ap.parse_args(argv)
    import torch

    from skyhub.trainer.inference.hf import HFEngine
    from skyhub.trainer.tiny import tiny_model, train_tokenizer

    torch.set_num_threads(1)
    corpus = ["You are an agent in a shell. Find the biggest file in /etc. total -rw-r--r-- "
              'root <tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}'
              "</tool_call> Next. <tool_response>"] * 20
    tok = train_tokenizer(corpus)
    tok.add_tokens(["<tool_call>", "</tool_call>"])

    sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "support"))
    from hermes_chat import HERMES_TEMPLATE  # the tests' hermes-style template

    tok.chat_template = HERMES_TEMPLATE
    rows = []
    for name, engine, max_tokens in (
            ("instant engine", Instant(tok), 64),
            ("hf engine, tiny model, 8 tokens", HFEngine(tiny_model(len(tok), seed=0), tok), 8)):
        via, direct = measure(engine, tok, args.requests, args.turns, max_tokens)
        via_ms, direct_ms = statistics.median(via) * 1e3, statistics.median(direct) * 1e3
        added = via_ms - direct_ms
        rows.append(result(f"added latency per request p50, {name}", added,
                           "engine called in-process", direct_ms, "< 5 ms",
                           ratio=via_ms / direct_ms if direct_ms else None, met=added < 5,
                           unit="ms",
                           note=f"through the gateway {via_ms:.2f} ms p50 (httpx client, "
                                f"loopback HTTP, {args.requests} requests, conversations of "
                                f"{args.turns} turns with a tool call each)"))
    write("gateway", rows)


if __name__ == "__main__":
    main()
