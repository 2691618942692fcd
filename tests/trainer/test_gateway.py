"""`skyhub gateway` driven by the official `openai` client: the ids recorded are the engine's
sampled ids, a re-sent assistant turn keeps its sampled ids (with a tokenizer that would
re-tokenize it differently), tools and streaming, sessions isolated by their keys, and a
session made into segments.

The model is either skyhub's `hf` engine over a random tiny model, or a scripted engine
(`Script`) whose ids are chosen by the test; the tokenizer is the character-level one with a
hermes-style template (tests/support/hermes_chat.py). Everything runs over real HTTP.
"""

from __future__ import annotations

import json
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from skyhub.gateway import Gateway, start
from skyhub.trainer.gateway_backend import EngineBackend
from skyhub.trainer.inference import Completion

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from hermes_chat import char_tokenizer  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a key up.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}},
                   "required": ["key"]}}}]


@pytest.fixture(scope="module")
def tok() -> Any:
    # "ab" is one token: the sampled ids [a, b] decode to "ab", which encodes as [ab]
    return char_tokenizer(["<tool_call>", "</tool_call>", "ab"])


class Script:
    """An engine whose replies the test sets: `replies` is a list of texts (each encoded
    character by character, so "ab" stays two ids) taken in order; records every request."""

    version = 3

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer, self.replies = tokenizer, list(replies)
        self.requests: list[list[int]] = []
        self.sampled: list[list[int]] = []
        self._lock = threading.Lock()

    def submit(self, prompt: Any, params: Any, seed: int) -> Future[Completion]:
        with self._lock:
            text = self.replies.pop(0)
            self.requests.append(list(prompt))
        ids = [self.tokenizer.convert_tokens_to_ids(p) for p in _pieces(text)]
        ids.append(self.tokenizer.eos_token_id)
        with self._lock:
            self.sampled.append(ids)
        f: Future[Completion] = Future()
        f.set_result(Completion(ids, [-0.25] * len(ids), [self.version] * len(ids), "stop",
                                self.tokenizer.decode(ids, skip_special_tokens=True)))
        return f


def _pieces(text: str) -> list[str]:
    """`text` as tokens: the call tags whole, every other character alone."""
    out, k = [], 0
    while k < len(text):
        for tag in ("</tool_call>", "<tool_call>"):
            if text.startswith(tag, k):
                out.append(tag)
                k += len(tag)
                break
        else:
            out.append(text[k])
            k += 1
    return out


def served(engine: Any, tokenizer: Any, **kw: Any) -> tuple[Gateway, Any]:
    gw = Gateway(EngineBackend(engine, tokenizer, model="tiny", tool_parser="hermes"), **kw)
    return gw, start(gw)


def client(server: Any, session: Any = None, key: str = "none") -> Any:
    base = f"{server.http_url}/s/{session.id}/v1" if session else f"{server.http_url}/v1"
    return openai.OpenAI(base_url=base, api_key=key, max_retries=0)


def test_recorded_ids_are_the_engines_sampled_ids(tokenizer, model):
    """The real hf engine over a random model: what the gateway records for each request is,
    id for id, what the engine returned (and the agent got its text)."""
    from skyhub.trainer.inference.hf import HFEngine

    engine = HFEngine(model, tokenizer)
    seen: list[Completion] = []

    class Recording:
        version = 0

        def submit(self, prompt, params, seed):
            f = engine.submit(prompt, params, seed)
            f.add_done_callback(lambda d: seen.append(d.result()))
            return f

    gw, server = served(Recording(), tokenizer)
    try:
        session = gw.open_session()
        c = client(server, session, session.key)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "find key k3"}]
        for turn in range(3):
            r = c.chat.completions.create(model="tiny", messages=messages, max_tokens=12,
                                          temperature=1.0, seed=turn, logprobs=True)
            messages += [r.choices[0].message.model_dump(exclude_none=True),
                         {"role": "user", "content": f"turn {turn} done"}]
        assert len(seen) == len(session.records) == 3
        for rec, comp in zip(session.records, seen, strict=True):
            assert rec.completion_ids == comp.token_ids
            assert rec.logprobs == comp.logprobs
        assert [t.logprob for t in r.choices[0].logprobs.content] == session.records[-1].logprobs
        # the agent re-sent its turns: each request extended the last, so one segment
        (seg,) = session.segments()
        assert sum(seg.mask) == sum(len(rc.completion_ids) for rc in session.records)
        assert seg.ids == session.records[-1].prompt_ids + session.records[-1].completion_ids
    finally:
        server.stop()
        engine.close()


