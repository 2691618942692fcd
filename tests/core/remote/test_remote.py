"""The env server and RemoteEnv, with real uvicorn servers and real WebSocket clients."""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import sys
import threading
import time
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
from skyhub.errors import EnvNotFound, InfraError, SandboxUnavailable, UsageError
from skyhub.remote.client import RemoteEnv, make_remote
from skyhub.remote.server import ServerThread, check_bind, serve
from skyhub.vector import VectorEnv

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
import remote_testenvs
from polling import eventually

REC = "testremote-rec"


@pytest.fixture(scope="module", autouse=True)
def _registered() -> Iterator[None]:
    skyhub.register(REC, "remote_testenvs:RecordingEnv", override=True)
    yield
    skyhub.registry.unregister(REC)


@pytest.fixture(scope="module")
def server(_registered: None) -> Iterator[ServerThread]:
    with ServerThread(["toy-lookup", REC], max_message_bytes=10_000,
                      allow_kwargs=("max_turns", "label", "fail_on"),
                      allow_client_tasks=True, expose_reference=True) as srv:
        yield srv


def raw_session(srv: ServerThread, env_id: str = REC, **kw: Any) -> Any:
    ws = connect(f"{srv.url}/v1/envs/{env_id}/session", compression=None, **kw)
    return ws


def ask(ws: Any, msg: dict[str, Any] | str) -> dict[str, Any]:
    ws.send(msg if isinstance(msg, str) else json.dumps(msg))
    return json.loads(ws.recv(timeout=10))


def http_get(url: str, token: str | None = None) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token
                                 else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


# ------------------------------------------------------------------------ behaves like local
def play_oracle(env: Any, seed: int) -> list[Any]:
    trace: list[Any] = [env.reset(seed=seed)]
    for _ in range(10):
        step = env.step(env.reference_action())
        trace.append(step)
        if step[2] or step[3]:
            break
    return trace


def test_remote_env_matches_local_env_across_concurrent_sessions(server: ServerThread) -> None:
    local = skyhub.make("toy-lookup")
    results: dict[int, list[Any]] = {}
    errors: list[BaseException] = []

    def client(k: int) -> None:
        try:
            with make_remote("toy-lookup", server.url) as env:
                results[k] = [play_oracle(env, seed) for seed in range(k * 3, k * 3 + 3)]
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for k in range(16):
        assert results[k] == [play_oracle(local, seed) for seed in range(k * 3, k * 3 + 3)]
    assert results[0][0][-1][1] == 1.0  # the oracle wins: the comparison is not vacuous


def test_remote_env_exposes_prompt_stop_strings_tasks_and_task_options(
        server: ServerThread) -> None:
    local = skyhub.make("toy-lookup", max_turns=4)
    with make_remote("toy-lookup", server.url, max_turns=4) as env:  # kwargs reach the server
        assert isinstance(env, skyhub.TextEnv)
        assert env.system_prompt == local.system_prompt
        assert env.stop_strings == local.stop_strings
        assert [t.id for t in env.tasks] == [t.id for t in local.tasks]
        assert env.tasks[5].prompt == local.tasks[5].prompt and env.tasks[5].answer is None
        task_id = local.tasks[7].id
        obs, info = env.reset(seed=1, options={"task_id": task_id})
        assert (obs, info) == local.reset(seed=1, options={"task_id": task_id})
        assert env.task is not None and env.task.id == task_id
        assert env.get_remote_attr("max_turns") == 4
        with pytest.raises(KeyError, match="no-such-task"):
            env.reset(options={"task_id": "no-such-task"})
        obs, _ = env.reset(options={"task": skyhub.Task("mine", "my own prompt", "x")})
        assert obs == "my own prompt"


def test_env_failure_on_server_raises_infra_error_and_session_goes_on(
        server: ServerThread) -> None:
    with make_remote(REC, server.url, fail_on="boom") as env:
        env.reset(seed=0, options={"task_id": "t2"})
        with pytest.raises(InfraError, match=r"step failed on the server \(incident"):
            env.step("boom")
        assert env.step("ok")[0] == "t2:1:ok"


def test_unknown_env_id_is_env_not_found(server: ServerThread) -> None:
    with pytest.raises(EnvNotFound, match="not served here"):
        make_remote("sql-spider", server.url)


# ------------------------------------------------------------------------ sessions ending
def test_client_that_vanishes_gets_its_env_closed(server: ServerThread) -> None:
    env = make_remote(REC, server.url, label="vanish")
    env.reset(seed=0)
    env.step("a")
    sock = env._ws.socket  # kill the TCP connection: no close frame, no goodbye
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    assert eventually(lambda: remote_testenvs.CLOSED.get("vanish") == 1)
    assert eventually(lambda: not server.hub.sessions)
    env._ws = None  # the test broke the socket under the client's feet
    with pytest.raises(InfraError, match="reset\\(\\) reconnects"):
        env.step("b")
    assert env.reset(seed=0)[0].startswith("start")  # reconnected: a new session
    env.close()
    assert eventually(lambda: remote_testenvs.CLOSED.get("vanish") == 2)


