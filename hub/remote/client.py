"""`RemoteEnv`: a `TextEnv` whose env runs on a skyhub server (`skyhub serve`).

It behaves like the local env so trainers need no change: the same obs, reward, terminated,
truncated and info (infos travel as JSON: tuples arrive as lists, numpy scalars as numbers),
`system_prompt`, `stop_strings`, `reference_action()`, seeds and `options` (`task_id`, or a
`Task`, sent as its dict) passed through. Differences a caller may rely on:

- `tasks` is fetched lazily, on first access, in pages: ids, prompts and meta, but no answers
  (they stay on the server). `task` (the current one) comes with every reset.
- `reference_action()` (the gold) works only where the server's operator exposes it (`skyhub
  serve --expose-reference`); elsewhere it raises a `UsageError` that says so
  (`reference_exposed` tells beforehand). So does the `expected` of `task_record()`, which is
  None elsewhere; its `question` comes with every reset.
- A server that refuses the connection for its Host/Origin policy (a name it does not
  answer: `skyhub serve --allow-host NAME`) raises a `UsageError` in the server's words.
- Broken infrastructure raises `skyhub.errors.InfraError`: a lost connection, a server that
  stops answering (`timeout`), or an env that crashed on the server. That is the contract of
  every skyhub env (exceptions are for infrastructure), so a `VectorEnv` turns it into an
  `infra_error` result and recreates the env, and no trainer scores it as a reward 0. After
  a lost connection, the next `reset` reconnects (a new session, same kwargs).
- Errors that are the caller's (an unknown `task_id`: `KeyError`; a kwarg or a client-defined
  task the server refuses, a malformed request: `UsageError`) are raised as such. What the
  env raised on the server arrives as `InfraError` naming an incident id only (the server's
  log has the details: its text could tell a client about the server's files).
- `tools` and `protocol` are the server env's; a turn of tool calls (`step(ToolCall(...))`,
  a list, an assistant message) crosses the wire as OpenAI `tool_calls` entries and is
  played by the server's env, so `info["tool_results"]` is what the local env would give.
  `reference_tool_calls()` is gated like `reference_action()`.
- One call at a time per env (a lock guards the socket), as for any env.
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import os
import sys
import threading
import urllib.parse
import weakref
from collections.abc import Sequence
from typing import Any

from skyhub.env import StepResult, TextEnv
from skyhub.errors import InfraError, UsageError
from skyhub.remote import wire
from skyhub.task import Task
from skyhub.tools import ToolCall

CLOSE_TIMEOUT_S = 5.0

#: Open remote envs, closed at exit while websockets' threads still run (a `__del__` during
#: interpreter shutdown could otherwise wait forever for the server's reply).
_live: weakref.WeakSet[RemoteEnv] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for env in list(_live):
        with contextlib.suppress(Exception):
            env.close()


class _LazyTasks(Sequence[Task]):
    """The server env's task set, fetched on first use (a 100k-task set costs nothing until
    someone looks at it). Supports `get(task_id)` like a `TaskSet`."""

    def __init__(self, env: RemoteEnv) -> None:
        self._env = env
        self._tasks: list[Task] | None = None
        self._index: dict[str, int] = {}

    def _load(self) -> list[Task]:
        if self._tasks is None:
            tasks: list[Task] = []
            total = None
            while total is None or len(tasks) < total:
                page = self._env._request({"op": "tasks", "offset": len(tasks)}, "tasks")
                total = page["total"]
                if not page["tasks"]:
                    break
                tasks += [Task(t["id"], t["prompt"], None, t.get("meta") or {})
                          for t in page["tasks"]]
            self._index = {t.id: i for i, t in enumerate(tasks)}
            self._tasks = tasks
        return self._tasks

    def __len__(self) -> int:
        return len(self._load())

    def __getitem__(self, i: Any) -> Any:
        return self._load()[i]

    def __iter__(self) -> Any:
        return iter(self._load())

    def __contains__(self, item: object) -> bool:
        self._load()
        key = item if isinstance(item, str) else getattr(item, "id", None)
        return key in self._index

    def get(self, task_id: str) -> Task:
        self._load()
        try:
            return self._load()[self._index[task_id]]
        except KeyError:
            raise KeyError(f"no task with id {task_id!r} on the server's env") from None

    def ids(self) -> list[str]:
        return [t.id for t in self._load()]

    def __repr__(self) -> str:
        n = "?" if self._tasks is None else len(self._tasks)
        return f"RemoteTasks({self._env.env_id}, {n} tasks)"


class RemoteEnv(TextEnv):
    """A session with a skyhub server; see the module docstring for what differs from a
    local env (nothing a trainer sees, except that infrastructure errors can be network
    errors)."""

    def __init__(self, env_id: str, url: str, *, token: str | None = None,
                 kwargs: dict[str, Any] | None = None, timeout: float | None = None,
                 open_timeout: float = 30.0) -> None:
        super().__init__()
        self.env_id, self.base_url = env_id, url.rstrip("/")
        self.url = f"{self.base_url}/v1/envs/{urllib.parse.quote(env_id, safe='')}/session"
        self.token = token if token is not None else os.environ.get("SKYHUB_TOKEN") or None
        self.env_kwargs = dict(kwargs or {})
        self.timeout, self.open_timeout = timeout, open_timeout
        self._lock = threading.RLock()
        self._ws: Any = None
        self.session_id: str | None = None
        self.tasks = _LazyTasks(self)
        self._connect()
        _live.add(self)

    # ------------------------------------------------------------------ transport
    def _connect(self) -> None:
        from websockets.exceptions import (
            ConnectionClosed,
            InvalidHandshake,
            InvalidStatus,
            InvalidURI,
        )
        from websockets.sync.client import connect

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        # The connection outlives any `with` block here; websockets >= 15.1 wants that said.
        legacy = {"legacy": True} if "legacy" in inspect.signature(connect).parameters else {}
        try:
            self._ws = connect(self.url, additional_headers=headers, open_timeout=self.open_timeout,
                               max_size=None, compression=None, **legacy)
        except InvalidURI as e:
            raise UsageError(f"{self.base_url!r} is not a WebSocket URL: {e}; pass "
                             "remote='ws://HOST:PORT'") from None
        except InvalidStatus as e:
            raise self._handshake_refused(e) from None
        except (OSError, InvalidHandshake, TimeoutError) as e:
            raise InfraError(f"cannot reach the skyhub server at {self.base_url} ({e}); is "
                             f"`skyhub serve {self.env_id}` running there?") from e
        try:
            reply = self._exchange({"op": "open", "kwargs": self.env_kwargs}, "open")
        except ConnectionClosed as e:  # refused at the door: token, capacity, unknown id
            self._ws = None
            raise self._refusal(e) from None
        except BaseException:  # a refused open (kwargs, ...): do not hold the server's slot
            self._drop()
            raise
        self.session_id = reply["session"]
        #: whether the server answers `reference_action` (None: a server too old to say)
        self.reference_exposed: bool | None = reply.get("reference_action")
        self.system_prompt = reply.get("system_prompt")
        self.stop_strings = tuple(reply.get("stop_strings") or ())
        self.num_tasks: int = reply.get("num_tasks", 0)
        #: the server env's tools (OpenAI function schemas) and protocol; None, "tags" from a
        #: server that predates tool calls
        self.tools = reply.get("tools")
        self.protocol = reply.get("env_protocol") or "tags"

    def _handshake_refused(self, e: Any) -> Exception:
        """The server answered the WebSocket handshake with an HTTP error: a 403 is its
        Host/Origin policy (`skyhub serve --allow-host`), said in its own words."""
        import json

        response = getattr(e, "response", None)
        status = getattr(response, "status_code", None)
        detail = ""
        with contextlib.suppress(AttributeError, TypeError, ValueError):
            detail = json.loads(bytes(response.body or b"")).get("detail", "")
        where = f"skyhub server {self.base_url}"
        if status == 403:
            return UsageError(f"{where} refused the connection: {detail or 'forbidden'}")
        return InfraError(f"{where} answered the handshake with HTTP {status}"
                          + (f": {detail}" if detail else ""))

    def _refusal(self, e: Any) -> Exception:
        from skyhub.errors import EnvNotFound, SandboxUnavailable

        rcvd = getattr(e, "rcvd", None)
        code, reason = (rcvd.code, rcvd.reason) if rcvd is not None else (None, str(e))
        where = f"skyhub server {self.base_url}"
        if code == wire.CLOSE_UNAUTHORIZED:
            return UsageError(f"{where} refused the session: {reason}")
        if code == wire.CLOSE_NOT_FOUND:
            return EnvNotFound(f"{where}: {reason}", env_id=self.env_id)
        if code == wire.CLOSE_CAPACITY:
            return SandboxUnavailable(f"{where}: {reason}")
        return InfraError(f"{where} closed the session (code {code}: {reason})")

    def _exchange(self, msg: dict[str, Any], what: str) -> dict[str, Any]:
        import json

        self._ws.send(wire.dumps(msg))
        reply = json.loads(self._ws.recv(timeout=self.timeout))
        if not reply.get("ok"):
            wire.raise_error(reply.get("error") or {}, f"remote {self.env_id} {what}")
        return reply

    def _request(self, msg: dict[str, Any], what: str, *, reconnect: bool = False) -> dict:
        """Send one request and return its successful reply; network trouble is InfraError."""
        from websockets.exceptions import ConnectionClosed

        if self.closed:
            raise UsageError(f"remote env {self.env_id} is closed; make a new one")
        with self._lock:
            if self._ws is None:
                if not reconnect:
                    raise InfraError(f"the connection to {self.base_url} was lost earlier; "
                                     "reset() reconnects")
                self._connect()
            try:
                return self._exchange(msg, what)
            except (ConnectionClosed, OSError, TimeoutError) as e:
                self._drop()
                detail = (f"server closed the session (code {e.rcvd.code}: {e.rcvd.reason})"
                          if isinstance(e, ConnectionClosed) and e.rcvd is not None else
                          f"{type(e).__name__}: {e}")
                raise InfraError(f"lost the skyhub server at {self.base_url} during {what} "
                                 f"({detail}); this episode is an infra error, reset() "
                                 "reconnects") from e

    def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.close()

    # ------------------------------------------------------------------ the env API
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        import gymnasium

        gymnasium.Env.reset(self, seed=seed)
        if options and isinstance(options.get("task"), Task):
            options = {**options, "task": options["task"].to_dict()}
        reply = self._request({"op": "reset", "seed": seed, "options": options}, "reset",
                              reconnect=True)
        t = reply.get("task")
        self.task = None if t is None else Task(t["id"], t["prompt"], None, t.get("meta") or {})
        self.system_prompt = reply.get("system_prompt", self.system_prompt)
        self._question = reply.get("question")
        info = reply["info"]
        self.turn = info.get("turn", 0) if isinstance(info, dict) else 0
        return reply["obs"], info

    def step(self, action: str) -> StepResult:
        return self._step(action)

    def _step(self, action: str | dict[str, Any]) -> StepResult:
        """One `step` request: text, or a tool turn from `step_tools` (`{"content",
        "tool_calls"}`: `wire.checked_action`)."""
        reply = self._request({"op": "step", "action": action}, "step")
        info = reply["info"]
        if isinstance(info, dict):
            self.turn = info.get("turn", self.turn)
        return reply["obs"], reply["reward"], reply["terminated"], reply["truncated"], info

    def step_tools(self, content: str, calls: list[ToolCall]) -> StepResult:
        """A turn of structured calls, sent as OpenAI `tool_calls` entries and played by the
        server's env (its own `step_tools`), so a remote tool episode is scored exactly as a
        local one; `info["tool_results"]` comes back by call id."""
        return self._step({"content": content, "tool_calls": [c.to_openai() for c in calls]})

    def reference_tool_calls(self) -> list[ToolCall] | None:
        """The server env's `reference_tool_calls()`, where the server exposes the gold (as
        `reference_action`)."""
        if self.reference_exposed is False:
            raise UsageError(f"remote {self.env_id} reference_tool_calls: skyhub server "
                             f"{self.base_url}: {wire.REFERENCE_REFUSED}")
        value = self._request({"op": "call", "name": "reference_tool_calls"},
                              "reference_tool_calls")["value"]
        return None if value is None else [ToolCall.from_openai(c, i)
                                           for i, c in enumerate(value)]

    def reference_action(self) -> str | None:
        """The server env's reference action, where the server exposes it (`skyhub serve
        --expose-reference`); a `UsageError` that says so otherwise."""
        if self.reference_exposed is False:
            raise UsageError(f"remote {self.env_id} reference_action: skyhub server "
                             f"{self.base_url}: {wire.REFERENCE_REFUSED}")
        return self._request({"op": "call", "name": "reference_action"},
                             "reference_action")["value"]

    def display_question(self) -> str | None:
        """The server env's `display_question()`, sent with each reset (an older server's
        reply lacks it: then the task's meta or prompt, as `TextEnv` reads them)."""
        question = getattr(self, "_question", None)
        return question if isinstance(question, str) else super().display_question()

    def expected_answer(self) -> dict[str, Any] | None:
        """The server env's expected answer where the server exposes the gold (`skyhub serve
        --expose-reference`; its env's `expected_secret` still holds), else None: the
        answers stay on the server, as `reference_action`'s do."""
        if not self.reference_exposed or self.task is None:
            return None
        record = self._request({"op": "call", "name": "task_record"}, "task_record")["value"]
        return record.get("expected") if isinstance(record, dict) else None

    def get_remote_attr(self, name: str) -> Any:
        """Read one of the server env's whitelisted attributes (`skyhub.remote.wire.READABLE`)."""
        return self._request({"op": "call", "name": name}, name)["value"]

    def close(self) -> None:
        _live.discard(self)
        if sys.is_finalizing():
            # websockets' reader thread is frozen now: a handshake would wait forever. The
            # server sees the socket go and closes the env itself.
            ws, self._ws = self._ws, None
            if ws is not None:
                with contextlib.suppress(Exception):
                    ws.socket.close()
            return
        with self._lock:
            if self._ws is not None:
                # the server closes the env when the socket goes anyway, so do not wait long
                timeout, self.timeout = self.timeout, CLOSE_TIMEOUT_S
                with contextlib.suppress(Exception):
                    self._exchange({"op": "close"}, "close")
                self.timeout = timeout
                self._drop()

    def __repr__(self) -> str:
        return f"<RemoteEnv {self.env_id} at {self.base_url}>"


def make_remote(env_id: str, url: str, token: str | None = None,
                **kwargs: Any) -> RemoteEnv:
    """A `RemoteEnv` for `env_id` served at `url` (`ws://host:port`); `kwargs` go to the
    env's constructor on the server (which may refuse them). `token` defaults to
    `$SKYHUB_TOKEN`. Connection options: pass `timeout=` (seconds to wait for a reply) or
    `open_timeout=` through `RemoteEnv` directly."""
    return RemoteEnv(env_id, url, token=token, kwargs=kwargs)
