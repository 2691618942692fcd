"""A real OpenAI-compatible HTTP server for tests, with deterministic fault injection.

`ScriptedOpenAIServer` serves `POST /v1/chat/completions` and `GET /v1/models` on 127.0.0.1
(a free port) from a daemon thread. Its answers come from `reply(messages) -> str`, and its
faults are keyed by conversation (the JSON of the request's messages), so that a test sees the
same faults whatever order its threads' requests arrive in: the n-th attempt of a conversation
(counting from 0) gets

- HTTP 500 while n < fail_first;
- then HTTP 429 with `Retry-After: <retry_after>` for the next `rate_limit_first` attempts;
- then a 200 whose body is not JSON for the next `garble_first` attempts;
- then the answer.

`always_fail(messages)` true: that conversation always gets HTTP 503 (no Retry-After).
`hang_first` attempts of each conversation sleep `hang_s` before answering (to time clients
out); `delay_s` delays every answer. With `api_key` set, requests without
`Authorization: Bearer <api_key>` get 401 (not counted as attempts). `models` set: requests for
another model get 404, as vLLM answers. `reject(body)` returning a message: HTTP 400 with it.

    with ScriptedOpenAIServer(lambda msgs: "hi", fail_first=1) as server:
        agent = OpenAIAgent("m", base_url=server.base_url)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Messages = list[dict[str, Any]]


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: a burst of concurrent clients overflows it
    # and the kernel drops SYNs, which the clients resend after a second. Real servers
    # (uvicorn behind vLLM) listen with a backlog of 2048.
    request_queue_size = 512


class ScriptedOpenAIServer:
    def __init__(self, reply: Callable[[Messages], str] | None = None, *,
                 fail_first: int = 0, rate_limit_first: int = 0, retry_after: float = 0,
                 garble_first: int = 0, always_fail: Callable[[Messages], bool] | None = None,
                 hang_first: int = 0, hang_s: float = 0.0, api_key: str | None = None,
                 delay_s: float = 0.0, models: list[str] | None = None,
                 reject: Callable[[dict[str, Any]], str | None] | None = None) -> None:
        self.reply = reply or (lambda messages: f"echo: {messages[-1].get('content', '')}")
        self.fail_first = fail_first
        self.rate_limit_first = rate_limit_first
        self.retry_after = retry_after
        self.garble_first = garble_first
        self.always_fail = always_fail
        self.hang_first = hang_first
        self.hang_s = hang_s
        self.api_key = api_key
        self.delay_s = delay_s
        self.models = list(models) if models is not None else None
        self.reject = reject
        self.requests: list[tuple[str, Any, int]] = []  # (path, parsed body or text, status)
        self.attempts: dict[str, int] = {}  # conversation key -> attempts so far
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> ScriptedOpenAIServer:
        handler = type("Handler", (_Handler,), {"server_state": self})
        self._httpd = _Server(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="scripted-openai-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- counters ------------------------------------------------------------------------

    def count(self, status: int | None = None, path: str | None = None) -> int:
        """Requests recorded so far, optionally only those with this status and/or path."""
        with self._lock:
            return sum(1 for p, _, s in self.requests
                       if (status is None or s == status) and (path is None or p == path))

    @property
    def bodies(self) -> list[Any]:
        """The bodies of the chat-completion requests, in arrival order."""
        with self._lock:
            return [b for p, b, _ in self.requests if p.endswith("/chat/completions")]

    @staticmethod
    def key(messages: Messages) -> str:
        return json.dumps(messages, sort_keys=True)

    # -- request handling (called from the handler threads) ------------------------------

    def _record(self, path: str, body: Any, status: int) -> None:
        with self._lock:
            self.requests.append((path, body, status))

    def _next_attempt(self, messages: Messages) -> int:
        k = self.key(messages)
        with self._lock:
            n = self.attempts.get(k, 0)
            self.attempts[k] = n + 1
            return n

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1


class _Handler(BaseHTTPRequestHandler):
    server_state: ScriptedOpenAIServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return None

    # -- helpers -------------------------------------------------------------------------

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None,
              raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timed out) first
        self.close_connection = True

    def _error(self, status: int, message: str, kind: str,
               headers: dict[str, str] | None = None) -> dict[str, Any]:
        payload = {"error": {"message": message, "type": kind, "code": status}}
        self._send(status, payload, headers)
        return payload

    def _authorized(self) -> bool:
        key = self.server_state.api_key
        return key is None or self.headers.get("Authorization") == f"Bearer {key}"

    # -- verbs ---------------------------------------------------------------------------

    def do_GET(self) -> None:
        state = self.server_state
        if self.path.rstrip("/") != "/v1/models":
            state._record(self.path, None, 404)
            self._error(404, f"no route GET {self.path}", "not_found")
            return
        if not self._authorized():
            state._record(self.path, None, 401)
            self._error(401, "invalid or missing API key", "authentication_error")
            return
        names = state.models if state.models is not None else ["scripted"]
        state._record(self.path, None, 200)
        self._send(200, {"object": "list", "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": "skyhub-tests"}
            for m in names]})

    def do_POST(self) -> None:
        state = self.server_state
        state._enter()
        try:
            self._post(state)
        finally:
            state._leave()

    def _post(self, state: ScriptedOpenAIServer) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        path = self.path
        if path.rstrip("/") != "/v1/chat/completions":
            state._record(path, body, 404)
            self._error(404, f"no route POST {path}", "not_found")
            return
        if not self._authorized():
            state._record(path, body, 401)
            self._error(401, "invalid or missing API key", "authentication_error")
            return
        if (not isinstance(body, dict) or not isinstance(body.get("messages"), list)
                or not isinstance(body.get("model"), str)):
            state._record(path, body, 400)
            self._error(400, "the body must be a JSON object with 'model' and 'messages'",
                        "invalid_request_error")
            return
        if state.models is not None and body["model"] not in state.models:
            state._record(path, body, 404)
            self._error(404, f"The model `{body['model']}` does not exist.", "NotFoundError")
            return
        messages = body["messages"]
        n = state._next_attempt(messages)
        if n < state.hang_first and state.hang_s > 0:
            state._stop.wait(state.hang_s)
        if state.delay_s > 0:
            state._stop.wait(state.delay_s)
        if state.always_fail is not None and state.always_fail(messages):
            state._record(path, body, 503)
            self._error(503, "service unavailable (always_fail)", "server_error")
            return
        if n < state.fail_first:
            state._record(path, body, 500)
            self._error(500, f"injected failure {n + 1}/{state.fail_first}", "server_error")
            return
        if n < state.fail_first + state.rate_limit_first:
            ra = state.retry_after
            state._record(path, body, 429)
            self._error(429, "rate limited (injected)", "rate_limit_error",
                        {"Retry-After": str(int(ra)) if float(ra).is_integer() else str(ra)})
            return
        if n < state.fail_first + state.rate_limit_first + state.garble_first:
            state._record(path, body, 200)
            self._send(200, None, raw=b"{this is not json")
            return
        if state.reject is not None:
            why = state.reject(body)
            if why:
                state._record(path, body, 400)
                self._error(400, why, "BadRequestError")
                return
        text = state.reply(messages)
        prompt = sum(len(str(m.get("content") or "").split()) for m in messages
                     if isinstance(m, dict))
        completion = len(text.split())
        state._record(path, body, 200)
        self._send(200, {
            "id": f"chatcmpl-{abs(hash(state.key(messages))) % 10**12}-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion},
        })
