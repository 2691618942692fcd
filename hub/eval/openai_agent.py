"""`openai:MODEL`: an agent backed by any OpenAI-compatible chat-completions server.

One HTTP client covers every model a user is likely to evaluate: OpenAI itself, a local
`vllm serve MODEL` (`--base-url http://localhost:8000/v1`), SGLang, llama.cpp's server, LiteLLM
and the other gateways that speak `POST {base_url}/chat/completions`. It uses only the standard
library (`urllib.request`, `json`), so core skyhub gains no dependency and the agent works in
the minimal install.

`skyhub eval` calls `act` from one thread per running episode (`parallel = True`), so the
agent keeps `--concurrency` requests in flight; every call opens its own connection and the
shared state (statistics, the jitter generator) sits behind a lock.

`timeout` is the whole request's deadline, retries included: each attempt waits at most
`attempt_timeout` (default: half the deadline, so a stuck attempt gets one more try) and never
past the deadline, and no retry starts that could not finish in time. Each retry is announced
as it happens (`Agent.notice`: attempt, error, wait), so a slow or stuck server is visible
during the run, not only at its end.

Failures are sorted by what the user can do about them:
- transient (HTTP 408/409/429/5xx, refused or reset connections, timeouts, a body that is not
  a chat completion) are retried up to `max_retries` times within the deadline, with
  exponential backoff and full jitter, honouring the server's `Retry-After`; if every try
  fails the call raises `AgentError`, which the harness records as an infra error of that
  episode, not as a wrong answer;
- a missing or rejected key (401/403) or a wrong URL or model name (404) raise `UsageError` at
  once: retrying cannot fix them and the message says what to change;
- a dead endpoint (connection refused, a host name that does not resolve, a TLS failure) before
  the server has ever answered raises `UsageError` at once, naming the base URL: nothing
  listens there, and retrying 1,000 episodes against it would only waste the run. Once the
  server has answered a request, the same errors are a flaky server's and are retried;
- a hung endpoint (it accepts connections but no attempt gets a reply before the deadline)
  that has never answered raises `UsageError` too: the run stops after one deadline instead
  of spending a deadline on every episode;
- other client errors (400: the prompt exceeds the context window, a bad parameter...) raise
  `AgentError` at once with the server's explanation.

Function calling (a run with tools: `skyhub.eval.tool_protocol`): `use_tools` gives the
env's tool schemas, sent with each request as `tools` with `tool_choice: "auto"`; a reply's
`tool_calls` become the action (`Reply.tool_calls`, several per turn as the server sends
them), and the results come back in the next request as `role: "tool"` messages with their
`tool_call_id`. Whether the server takes `tools` is decided before the run by a probe; a
400 that names the tools later (a server that changed) turns the agent to text for the rest
of the run, with a notice (`tools_rejected`).

Over ~400 lines, for a reason: one job, a chat completion from an endpoint: the request, its
retries within one deadline, its errors sorted by what the user can do, and the function
calling probe and fallback that hang on those errors.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from skyhub.chat import Message
from skyhub.errors import AgentError, SkyhubError, UsageError
from skyhub.eval.agent import Agent, ReferenceFn, Reply
from skyhub.eval.tool_protocol import wire_messages
from skyhub.tools import ToolCall

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_RETRY_STATUSES = frozenset({408, 409, 429})
_ERROR_TEXT_LIMIT = 500


class _Transient(SkyhubError):
    """One failed attempt that is worth retrying; `wait` is the server's Retry-After."""

    def __init__(self, message: str, wait: float | None = None, *,
                 timed_out: bool = False) -> None:
        super().__init__(message)
        self.wait, self.timed_out = wait, timed_out


class _Rejected(AgentError):
    """A client error the server gave (400, 422...): not retried; `detail` is its text."""

    def __init__(self, message: str, status: int, detail: str) -> None:
        super().__init__(message)
        self.status, self.detail = status, detail


