"""A scripted model behind a real `skyhub gateway`, for harness tests (nothing downloaded).

    with scripted_gateway(lambda prompt: "ls") as gw:
        session, endpoint = gw.session()        # a keyed session: base URL, key, model
        episode = run_episode(harness, env, endpoint, seed=0)
        session.segments()                     # what the gateway recorded

`reply(prompt)` gets the whole rendered prompt text (the chat template's rendering of the
request's messages) and returns the model's reply text; the reply is "sampled" character by
character with the character-level tokenizer of tests/support/hermes_chat.py, ended by the
template's end-of-turn token. The engine behind the gateway is skyhub's `EngineBackend`, as
`skyhub gateway` serves it, so templates, recorded ids and segments are the real ones.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from hermes_chat import char_tokenizer

from skyhub.gateway import Gateway, start
from skyhub.harness import Endpoint
from skyhub.trainer.gateway_backend import EngineBackend
from skyhub.trainer.inference import Completion


class ScriptedEngine:
    """An engine whose reply to a prompt is `reply(prompt_text)`; records every prompt."""

    version = 0

    def __init__(self, tokenizer: Any, reply: Callable[[str], str]) -> None:
        self.tokenizer, self.reply = tokenizer, reply
        self.prompts: list[str] = []
        self.params: list[Any] = []  # each request's sampling parameters
        self._lock = threading.Lock()

    def submit(self, prompt: Any, params: Any, seed: int) -> Future[Completion]:
        text = self.tokenizer.decode(list(prompt), skip_special_tokens=False)
        with self._lock:
            self.prompts.append(text)
            self.params.append(params)
        f: Future[Completion] = Future()
        try:
            out = self.reply(text)
        except Exception as exc:  # the test's script failed: the request fails
            f.set_exception(exc)
            return f
        unk = self.tokenizer.unk_token_id
        ids = [i for i in (self.tokenizer.convert_tokens_to_ids(ch) for ch in out) if i != unk]
        ids = [*ids[:params.max_tokens - 1], self.tokenizer.eos_token_id]
        f.set_result(Completion(ids, [-0.5] * len(ids), [self.version] * len(ids), "stop",
                                self.tokenizer.decode(ids, skip_special_tokens=True)))
        return f


class ScriptedGateway:
    def __init__(self, gateway: Gateway, server: Any, engine: ScriptedEngine) -> None:
        self.gateway, self.server, self.engine = gateway, server, engine

    @property
    def url(self) -> str:
        return str(self.server.http_url)

    def session(self) -> tuple[Any, Endpoint]:
        """A new keyed session and the endpoint a harness uses for it."""
        s = self.gateway.open_session()
        return s, Endpoint(f"{self.url}/s/{s.id}/v1", s.key, "scripted")


@contextlib.contextmanager
def scripted_gateway(reply: Callable[[str], str], *, tool_parser: str | None = "hermes",
                     max_tokens: int = 4096) -> Iterator[ScriptedGateway]:
    tok = char_tokenizer(["<tool_call>", "</tool_call>"])
    engine = ScriptedEngine(tok, reply)
    gw = Gateway(EngineBackend(engine, tok, model="scripted", tool_parser=tool_parser,
                               max_tokens=max_tokens))
    server = start(gw)
    try:
        yield ScriptedGateway(gw, server, engine)
    finally:
        server.stop()


# Scripts for toy-lookup (a question about one key; look it up, then answer what was seen).

def lookup_then_answer(prompt: str) -> str:
    """toy-lookup in its tags: look the asked key up, then answer with the value seen."""
    seen = re.findall(r"<result>(?!\.\.\.)(.*?)</result>", prompt)
    if seen:
        return f"<answer>{seen[-1]}</answer>"
    return f"<lookup>{re.findall(r'key (k[0-9]+)', prompt)[-1]}</lookup>"


def tool_lookup_then_answer(prompt: str) -> str:
    seen = re.findall(r"<tool_response>(.*?)</tool_response>", prompt, re.S)
    if seen:
        value = re.sub(r" \(\d+ turns? left\)$", "", seen[-1].strip())
        call = {"name": "answer", "arguments": {"value": value}}
    else:
        call = {"name": "lookup", "arguments": {"key": re.findall(r"key (k[0-9]+)",
                                                                  prompt)[-1]}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"