def test_close_closes_the_server_env(server: ServerThread) -> None:
    env = make_remote(REC, server.url, label="closed-by-client")
    env.close()
    env.close()
    assert eventually(lambda: remote_testenvs.CLOSED.get("closed-by-client") == 1)
    with pytest.raises(UsageError, match="closed"):
        env.reset()


def test_each_session_runs_its_env_in_one_thread_of_its_own(server: ServerThread) -> None:
    envs = {label: make_remote(REC, server.url, label=label) for label in ("thr-a", "thr-b")}
    for env in envs.values():
        env.reset(seed=0)
        env.step("a")
    for env in envs.values():
        env.close()
    assert eventually(lambda: all(remote_testenvs.CLOSED.get(k) for k in envs))
    time.sleep(0.1)  # a second close would land now
    assert [remote_testenvs.CLOSED[k] for k in envs] == [1, 1]  # closed once
    made_in = [remote_testenvs.THREADS[k] for k in envs]
    assert all(len(names) == 1 for names in made_in), made_in  # make, reset, step, close
    assert made_in[0] != made_in[1]
    assert all(n.startswith("skyhub-session-") for names in made_in for n in names)


def test_a_socket_that_never_opens_costs_no_thread(server: ServerThread) -> None:
    def session_threads() -> int:
        return sum(t.name.startswith("skyhub-session-") for t in threading.enumerate())

    assert eventually(lambda: not server.hub.sessions)
    before = session_threads()
    with raw_session(server) as ws:
        assert ask(ws, {"op": "ping"})["pong"] is True
        assert server.hub.in_use() == 1
        assert session_threads() == before
    assert eventually(lambda: server.hub.in_use() == 0)