def test_a_resent_assistant_turn_keeps_its_sampled_ids(tok):
    """The model sampled "a", "b" as two ids; the tokenizer encodes "ab" as one. The next
    request re-sends that turn as text: its prompt holds the two sampled ids, not the one
    a re-tokenization would give."""
    ab = tok.convert_tokens_to_ids("ab")
    engine = Script(tok, ["ab", "ok"])
    gw, server = served(engine, tok)
    try:
        session = gw.open_session()
        c = client(server, session, session.key)
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "say it"}]
        first = c.chat.completions.create(model="tiny", messages=msgs)
        assert first.choices[0].message.content == "ab"
        msgs += [{"role": "assistant", "content": "ab"}, {"role": "user", "content": "again"}]
        c.chat.completions.create(model="tiny", messages=msgs)
        r1, r2 = session.records
        assert ab not in engine.sampled[0]  # sampled as "a", "b"
        prefix = r1.prompt_ids + r1.completion_ids
        assert r2.prompt_ids[:len(prefix)] == prefix and r2.reused_ids == len(prefix)
        assert engine.requests[1] == r2.prompt_ids
        # what re-rendering the text would have given instead
        naive = tok.encode(tok.apply_chat_template(msgs, tokenize=False,
                                                   add_generation_prompt=True),
                           add_special_tokens=False)
        assert ab in naive and naive != r2.prompt_ids
        assert tok.decode(naive) == tok.decode(r2.prompt_ids)  # the same text
        (seg,) = session.segments()
        assert seg.prompt_ids == r1.prompt_ids
        assert [i for i, m in zip(seg.token_ids, seg.mask, strict=True) if m] == (
            engine.sampled[0] + engine.sampled[1])
        assert seg.versions[-1] == 3 and set(seg.logprobs) == {0.0, -0.25}
    finally:
        server.stop()


def test_tool_calls_and_streaming(tok):
    """A hermes call comes back as `tool_calls` (non-streamed and streamed alike); the tool
    message that answers it is rendered by the template's tool role after the sampled ids."""
    call = '<tool_call>{"name": "lookup", "arguments": {"key": "k7"}}</tool_call>'
    engine = Script(tok, ["Looking." + call, "Looking." + call, "v7"])
    gw, server = served(engine, tok)
    try:
        session = gw.open_session()
        c = client(server, session, session.key)
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "value of k7?"}]
        r = c.chat.completions.create(model="tiny", messages=msgs, tools=TOOLS)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == "Looking."
        (tc,) = choice.message.tool_calls
        assert tc.function.name == "lookup" and json.loads(tc.function.arguments) == {"key": "k7"}

        stream = c.chat.completions.create(model="tiny", messages=msgs, tools=TOOLS,
                                           stream=True,
                                           stream_options={"include_usage": True})
        content, args, names, finish, usage = "", "", [], None, None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for ch in chunk.choices:
                content += ch.delta.content or ""
                for d in ch.delta.tool_calls or []:
                    names += [d.function.name] if d.function and d.function.name else []
                    args += (d.function.arguments or "") if d.function else ""
                finish = ch.finish_reason or finish
        assert (content, names, json.loads(args), finish) == (
            "Looking.", ["lookup"], {"key": "k7"}, "tool_calls")
        assert usage.completion_tokens == len(session.records[1].completion_ids)

        msgs += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": tc.id, "content": "v7"}]
        final = c.chat.completions.create(model="tiny", messages=msgs, tools=TOOLS)
        assert final.choices[0].message.content == "v7"
        r1, r3 = session.records[0], session.records[2]
        assert r3.prompt_ids[:len(r1.prompt_ids) + len(r1.completion_ids)] == (
            r1.prompt_ids + r1.completion_ids)
        rendered = tok.decode(r3.prompt_ids, skip_special_tokens=False)
        assert rendered.endswith("<|user|><tool_response>v7</tool_response><|end|>"
                                 "<|assistant|>")
    finally:
        server.stop()


