"""`skyhub.make(ID, remote=URL)` and `make_vec(..., remote=URL)` against `skyhub serve`: a
trainer or an eval uses remote envs without code changes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("websockets")

import skyhub
from skyhub.eval import harness as evaluate
from skyhub.eval.agents import OracleAgent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served() -> str:
    """`skyhub serve toy-lookup toy-arith` as its own process, as a user runs it."""
    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "skyhub"), "serve", "toy-lookup",
                             "toy-arith", "--port", str(port), "--expose-reference"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "NO_PROXY": "127.0.0.1,localhost"})
    url = f"ws://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail(f"skyhub serve did not start: {proc.stdout.read() if proc.stdout else ''}")
    yield url
    proc.terminate()
    proc.wait(20)


def test_make_with_remote_plays_like_the_local_env(served: str) -> None:
    with skyhub.make("toy-lookup", remote=served) as remote, skyhub.make("toy-lookup") as local:
        assert remote.system_prompt == local.system_prompt
        for seed in range(3):
            assert remote.reset(seed=seed)[0] == local.reset(seed=seed)[0]
            action = local.reference_action()
            assert remote.reference_action() == action
            there, here = remote.step(action), local.step(action)
            assert there[:4] == here[:4] and there[4]["outcome"] == here[4]["outcome"]


def test_evaluate_over_remote_envs_equals_local(served: str) -> None:
    """The eval harness and the vector env run on remote envs unchanged (`remote=` is one
    more env kwarg)."""
    here, local = evaluate.run("toy-arith", OracleAgent(), n=12, concurrency=4)
    there, remote = evaluate.run("toy-arith", OracleAgent(), n=12, concurrency=4,
                                 env_kwargs={"remote": served})
    assert there.accuracy == here.accuracy == 1.0 and there.infra_errors == 0
    assert [e.task_id for e in remote] == [e.task_id for e in local]
    assert [e.messages() for e in remote] == [e.messages() for e in local]
    with skyhub.make_vec("toy-arith", 3, remote=served) as vec, skyhub.make("toy-arith") as env:
        obs, _ = vec.reset(seed=5)
        assert list(obs) == [env.reset(seed=5 + i)[0] for i in range(3)]


def test_eval_command_on_a_served_env(served: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from skyhub.cli.main import app

    r = CliRunner().invoke(app, ["eval", "toy-arith", f"remote={served}", "-a", "oracle",
                                 "--n", "6", "--out", str(tmp_path / "run"), "--no-report"])
    assert r.exit_code == 0, r.output
    records = evaluate.load_records(tmp_path / "run")
    assert len(records) == 6 and all(x["outcome"] == "success" for x in records)
