"""`skyhub serve` against a hostile client: everything here is an attack made from
127.0.0.1 with a real WebSocket or HTTP client on a real uvicorn server, and the refusal the
server must give. Bounded: a few dozen sockets at most, timeouts of a fraction of a second
where the attack is waiting, generous deadlines (polling) for everything else."""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import socket
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

import skyhub
from skyhub import Task, TaskSet, TextEnv
from skyhub.errors import InfraError, SandboxUnavailable, UsageError
from skyhub.remote.client import make_remote
from skyhub.remote.server import ServerThread

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from polling import eventually

pytestmark = pytest.mark.hostile

BLOCK = "testhostile-block"
SECRET_PROMPT = "the server's private prompt 7f3a"
_release = threading.Event()  # lets BlockingEnv's "block" step finish
_entered = threading.Event()  # set when a "block" step has started


class BlockingEnv(TextEnv):
    """A step of "block" waits (for the test to release it, 30 s at most): an env call that
    hangs, as a slow database or a wedged sandbox would."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks = TaskSet([Task("t0", "task 0", answer=1)])

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.start_episode(seed, options)
        return "start", self.make_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if action == "block":
            _entered.set()
            _release.wait(30)
        self.turn += 1
        return f"did {action}", 0.0, False, False, self.make_info()


@pytest.fixture(scope="module", autouse=True)
def _registered() -> Iterator[None]:
    skyhub.register(BLOCK, BlockingEnv, override=True)
    yield
    skyhub.registry.unregister(BLOCK)


def raw(srv: ServerThread, env_id: str = "toy-arith", path: str = "", **kw: Any) -> Any:
    """A bare WebSocket to a session URL (it may outlive a `with` block: websockets >= 15.1
    wants that said)."""
    legacy = {"legacy": True} if "legacy" in inspect.signature(connect).parameters else {}
    return connect(f"{srv.url}/v1/envs/{env_id}/session{path}", compression=None,
                   open_timeout=20, **legacy, **kw)


def ask(ws: Any, msg: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps(msg))
    return json.loads(ws.recv(timeout=20))


def closed_with(ws: Any, timeout: float = 20.0) -> tuple[int, str]:
    """The close code and reason the server ends `ws` with (waiting for it)."""
    with pytest.raises(ConnectionClosed) as e:
        while True:
            ws.recv(timeout=timeout)
    assert e.value.rcvd is not None, "the connection ended without a close frame"
    return e.value.rcvd.code, e.value.rcvd.reason


def http(url: str, headers: dict[str, str] | None = None) -> int:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


# ------------------------------------------------------------------------ kwargs and tasks
def test_client_kwargs_are_refused_unless_the_operator_allows_them(tmp_path: Path) -> None:
    """The attack: `n_tasks=3e6` (gigabytes and a minute per open), `tasks_file=` (read a
    server file back as prompts), and `timeout_s`/`data_dir`/`dsn`, chosen by the client."""
    secret = tmp_path / "private.jsonl"
    secret.write_text(json.dumps({"id": "p1", "prompt": SECRET_PROMPT, "answer": "1"}) + "\n")
    with ServerThread(["toy-arith"]) as srv:  # the defaults: no client kwarg at all
        for kwargs in ({"tasks_file": str(secret)}, {"n_tasks": 3_000_000},
                       {"data_dir": "/"}, {"max_turns": 2}):
            with pytest.raises(UsageError, match="KwargsNotAllowed") as e:
                make_remote("toy-arith", srv.url, **kwargs)
            assert "--allow-kwargs" in str(e.value)
        assert eventually(lambda: srv.hub.in_use() == 0)
        with make_remote("toy-arith", srv.url) as env:  # without kwargs all is well
            assert env.reset(seed=0)[0]
            assert SECRET_PROMPT not in [t.prompt for t in env.tasks]
    with ServerThread(["toy-arith"], allow_kwargs=("max_turns",)) as srv:
        with make_remote("toy-arith", srv.url, max_turns=2) as env:
            assert env.get_remote_attr("max_turns") == 2
        with pytest.raises(UsageError, match=r"\['tasks_file'\].*allowed: \['max_turns'\]"):
            make_remote("toy-arith", srv.url, max_turns=2, tasks_file=str(secret))


def test_env_errors_say_nothing_about_the_servers_files(tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    """Even where the operator allows a path kwarg, the replies to a missing path, a file
    that is not JSONL and a directory are the same words (no oracle for what exists); the
    details are in the server's log, under the incident id the client was given."""
    garbage = tmp_path / "exists.txt"
    garbage.write_text("not json at all\n")
    probes = [str(tmp_path / "no-such-file.jsonl"), str(garbage), str(tmp_path), "/etc/shadow"]
    replies = []
    with ServerThread(["toy-arith"], allow_kwargs=("tasks_file",)) as srv, \
            caplog.at_level(logging.WARNING, logger="skyhub.remote"):
        for path in probes:
            with raw(srv) as ws:
                reply = ask(ws, {"op": "open", "kwargs": {"tasks_file": path}})
            assert reply["ok"] is False
            replies.append(reply["error"])
    incidents = [r.pop("incident") for r in replies]
    texts = [r["message"].replace(i, "ID") for r, i in zip(replies, incidents, strict=True)]
    assert len(set(texts)) == 1 and {r["type"] for r in replies} == {"EnvError"}, replies
    for word in ("No such file", "Errno", "tmp", "shadow", "JSON", "directory", "Permission"):
        assert word not in texts[0], texts[0]
    logged = caplog.text
    assert all(i in logged for i in incidents)
    assert "no-such-file.jsonl" in logged  # the operator sees what happened