def test_sessions_are_isolated_and_keys_are_checked(tok):
    """Two agents at once, each in its own keyed session: neither sees the other's records;
    a wrong key is refused for requests and for reading records."""
    n = 6
    engine = Script(tok, ["x"] * (2 * n))
    gw, server = served(engine, tok)
    try:
        a, b = gw.open_session(), gw.open_session()

        def agent(session: Any, word: str) -> None:
            c = client(server, session, session.key)
            msgs: list[dict[str, Any]] = []
            for k in range(n):
                msgs.append({"role": "user", "content": f"{word} {k}"})
                r = c.chat.completions.create(model="tiny", messages=msgs)
                msgs.append(r.choices[0].message.model_dump(exclude_none=True))

        threads = [threading.Thread(target=agent, args=(s, w)) for s, w in ((a, "alpha"),
                                                                            (b, "beta"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for session, word, other in ((a, "alpha", "beta"), (b, "beta", "alpha")):
            assert len(session.records) == n
            text = json.dumps([r.messages for r in session.records])
            assert word in text and other not in text
            assert len(session.segments()) == 1

        with pytest.raises(openai.AuthenticationError):
            client(server, a, b.key).chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}])
        assert len(a.records) == n
        url = f"{server.http_url}/sessions/{a.id}"
        assert httpx.get(url, headers={"Authorization": f"Bearer {b.key}"}).status_code == 401
        got = httpx.get(url, headers={"Authorization": f"Bearer {a.key}"}).json()
        assert [r["completion_ids"] for r in got["records"]] == [
            r.completion_ids for r in a.records]
        assert got["segments"][0]["mask"] == a.segments()[0].mask
        wrong = httpx.delete(url, headers={"Authorization": f"Bearer {b.key}"})
        assert wrong.status_code == 401 and gw.sessions.get(a.id) is a
        assert httpx.delete(url, headers={"Authorization": f"Bearer {a.key}"}).json()[
            "deleted"]
        assert httpx.get(url, headers={"Authorization": f"Bearer {a.key}"}).status_code == 404
    finally:
        server.stop()


def test_admin_token_and_session_header(tok):
    """With an admin token: a request without it is refused; with it, a session named by
    the X-Session-ID header is created and used; POST /sessions opens a keyed one."""
    engine = Script(tok, ["x", "y", "z"])
    gw, server = served(engine, tok, token="admin-secret")
    try:
        with pytest.raises(openai.AuthenticationError):
            client(server, key="nope").chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}])
        c = openai.OpenAI(base_url=f"{server.http_url}/v1", api_key="admin-secret",
                          default_headers={"X-Session-ID": "agent-1"}, max_retries=0)
        assert [m.id for m in c.models.list().data] == ["tiny"]
        c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
        assert len(gw.sessions.get("agent-1").records) == 1
        opened = httpx.post(f"{server.http_url}/sessions",
                            headers={"Authorization": "Bearer admin-secret"}).json()
        assert httpx.post(f"{server.http_url}/sessions").status_code == 401
        own = openai.OpenAI(base_url=opened["base_url"], api_key=opened["key"], max_retries=0)
        assert own.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "yo"}]
        ).choices[0].message.content == "y"
        assert len(gw.sessions.get(opened["id"]).records) == 1
    finally:
        server.stop()