def test_an_env_left_open_at_exit_is_closed_and_the_process_exits() -> None:
    import subprocess
    import textwrap

    code = textwrap.dedent(f"""
        import atexit, sys
        sys.path.insert(0, {str(Path(__file__).parents[2] / "support")!r})
        import remote_testenvs
        # registered first, so it runs last: after the client closed what it left open
        atexit.register(lambda: print("closed", remote_testenvs.CLOSED.get("left", 0)))
        import skyhub
        from skyhub.remote import make_remote
        from skyhub.remote.server import ServerThread
        skyhub.register("exit-rec", "remote_testenvs:RecordingEnv")
        srv = ServerThread(["exit-rec"], allow_kwargs=("label",)).start()
        env = make_remote("exit-rec", srv.url, label="left")
        env.reset(seed=0)
        env.step("a")
        print("exiting")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["exiting", "closed", "1"], out.stderr[-2000:]


def test_idle_session_is_closed_with_its_env() -> None:
    with ServerThread([REC], idle_ttl_s=0.3, allow_kwargs=("label",)) as srv:
        env = make_remote(REC, srv.url, label="idle")
        assert eventually(lambda: remote_testenvs.CLOSED.get("idle") == 1)
        with pytest.raises(InfraError, match="4408"):
            env.reset()  # the reply to this request never comes: the session is gone
        assert env.reset(seed=0)[0].startswith("start")  # the next reset reconnects
        env.close()


def test_lost_server_mid_episode_is_an_infra_error_in_a_vector_env() -> None:
    srv = ServerThread([REC]).start()
    venv = VectorEnv([functools.partial(make_remote, REC, srv.url)] * 2)
    try:
        venv.reset(seed=0)
        srv.stop()
        _, rewards, _, truncations, infos = venv.step(["a", "b"])
        assert all(info["infra_error"] for info in infos)
        assert "lost the skyhub server" in infos[0]["error"]
        assert list(rewards) == [0.0, 0.0] and all(truncations)
    finally:
        venv.close()


# ------------------------------------------------------------------------ bad input
def test_malformed_and_oversized_messages_get_errors_and_server_stays_up(
        server: ServerThread) -> None:
    with raw_session(server) as ws:
        assert ask(ws, {"op": "step", "action": "a"})["error"]["type"] == "NotOpen"
        assert ask(ws, {"op": "open", "kwargs": {"label": "raw"}})["ok"]
        assert ask(ws, {"op": "reset", "seed": 0})["ok"]
        bad = ask(ws, "{not json")
        assert bad["ok"] is False and bad["error"]["type"] == "BadMessage"
        assert "not JSON" in bad["error"]["message"]
        assert ask(ws, "[1, 2]")["error"]["type"] == "BadMessage"
        assert ask(ws, {"op": "fly"})["error"]["type"] == "UnknownOp"
        assert ask(ws, {"op": "step", "action": 3})["error"]["type"] == "BadMessage"
        assert ask(ws, {"op": "call", "name": "__class__"})["error"]["type"] == "NotAllowed"
        big = ask(ws, {"op": "step", "action": "x" * 20_000})
        assert big["error"]["type"] == "MessageTooBig" and "10000" in big["error"]["message"]
        step = ask(ws, {"op": "step", "action": "fine"})  # the session goes on
        assert step["ok"] and step["obs"].endswith(":1:fine")
        # past the transport limit: the server ends this session with 1009; when it closes
        # while part of our 2 MB is still unread, TCP resets the connection and the close
        # frame may be lost with it (the send itself may then fail)
        with contextlib.suppress(ConnectionClosed):
            ws.send("x" * 2_000_000)
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=10)
        assert e.value.rcvd is None or e.value.rcvd.code == 1009
    assert eventually(lambda: remote_testenvs.CLOSED.get("raw") == 1)
    assert http_get(f"{server.http_url}/health")[0] == 200
    with make_remote(REC, server.url) as env:  # new sessions still work
        assert env.reset(seed=0)[0].startswith("start")


# ------------------------------------------------------------------------ access and limits
def test_non_loopback_bind_without_token_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYHUB_TOKEN", raising=False)
    for host in ("0.0.0.0", "192.168.1.5", "example.org", "::"):
        with pytest.raises(UsageError, match="--token"):
            check_bind(host, None)
    with pytest.raises(UsageError, match="SKYHUB_TOKEN"):
        serve(["toy-lookup"], "0.0.0.0", 0)  # raises before binding anything
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        check_bind(host, None)
    check_bind("0.0.0.0", "secret")


def test_serve_command_refuses_non_loopback_without_token() -> None:
    import typer
    from typer.testing import CliRunner

    from skyhub.cli.serve_cmd import serve_cmd

    app = typer.Typer()
    app.command()(serve_cmd)
    result = CliRunner().invoke(app, ["toy-lookup", "--host", "0.0.0.0"],
                                env={"SKYHUB_TOKEN": ""})
    assert isinstance(result.exception, UsageError)
    assert "--token" in str(result.exception)


def test_token_protected_server_refuses_missing_or_wrong_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYHUB_TOKEN", raising=False)
    with ServerThread([REC], token="s3cret") as srv:
        for token in (None, "wrong"):
            with pytest.raises(UsageError, match="token"):
                make_remote(REC, srv.url, token=token)
        with raw_session(srv) as ws:
            with pytest.raises(ConnectionClosed) as e:
                ask(ws, {"op": "open"})
            assert e.value.rcvd.code == 4401
        assert http_get(f"{srv.http_url}/v1/envs")[0] == 401
        assert http_get(f"{srv.http_url}/v1/envs", "wrong")[0] == 401
        assert http_get(f"{srv.http_url}/v1/envs", "s3cret")[0] == 200
        assert http_get(f"{srv.http_url}/health")[0] == 200
        with make_remote(REC, srv.url, token="s3cret") as env:
            assert env.reset(seed=0)[0].startswith("start")
        monkeypatch.setenv("SKYHUB_TOKEN", "s3cret")
        with make_remote(REC, srv.url) as env:
            assert env.reset(seed=0)[0].startswith("start")
        with connect(f"{srv.url}/v1/envs/{REC}/session?token=s3cret") as ws:
            with pytest.raises(ConnectionClosed) as e:  # a token in a URL is refused
                ask(ws, {"op": "open"})
            assert e.value.rcvd.code == 4401 and "header" in e.value.rcvd.reason


def test_capacity_limit_refuses_extra_sessions_with_4429() -> None:
    with ServerThread([REC], max_sessions=2) as srv:
        a, b = make_remote(REC, srv.url), make_remote(REC, srv.url)
        with pytest.raises(SandboxUnavailable, match="server full: 2 sessions"):
            make_remote(REC, srv.url)
        status, doc = http_get(f"{srv.http_url}/v1/envs")
        assert status == 200 and doc["sessions"] == 2 and doc["capacity"] == 2
        assert [e["id"] for e in doc["envs"]] == [REC]
        a.close()
        assert eventually(lambda: len(srv.hub.sessions) == 1)
        c = make_remote(REC, srv.url)
        b.close()
        c.close()


def test_server_can_refuse_client_kwargs() -> None:
    with ServerThread([REC], allow_kwargs=("label",)) as srv:
        with make_remote(REC, srv.url, label="ok") as env:
            assert env.system_prompt == "recording env ok"
        with pytest.raises(UsageError, match="does not accept env kwargs \\['delay'\\]"):
            make_remote(REC, srv.url, delay=1.0)


# ------------------------------------------------------------------------ vector envs
def test_vector_env_over_remote_envs_matches_local(server: ServerThread) -> None:
    remote = VectorEnv([functools.partial(make_remote, "toy-lookup", server.url)] * 4)
    local = skyhub.make_vec("toy-lookup", 4)
    try:
        assert remote.reset(seed=5) == local.reset(seed=5)
        for _ in range(3):
            acts = local.call("reference_action")
            assert remote.call("reference_action") == acts
            r, lo = remote.step(list(acts)), local.step(list(acts))
            assert r[0] == lo[0] and r[4] == lo[4]
            assert list(r[1]) == list(lo[1]) and list(r[2]) == list(lo[2])
    finally:
        remote.close()
        local.close()


def test_remote_env_is_a_client_only_class() -> None:
    # importing the client must not pull in the server's dependencies
    assert issubclass(RemoteEnv, skyhub.TextEnv)
    import subprocess

    code = ("import sys, skyhub, skyhub.remote.client; "
            "print('fastapi' in sys.modules, 'uvicorn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False"]