def test_client_defined_tasks_are_refused_unless_allowed() -> None:
    """The attack: `reset(options={"task": ...})` makes the server run a task the client
    wrote (for Harbor, one that asks for network and runs its own verifier)."""
    task = Task("mine", "my own prompt", "x", meta={"network": True})
    with ServerThread(["toy-arith"]) as srv, make_remote("toy-arith", srv.url) as env:
        with pytest.raises(UsageError, match="client-defined tasks"):
            env.reset(options={"task": task})
        with raw(srv) as ws:
            assert ask(ws, {"op": "open"})["ok"]
            other = ask(ws, {"op": "reset", "options": {"evil": 1}})
            assert other["error"]["type"] == "NotAllowed" and "task_id" in \
                    other["error"]["message"]
            for seed in (-1, 2**64, True, "3", 1.5):
                bad = ask(ws, {"op": "reset", "seed": seed})
                assert bad["error"]["type"] == "BadMessage", (seed, bad)
        # picking one of the server's tasks is fine, and an unknown id is the client's
        # KeyError, in the server's words
        task_id = env.tasks[3].id
        assert env.reset(options={"task_id": task_id})[1]["task_id"] == task_id
        with pytest.raises(KeyError, match="no task with id 'nope'"):
            env.reset(options={"task_id": "nope"})
    with ServerThread(["toy-arith"], allow_client_tasks=True) as srv, \
            make_remote("toy-arith", srv.url) as env:
        assert env.reset(options={"task": task})[0] == "my own prompt"


# ------------------------------------------------------------------------ holding slots
def test_sockets_that_never_open_are_closed_and_free_their_slots() -> None:
    """The attack: every slot taken by WebSockets that never send `open` (pings don't
    count), so legitimate clients get 4429 for the idle TTL (600 s)."""
    with ServerThread(["toy-arith"], max_sessions=4, open_timeout_s=0.5,
                      idle_ttl_s=600) as srv:
        squatters = [raw(srv) for _ in range(4)]
        try:
            assert eventually(lambda: srv.hub.in_use() == 4)
            with pytest.raises(SandboxUnavailable, match="server full"):
                make_remote("toy-arith", srv.url)
            assert ask(squatters[0], {"op": "ping"})["pong"]  # no extension of the deadline
            for ws in squatters:
                code, reason = closed_with(ws)
                assert code == 4408 and "open" in reason
            assert eventually(lambda: srv.hub.in_use() == 0)
        finally:
            for ws in squatters:
                ws.close()
        # a failed open does not stop the clock either
        with raw(srv) as ws:
            assert ask(ws, {"op": "open", "kwargs": {"n_tasks": 1}})["ok"] is False
            assert closed_with(ws)[0] == 4408
        with make_remote("toy-arith", srv.url) as env:  # served again
            assert env.reset(seed=1)[0]