def test_a_request_that_does_not_extend_starts_a_segment(tok):
    """A summary that replaces the history is a new segment; a request that goes on from the
    full history afterwards extends the first segment again (as a sub-agent's requests
    between two of the main agent's do not break its segment)."""
    engine = Script(tok, ["one", "summary", "two"])
    gw, server = served(engine, tok)
    try:
        s = gw.open_session()
        c = client(server, s, s.key)
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
        r = c.chat.completions.create(model="tiny", messages=msgs)
        c.chat.completions.create(model="tiny", messages=[
            {"role": "system", "content": "Summarize."}, {"role": "user", "content": "task"}])
        msgs += [r.choices[0].message.model_dump(exclude_none=True),
                 {"role": "user", "content": "next"}]
        c.chat.completions.create(model="tiny", messages=msgs)
        segs = s.segments()
        assert [seg.records for seg in segs] == [[0, 2], [1]]
        assert segs[1].prompt_ids == s.records[1].prompt_ids
        assert s.records[2].reused_ids == len(s.records[0].prompt_ids) + len(
            s.records[0].completion_ids)
    finally:
        server.stop()


def test_malformed_requests_get_a_400_that_says_what_to_fix(tok):
    engine = Script(tok, ["x"])
    _, server = served(engine, tok)
    try:
        c = client(server)
        for kwargs, words in (({"n": 2}, "n must be 1"),
                              ({"tool_choice": "required", "tools": TOOLS}, "tool_choice"),
                              ({"max_tokens": 0}, "max_tokens")):
            with pytest.raises(openai.BadRequestError, match=words):
                c.chat.completions.create(model="tiny", messages=[
                    {"role": "user", "content": "hi"}], **kwargs)
        with pytest.raises(openai.BadRequestError, match="role"):
            c.chat.completions.create(model="tiny", messages=[{"role": "robot",
                                                                "content": "hi"}])
        assert engine.requests == []  # nothing reached the model
    finally:
        server.stop()


def test_the_gateway_command_serves_a_saved_model(tmp_path, tokenizer, model):
    """`skyhub gateway --model DIR --port 0` in its own process: it prints its URL, answers
    the openai client, and records the session named by the X-Session-ID header."""
    import os
    import re
    import subprocess
    import time

    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    skyhub = Path(sys.executable).parent / "skyhub"
    proc = subprocess.Popen([str(skyhub), "gateway", "--model", str(tmp_path / "m"),
                             "--port", "0", "--served-name", "tiny", "--max-tokens", "6"],
                            stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        url, lines, deadline = None, [], time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
            lines.append(line)
            m = re.search(r"at (http://127\.0\.0\.1:\d+/v1)", line)
            url = m.group(1) if m else None
        assert url, "".join(lines)
        c = openai.OpenAI(base_url=url, api_key="none", max_retries=2,
                          default_headers={"X-Session-ID": "cli"})
        for _ in range(100):  # the URL is printed just before uvicorn starts serving
            try:
                c.models.list()
                break
            except openai.APIConnectionError:
                time.sleep(0.1)
        r = c.chat.completions.create(model="tiny", messages=[
            {"role": "user", "content": "key k1"}], seed=1)
        got = httpx.get(url.removesuffix("/v1") + "/sessions/cli").json()
        (rec,) = got["records"]
        from transformers import AutoTokenizer

        saved = AutoTokenizer.from_pretrained(tmp_path / "m")  # what the command loaded
        assert saved.decode(rec["completion_ids"], skip_special_tokens=True) == (
            r.choices[0].message.content)
        assert rec["prompt_ids"] == saved.encode(saved.apply_chat_template(
            [{"role": "user", "content": "key k1"}], tokenize=False,
            add_generation_prompt=True), add_special_tokens=False)
        assert r.usage.completion_tokens == len(rec["completion_ids"]) <= 6
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_tool_choice_none_returns_the_call_as_text(tok):
    call = '<tool_call>{"name": "lookup", "arguments": {"key": "k7"}}</tool_call>'
    engine = Script(tok, [call])
    _, server = served(engine, tok)
    try:
        r = client(server).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "k7?"}], tools=TOOLS,
            tool_choice="none")
        assert r.choices[0].message.tool_calls is None
        assert r.choices[0].message.content == call
        assert r.choices[0].finish_reason == "stop"
    finally:
        server.stop()
