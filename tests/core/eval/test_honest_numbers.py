"""Numbers that mean what they say: the interval beside accuracy is
accuracy's (Wilson over successes), mean reward has its own; no NaN/Infinity in any JSON a run
writes; a run with no scored episode exits non-zero; a dead endpoint stops the run at once
with the fix instead of recording every episode as an infra error."""

from __future__ import annotations

import json
import math
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import skyhub
from skyhub import Task, TaskSet, TextEnv
from skyhub.cli.main import app
from skyhub.errors import AgentError
from skyhub.eval import harness, metrics, rundir
from skyhub.eval.agents import Agent
from skyhub.eval.metrics import headline
from skyhub.eval.report import write_report
from skyhub.json_safe import dumps
from skyhub.registry import unregister

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from openai_server import ScriptedOpenAIServer

ENV = "test-honest-signed"
N = 20


class SignedEnv(TextEnv):
    """One turn: "right" scores 1 (success), "wrong" 0, anything else -1 (a broken format),
    as sql-spider's skyrl reward does."""

    def __init__(self, infinite: bool = False) -> None:
        super().__init__()
        self.tasks = TaskSet([Task(id=f"t{k}", prompt=f"task {k}", answer="right")
                              for k in range(N)])
        self.infinite = infinite

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task = self.start_episode(seed, options)
        return task.prompt, self.make_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        reward = {"right": 1.0, "wrong": 0.0}.get(action, -1.0)
        outcome = "success" if reward == 1.0 else "failure"
        return "", reward, True, False, self.make_info(
            outcome, reward_breakdown={"score": reward},
            ratio=math.inf if self.infinite else 0.5, spread=math.nan)


class Scripted(Agent):
    """Task k: right for k < 5, wrong for 5 <= k < 12, broken format after."""

    name = "scripted"

    def act(self, messages: list[dict[str, str]], reference: Any) -> str:
        k = int(messages[-1]["content"].split()[-1])
        return "right" if k < 5 else "wrong" if k < 12 else "<garbage>"


class Failing(Agent):
    name = "failing"

    def act(self, messages: list[dict[str, str]], reference: Any) -> str:
        raise AgentError("model server said 503 after 7 attempts")


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    skyhub.register(ENV, SignedEnv, override=True)
    yield
    unregister(ENV)


def strict_json(text: str) -> Any:
    """json.loads that refuses NaN/Infinity (Python's accepts them; other parsers do not)."""
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def written_json(run: Path) -> list[Any]:
    out = [strict_json((run / name).read_text()) for name in ("run.json", "summary.json")]
    out += [strict_json(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    return out


def test_accuracy_ci_is_wilson_over_successes_on_a_signed_reward_env(tmp_path: Path) -> None:
    out = tmp_path / "run"
    summary, _ = harness.run(ENV, Scripted(), out=out)
    assert summary.scored == N and summary.successes == 5
    assert summary.accuracy == pytest.approx(5 / N)
    assert summary.mean_reward == pytest.approx((5 - 8) / N)
    lo, hi = summary.ci95
    assert (lo, hi) == pytest.approx(metrics.wilson(5, N))
    assert 0.0 <= lo < summary.accuracy < hi <= 1.0  # accuracy's interval, around accuracy
    rlo, rhi = summary.mean_reward_ci95  # the mean reward's own, around the mean reward
    assert rlo < summary.mean_reward < rhi and rlo < 0.0
    saved = strict_json((out / "summary.json").read_text())
    assert saved["ci95"] == pytest.approx([lo, hi])
    assert saved["mean_reward_ci95"] == pytest.approx([rlo, rhi])
    # the report says the same, and labels the mean reward's interval apart
    recs = rundir.load_records(out)
    h = headline(recs)
    assert h["ci95"] == pytest.approx((lo, hi))
    assert h["mean_reward_ci95"] == pytest.approx((rlo, rhi))
    md = write_report(out)["markdown"].read_text()
    assert f"[{lo:.3f}, {hi:.3f}]" in md and f"[{rlo:.3f}, {rhi:.3f}]" in md
    assert "mean reward 95% CI" in md


def test_console_shows_accuracy_interval_beside_accuracy(tmp_path: Path) -> None:
    agent = "script:tests.core.eval.test_honest_numbers:scripted_action"
    r = CliRunner().invoke(app, ["eval", ENV, "--agent", agent, "--out", str(tmp_path / "run"),
                                 "--no-report"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    lo, hi = metrics.wilson(5, N)
    rows = {line.split("│")[1].strip(): line for line in r.output.splitlines()
            if line.count("│") >= 3}
    assert f"[{lo:.3f}, {hi:.3f}]" in rows["accuracy"]  # Wilson's, on accuracy's own row
    assert f"[{lo:.3f}, {hi:.3f}]" not in rows["mean reward"]  # the reward has its own
    assert "95% CI" in r.output


def scripted_action(messages: list[dict[str, str]]) -> str:
    return Scripted().act(messages, None)


def test_no_nan_or_infinity_in_written_json(tmp_path: Path) -> None:
    skyhub.register(ENV, SignedEnv, kwargs={"infinite": True}, override=True)
    out = tmp_path / "run"
    harness.run(ENV, Scripted(), n=3, out=out)  # 3 episodes: all right, a single outcome
    for doc in written_json(out):
        assert doc is not None
    recs = rundir.load_records(out)
    assert recs[0]["final_info"]["ratio"] is None and recs[0]["final_info"]["spread"] is None
    class Opaque:  # an object JSON cannot carry: written as its str, never a NaN
        def __str__(self) -> str:
            return "opaque"

    assert dumps({"x": Opaque()}, default=lambda o: math.nan) == '{"x": "opaque"}'
    assert dumps({"a": [math.nan, math.inf, 1.5]}) == '{"a": [null, null, 1.5]}'


def test_all_infra_errors_null_numbers_with_a_message_and_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "run"
    summary, _ = harness.run(ENV, Failing(), n=4, out=out)
    assert summary.scored == 0 and math.isnan(summary.accuracy)  # NaN in Python, null in JSON
    saved = strict_json((out / "summary.json").read_text())
    assert saved["accuracy"] is None and saved["mean_reward"] is None
    assert saved["ci95"] == [None, None] and saved["mean_reward_ci95"] == [None, None]
    assert "every one of the 4 episodes was an infra error" in saved["message"]
    assert "503" in saved["message"]  # the first error, so the cause is on screen
    written_json(out)
    write_report(out)  # the report renders n/a, not nan

    with ScriptedOpenAIServer(always_fail=lambda m: True) as server:
        r = CliRunner().invoke(app, ["eval", ENV, "--agent", "openai:m", "--base-url",
                                     server.base_url, "--max-retries", "0", "--n", "3",
                                     "--out", str(tmp_path / "cli")])
    assert r.exit_code == 2, r.output
    assert "no scored episode" in r.output and "infra error" in r.output
    assert "nan" not in r.output.lower().replace("n/a", "")
    strict_json((tmp_path / "cli" / "summary.json").read_text())


def test_dead_endpoint_stops_the_run_at_once_with_the_fix(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["eval", "toy-arith", "--agent", "openai:m", "--base-url", url,
                                 "--n", "200", "--concurrency", "4", "--out", str(out)])
    assert r.exit_code != 0 and r.exit_code == 2, r.output
    assert url in r.output and "connection refused" in r.output and "--base-url" in r.output
    episodes = out / "episodes.jsonl"
    recorded = episodes.read_text().splitlines() if episodes.is_file() else []
    assert len(recorded) < 200 and not any(json.loads(x)["infra_error"] for x in recorded)