def test_idle_tcp_connections_do_not_lock_anyone_out() -> None:
    """Raw TCP sockets that connect and say nothing, or half an HTTP request, take no slot."""
    with ServerThread(["toy-arith"], max_sessions=2) as srv:
        socks = []
        try:
            for i in range(40):
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
                if i % 2:
                    s.sendall(b"GET /v1/envs/toy-arith/session HTTP/1.1\r\nHost: x\r\n")
                socks.append(s)
            with make_remote("toy-arith", srv.url) as a, make_remote("toy-arith", srv.url) as b:
                assert a.reset(seed=0)[0] and b.reset(seed=1)[0]
        finally:
            for s in socks:
                s.close()


def test_many_concurrent_sessions_get_served_up_to_capacity_then_4429() -> None:
    n, cap = 24, 12
    holding, refused, errors = [], [], []
    ready, go = threading.Barrier(cap + 1, timeout=60), threading.Event()
    with ServerThread(["toy-lookup"], max_sessions=cap, expose_reference=True) as srv:
        local = skyhub.make("toy-lookup")

        def holder(k: int) -> None:
            try:
                with make_remote("toy-lookup", srv.url) as env:
                    obs, _ = env.reset(seed=k)
                    assert obs == local.reset(seed=k)[0]
                    holding.append(k)
                    ready.wait()
                    go.wait(60)
                    action = env.reference_action()
                    assert env.step(action)[0]
            except BaseException as e:  # reported below
                errors.append(e)
                ready.abort()

        threads = [threading.Thread(target=holder, args=(k,)) for k in range(cap)]
        for t in threads:
            t.start()
        ready.wait()
        for _ in range(n - cap):  # every slot taken: the rest are refused at the door
            try:
                make_remote("toy-lookup", srv.url)
            except SandboxUnavailable:
                refused.append(1)
        go.set()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert sorted(holding) == list(range(cap)) and len(refused) == n - cap
        assert eventually(lambda: srv.hub.in_use() == 0)


def test_a_stuck_env_call_ends_its_session_and_keeps_its_slot_until_it_returns() -> None:
    _release.clear()
    _entered.clear()
    with ServerThread([BLOCK], max_sessions=1, op_timeout_s=0.5) as srv:
        env = make_remote(BLOCK, srv.url)
        env.reset()
        with pytest.raises(InfraError, match="4504"):
            env.step("block")
        assert _entered.is_set()
        # its thread is still in the step: the slot is not free, whatever the client does
        assert srv.hub.in_use() == 1
        with pytest.raises(SandboxUnavailable, match="server full"):
            make_remote(BLOCK, srv.url)
        _release.set()
        assert eventually(lambda: srv.hub.in_use() == 0)
        assert env.reset()[0] == "start"  # reconnects: a new session
        assert env.step("fine")[0] == "did fine"
        env.close()


def test_sessions_end_at_their_lifetime_cap() -> None:
    with ServerThread([BLOCK], max_session_s=0.5) as srv:
        env = make_remote(BLOCK, srv.url)
        env.reset()

        def ended() -> bool:
            try:
                env.step("x")
            except InfraError as e:
                assert "4408" in str(e) and "at most" in str(e)
                return True
            return False

        assert eventually(ended)
        env.close()