class OpenAIAgent(Agent):
    """A model behind an OpenAI-compatible `/chat/completions` endpoint.

    `base_url` defaults to `$OPENAI_BASE_URL`, else the OpenAI API; `api_key` to
    `$OPENAI_API_KEY` (no `Authorization` header is sent without one, as local vLLM or
    SGLang servers need none). `temperature`, `max_tokens`, `top_p` and `stop` go into the
    request when set, and `extra_body` is merged into it last (e.g. `{"top_k": 20}` for vLLM,
    `{"seed": 1}` to pin the server's sampling). `timeout` is each request's deadline in
    seconds, retries included; `attempt_timeout` (default `timeout / 2`) bounds one attempt's
    connect and each read. `seed` seeds the retry jitter only: it is not sent, so that repeated
    samples of one prompt stay independent.

    `stats` counts HTTP `requests` made, `retries` and `failures` (calls that raised).
    """

    parallel = True
    speaks_tools = True

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 temperature: float = 0.0, max_tokens: int | None = None,
                 top_p: float | None = None, stop: list[str] | None = None,
                 timeout: float = 120.0, attempt_timeout: float | None = None,
                 max_retries: int = 6, backoff_s: float = 1.0,
                 max_backoff_s: float = 60.0, seed: int = 0,
                 extra_body: dict[str, Any] | None = None) -> None:
        if not model:
            raise UsageError("openai agent: empty model name; write openai:MODEL, "
                             "e.g. openai:gpt-4o-mini or the name `vllm serve` was given")
        if max_retries < 0:
            raise UsageError(f"openai:{model}: max_retries must be >= 0, not {max_retries}")
        if timeout <= 0:
            raise UsageError(f"openai:{model}: timeout must be > 0 seconds, not {timeout}")
        if attempt_timeout is not None and attempt_timeout <= 0:
            raise UsageError(f"openai:{model}: attempt_timeout must be > 0 seconds, not "
                             f"{attempt_timeout}")
        self.model = model
        self.name = f"openai:{model}"
        base = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).strip()
        base = base.rstrip("/")
        if base.endswith("/chat/completions"):  # the full endpoint was given: accept it
            base = base[: -len("/chat/completions")]
        self.base_url = base
        self.url = f"{base}/chat/completions"
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.api_key = key or None
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.top_p = top_p
        self.stop = list(stop) if stop is not None else None
        self._env_stop: tuple[str, ...] = ()  # the env's stop strings, when they are used
        self.timeout = float(timeout)
        self.attempt_timeout = min(self.timeout, float(attempt_timeout)
                                   if attempt_timeout is not None else self.timeout / 2)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.extra_body = dict(extra_body or {})
        self.stats: dict[str, int] = {"requests": 0, "retries": 0, "failures": 0}
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._opener = urllib.request.build_opener()
        self._answered = False  # has the server ever answered (any HTTP status)?
        self.tools: list[dict[str, Any]] | None = None  # sent with each request (use_tools)
        self._probe_passed = False

    # -- public -------------------------------------------------------------------------

    def act(self, messages: list[Message], reference: ReferenceFn) -> Reply:
        if self.tools is None or self.tools_rejected:
            return self._complete(self._body(messages))
        try:
            return self._complete(self._body(messages))
        except _Rejected as e:
            if not self._rejects_tools(e):
                raise
            with self._lock:
                first = not self.tools_rejected
                self.tools_rejected = True
            if first:
                self.notice(f"{self.name}: the server rejected `tools` ({e.detail}); going on "
                            "in text without them. The envs' instructions still describe "
                            "tools: run again with --no-tools for a text run.")
            return self._complete(self._body(messages))

    def use_tools(self, tools: list[dict[str, Any]]) -> bool:
        """Send `tools` (and `tool_choice: "auto"`) with every request, after a probe: one
        small request with the tools (at most 8 tokens, one attempt). A 400 for it whose
        request passes without the tools means the server does not take them: a notice, and
        False (the run plays the text protocol). A probe that fails otherwise decides nothing
        (the tools stay; the run's own requests meet the failure with their retries)."""
        self.tools = [dict(t) for t in tools]
        rejected = self._probe()
        if rejected is None:
            return True
        self.tools = None
        if self._probe() is not None or not self._probe_passed:
            self.tools = [dict(t) for t in tools]  # the 400 was not about the tools
            return True
        self.notice(f"{self.name}: the server rejected a request with `tools` "
                    f"({rejected.detail}); this run uses the text protocol instead.")
        return False

    def _probe(self) -> _Rejected | None:
        """One attempt at a tiny request with the current settings: the client error it got,
        else None (`_probe_passed` says whether it was answered)."""
        body = {**self._body([{"role": "user", "content": "Reply with OK."}]), "max_tokens": 8}
        self._probe_passed = False
        self._count("requests")
        try:
            self._post(json.dumps(body).encode(), self.attempt_timeout)
        except _Rejected as e:
            return e
        except _Transient:
            return None
        self._probe_passed = True
        return None

    def _complete(self, body: dict[str, Any]) -> Reply:
        """One chat completion, with the retries and deadline of the module docstring."""
        data = json.dumps(body).encode()
        deadline = time.monotonic() + self.timeout
        last, attempts, timeouts = "no attempt made", 0, 0
        tries = self.max_retries + 1
        while attempts < tries:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            attempts += 1
            self._count("requests")
            try:
                return self._post(data, min(self.attempt_timeout, left))
            except _Transient as e:
                last = str(e)
                timeouts += e.timed_out
                if attempts == tries:
                    break
                wait = self._delay(attempts - 1, e.wait)
                left = deadline - time.monotonic()
                if wait >= left:  # no time left for another attempt
                    break
                self._count("retries")
                self.notice(f"{self.name}: attempt {attempts} of {tries} failed ({last}); "
                            f"retrying in {wait:.1f} s ({left:.1f} s left of the "
                            f"{self.timeout:g} s --timeout)")
                time.sleep(wait)
            except Exception:
                self._count("failures")
                raise
        self._count("failures")
        plural = "s" if attempts != 1 else ""
        if not self._answered and attempts and timeouts == attempts:
            raise UsageError(
                f"{self.name}: cannot reach {self.base_url} (no reply within the "
                f"{self.timeout:g} s --timeout: {attempts} attempt{plural} timed out; it "
                "accepts connections but has never answered). Check that the server has "
                "finished starting (vllm serve loads the model first) and that --base-url is "
                "its OpenAI endpoint (e.g. http://localhost:8000/v1); if it is only slow, "
                "raise --timeout.")
        raise AgentError(f"{self.name}: POST {self.url} failed after {attempts} attempt"
                         f"{plural} ({max(attempts - 1, 0)} retries) within the "
                         f"{self.timeout:g} s --timeout; last error: {last}. Check that the "
                         "server is up and not overloaded, or raise --timeout / lower "
                         "--concurrency.")

    def close(self) -> None:
        return None

    def settings(self) -> dict[str, Any]:
        return {"model": self.model, "base_url": self.base_url,
                "temperature": self.temperature, "max_tokens": self.max_tokens,
                "top_p": self.top_p, "stop": self.stop, "extra_body": self.extra_body}

    def sampling(self) -> str:
        return (f"temperature {self.temperature:g}, max tokens "
                f"{self.max_tokens if self.max_tokens is not None else 'server default'}, stop "
                f"{self.stop if self.stop is not None else 'the env stop strings'}")

    def __repr__(self) -> str:
        return f"<OpenAIAgent {self.name} at {self.base_url}>"

    # -- internals -----------------------------------------------------------------------

    def _body(self, messages: list[Message]) -> dict[str, Any]:
        tools = self.tools is not None and not self.tools_rejected
        body: dict[str, Any] = {"model": self.model, "messages": wire_messages(messages, tools),
                                "temperature": self.temperature}
        if tools:
            body["tools"], body["tool_choice"] = self.tools, "auto"
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.top_p is not None:
            body["top_p"] = self.top_p
        if self.stop is not None:
            body["stop"] = self.stop
        body.update(self.extra_body)
        return body

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "User-Agent": "skyhub-openai-agent"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_backoff_s)
        cap = min(self.max_backoff_s, self.backoff_s * (2 ** attempt))
        with self._lock:
            return self._rng.uniform(0.0, cap)

    def _post(self, data: bytes, timeout: float) -> Reply:
        req = urllib.request.Request(self.url, data=data, headers=self._headers(), method="POST")
        try:
            with self._opener.open(req, timeout=timeout) as resp:
                self._answered = True
                raw = resp.read()
        except urllib.error.HTTPError as e:
            self._answered = True
            raise self._http_error(e) from None
        except urllib.error.URLError as e:
            reason = e.reason
            if not self._answered and (dead := self._dead_endpoint(reason)) is not None:
                raise dead from None
            if isinstance(reason, TimeoutError):
                raise _Transient(f"timed out after {timeout:.1f} s connecting",
                                 timed_out=True) from None
            if isinstance(reason, OSError | str):
                raise _Transient(f"connection error: {reason}") from None
            raise _Transient(f"connection error: {e}") from None
        except TimeoutError:
            raise _Transient(f"timed out after {timeout:.1f} s waiting for the reply",
                             timed_out=True) from None
        except (ConnectionError, http.client.HTTPException, OSError) as e:
            if not self._answered and (dead := self._dead_endpoint(e)) is not None:
                raise dead from None
            raise _Transient(f"connection error: {type(e).__name__}: {e}") from None
        return self._parse(raw)

    def _dead_endpoint(self, reason: object) -> UsageError | None:
        """The fix for an endpoint that has never answered: nothing listens there, its host
        name does not resolve, or TLS fails. None for other errors (retried)."""
        where = f"{self.name}: cannot reach {self.base_url}"
        if isinstance(reason, ConnectionRefusedError):
            return UsageError(
                f"{where} (connection refused: nothing listens there). Check --base-url "
                "(host, port, http vs https; e.g. http://localhost:8000/v1) and that the "
                "server (vllm serve, sglang...) is running and has finished starting.")
        if isinstance(reason, socket.gaierror):
            return UsageError(
                f"{where} (the host name does not resolve: {reason}). Check the host in "
                "--base-url or $OPENAI_BASE_URL, and your network/DNS.")
        if isinstance(reason, ssl.SSLError | ssl.CertificateError):
            return UsageError(
                f"{where} (TLS failed: {reason}). Check http:// vs https:// in --base-url (a "
                "local server usually speaks plain http) and the server's certificate.")
        return None

    def _parse(self, raw: bytes) -> Reply:
        try:
            payload = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise _Transient(f"malformed JSON in the reply: {_snippet(raw)}") from None
        if not isinstance(payload, dict):
            raise _Transient(f"the reply is not a JSON object: {_snippet(raw)}")
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise _Transient(f"no choices in the reply: {_snippet(raw)}")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise _Transient(f"no message in the reply's first choice: {_snippet(raw)}")
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        raw_calls = message.get("tool_calls")
        calls = [ToolCall.from_openai(c, i) for i, c in enumerate(raw_calls)
                 if isinstance(c, dict)] if isinstance(raw_calls, list) else []
        if choices[0].get("finish_reason") == "stop" and not calls:
            text = self._with_stop_string(text, choices[0].get("stop_reason"))
        usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        return Reply(text=text, prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
                     completion_tokens=_int_or_none(usage.get("completion_tokens")),
                     tool_calls=calls or None)

    def use_stop_strings(self, stop: tuple[str, ...]) -> None:
        """Stop at the env's stop strings unless `stop=` was given. OpenAI allows 4."""
        if self.stop is None and stop:
            self.stop = list(stop)[:4]
            self._env_stop = tuple(self.stop)

    def _with_stop_string(self, text: str, stop_reason: Any) -> str:
        """Servers leave the stop string out of the text; the env needs it back
        (`<sql>SELECT 1` is no query, `<sql>SELECT 1</sql>` is). vLLM says which one matched
        (`stop_reason`); otherwise a closing tag whose opening tag is left open is restored."""
        stops = self._env_stop
        if not stops:
            return text
        if isinstance(stop_reason, str):
            return text + stop_reason if stop_reason in stops else text
        for s in stops:
            if s.startswith("</") and s.endswith(">"):
                opener = "<" + s[2:]
                if text.rfind(opener) > text.rfind(s):
                    return text + s
        return text

    def _http_error(self, e: urllib.error.HTTPError) -> Exception:
        status = e.code
        try:
            detail = _error_text(e.read())
        except Exception:
            detail = ""
        finally:
            e.close()
        what = f"HTTP {status}" + (f": {detail}" if detail else "")
        if status in (401, 403):
            return UsageError(
                f"{self.name}: {self.url} refused the request ({what}). Set OPENAI_API_KEY or "
                "pass --api-key with a key this server accepts.")
        if status == 404:
            return UsageError(
                f"{self.name}: {self.url} or model {self.model!r} was not found ({what}). Check "
                "--base-url (it should end in /v1, e.g. http://localhost:8000/v1) and the model "
                f"name (GET {self.base_url}/models lists the models the server serves).")
        if status in _RETRY_STATUSES or status >= 500:
            wait = None
            if status in (429, 503):
                wait = _retry_after(e.headers.get("Retry-After") if e.headers else None)
            return _Transient(what, wait)
        return _Rejected(f"{self.name}: POST {self.url} was rejected ({what}); not retried.",
                         status, detail)

    def _rejects_tools(self, e: _Rejected) -> bool:
        """A 400/422 that names the tools (vLLM without --enable-auto-tool-choice, a server
        that knows no function calling)."""
        return e.status in (400, 422) and "tool" in e.detail.lower()


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None  # an HTTP date: rare from model servers, fall back to our own backoff
    return seconds if seconds >= 0 else None


def _error_text(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        err = payload.get("error", payload.get("detail", payload.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            text = err if isinstance(err, str) else json.dumps(err)
    return _truncate(" ".join(text.split()), _ERROR_TEXT_LIMIT)


def _snippet(raw: bytes) -> str:
    return _truncate(repr(raw[:200].decode("utf-8", "replace")), 200)


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


__all__ = ["OpenAIAgent"]