# ------------------------------------------------------------------------ big messages
def test_oversized_messages_from_many_sessions_leave_the_server_up() -> None:
    with ServerThread(["toy-arith"], max_message_bytes=10_000) as srv:
        sockets = [raw(srv) for _ in range(8)]
        try:
            for ws in sockets:
                assert ask(ws, {"op": "open"})["ok"]
                big = ask(ws, {"op": "step", "action": "x" * 20_000})
                assert big["error"]["type"] == "MessageTooBig"
                # past the transport limit: the server may close before the send is done
                with contextlib.suppress(ConnectionClosed):
                    ws.send("y" * (1 << 21))
            for ws in sockets:
                # the server ends each with 1009; when it closes while our 2 MiB are still
                # unread, TCP resets the connection and the close frame may be lost with it
                with pytest.raises(ConnectionClosed) as e:
                    while True:
                        ws.recv(timeout=20)
                assert e.value.rcvd is None or e.value.rcvd.code == 1009
        finally:
            for ws in sockets:
                ws.close()
        assert eventually(lambda: srv.hub.in_use() == 0)
        with make_remote("toy-arith", srv.url) as env:
            assert env.reset(seed=0)[0]


# ------------------------------------------------------------------------ the token
TOKEN = "s3cret-token-4c1d"


def test_the_token_guards_every_route_and_is_read_from_the_header_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYHUB_TOKEN", raising=False)
    with ServerThread(["toy-arith"], token=TOKEN) as srv:
        good = {"Authorization": f"Bearer {TOKEN}"}
        for route in ("/docs", "/openapi.json", "/redoc", "/v1/envs", "/docs/oauth2-redirect"):
            url = srv.http_url + route
            assert http(url) == 401, route
            assert http(url, {"Authorization": "Bearer wrong"}) == 401, route
            assert http(f"{url}?token={TOKEN}") == 401, route
        assert http(srv.http_url + "/v1/envs", good) == 200
        assert http(srv.http_url + "/openapi.json", good) == 200
        assert http(srv.http_url + "/health") == 200
        with raw(srv, path=f"?token={TOKEN}") as ws:
            code, reason = closed_with(ws)
            assert code == 4401 and "header" in reason
        with raw(srv, additional_headers=good) as ws:
            assert ask(ws, {"op": "open"})["ok"]


def test_a_token_sent_in_a_url_never_reaches_a_log_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYHUB_TOKEN", raising=False)
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    keep = Keep()
    loggers = [logging.getLogger(n) for n in ("uvicorn", "uvicorn.error", "uvicorn.access",
                                              "skyhub.remote")]
    with ServerThread(["toy-arith"], token=TOKEN, log_level="info") as srv:
        for lg in loggers:  # after uvicorn configured its logging
            lg.addHandler(keep)
        try:
            for query in (f"?token={TOKEN}", f"?x=1&token={TOKEN}", f"?api_key={TOKEN}"):
                assert http(f"{srv.http_url}/v1/envs{query}") == 401
                with raw(srv, path=query) as ws:
                    assert closed_with(ws)[0] == 4401
            with raw(srv, additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
                assert ask(ws, {"op": "open"})["ok"]
            assert eventually(lambda: any("REDACTED" in r for r in records))
        finally:
            for lg in loggers:
                lg.removeHandler(keep)
    assert records, "no log line captured: the test would prove nothing"
    assert not [r for r in records if TOKEN in r]


def test_serve_command_flags_reach_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    import typer
    from typer.testing import CliRunner

    import skyhub.remote.server as server
    from skyhub.cli.serve_cmd import serve_cmd

    seen: dict[str, Any] = {}
    monkeypatch.setattr(server, "serve", lambda *a, **kw: seen.update(kw))
    app = typer.Typer()
    app.command()(serve_cmd)
    result = CliRunner().invoke(app, ["toy-arith", "--allow-kwargs", "max_turns, split",
                                      "--allow-kwargs", "seed", "--allow-client-tasks",
                                      "--open-timeout", "5", "--op-timeout", "60",
                                      "--max-session-time", "3600"], env={"SKYHUB_TOKEN": ""})
    assert result.exit_code == 0, result.output
    assert seen["allow_kwargs"] == ["max_turns", "split", "seed"]
    assert seen["allow_client_tasks"] is True
    assert (seen["open_timeout_s"], seen["op_timeout_s"], seen["max_session_s"]) == (5, 60, 3600)
    result = CliRunner().invoke(app, ["toy-arith"], env={"SKYHUB_TOKEN": ""})
    assert seen["allow_kwargs"] == [] and seen["allow_client_tasks"] is False
