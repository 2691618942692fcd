"""`skyhub eval --tools`: the oracle played through structured tool calls, the random tool
caller, the protocol in run.json/summary.json/report.md, and tool episodes read back by
`skyhub replay` and `skyhub view`. Real envs (toy, sql-spider's bundled SQLite data)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import skyhub
from skyhub.cli.main import app
from skyhub.errors import UsageError
from skyhub.eval import harness
from skyhub.eval.agents import load_agent
from skyhub.eval.random_tools import random_tool_turn
from skyhub.eval.replay import replay_file
from skyhub.eval.rundir import load_records
from skyhub.eval.view.data import trajectory


def eval_cli(out: Path, env_id: str, *args: str) -> tuple[dict, list[dict]]:
    r = CliRunner().invoke(app, ["eval", env_id, *args, "--concurrency", "4",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    return json.loads((out / "summary.json").read_text()), load_records(out)


def tool_turns(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in record["messages"] if m["role"] == "assistant" and m.get("tool_calls")]


@pytest.mark.parametrize(("env_id", "args"), [
    ("toy-lookup", ["--n", "30"]),
    ("toy-arith", ["--n", "30"]),
    ("sql-spider", ["split=dev", "--n", "24", "--max-turns", "5"]),
])
def test_oracle_with_tools_scores_one_through_tool_calls(tmp_path: Path, env_id: str,
                                                         args: list[str]) -> None:
    summary, records = eval_cli(tmp_path / env_id, env_id, *args, "--agent", "oracle",
                                "--tools")
    assert summary["accuracy"] == 1.0 and summary["infra_errors"] == 0
    assert summary["protocol"] == "tools" and len(records) == summary["n"]
    run = json.loads((tmp_path / env_id / "run.json").read_text())
    assert run["protocol"] == "tools" and run["env_kwargs"]["protocol"] == "tools"
    assert "protocol `tools`" in (tmp_path / env_id / "report.md").read_text()
    for r in records:
        calls = tool_turns(r)
        # every action was a tool turn, and every call got its tool message
        assert len(calls) == r["turns"] >= 1
        ids = [c["id"] for m in calls for c in m["tool_calls"]]
        answered = [m["tool_call_id"] for m in r["messages"] if m["role"] == "tool"]
        assert answered == ids
        assert "tool" in r["messages"][0]["content"]  # the system prompt describes tools
    # the episodes replay identically (the recorded calls are sent again)
    replay = replay_file(tmp_path / env_id / "episodes.jsonl")
    assert replay.counts["identical"] == len(records), replay.line()


def test_default_keeps_the_oracle_on_the_text_protocol(tmp_path: Path) -> None:
    summary, records = eval_cli(tmp_path / "o", "toy-lookup", "--n", "5", "--agent", "oracle")
    assert summary["protocol"] == "text" and summary["accuracy"] == 1.0
    assert not any(tool_turns(r) for r in records)
    assert json.loads((tmp_path / "o" / "run.json").read_text())["env_kwargs"] == {}


@pytest.mark.parametrize(("env_id", "kwargs"), [
    ("toy-lookup", {}), ("toy-arith", {"max_turns": 3}),
    ("sql-spider", {"split": "dev", "max_turns": 5}),
])
def test_random_tool_caller_never_makes_the_env_raise(env_id: str,
                                                      kwargs: dict[str, Any]) -> None:
    for seed in (0, 1):
        summary, episodes = harness.run(env_id, load_agent("random", seed=seed), n=24,
                                        concurrency=4, env_kwargs=kwargs, tools=True,
                                        seed=seed)
        assert summary.infra_errors == 0 and summary.n == 24 and summary.protocol == "tools"
        turns = [a for ep in episodes for a in ep.actions]
        assert sum(not isinstance(a, str) for a in turns) > len(turns) / 2
        for ep in episodes:
            json.dumps(ep.to_record(env_id, "random"))  # records stay JSON
            for action, info in zip(ep.actions, ep.infos, strict=True):
                if not isinstance(action, str):
                    assert len(info["tool_results"]) == len(action["tool_calls"])


def test_random_tool_turns_cover_the_malformed_calls() -> None:
    with skyhub.make("toy-lookup") as env:
        tools = env.tools
    rng = random.Random(0)
    calls = [c for _ in range(400) for c in random_tool_turn(tools, rng)["tool_calls"]]
    names = {c["function"]["name"] for c in calls}
    assert {"lookup", "answer"} <= names and names - {"lookup", "answer"}  # unknown names too
    bad_json = [c for c in calls if not _json_object(c["function"]["arguments"])]
    assert bad_json
    with skyhub.make("toy-lookup", max_turns=50) as env:
        env.reset(seed=0)
        problems = set()
        for c in calls[:49]:
            _, _, done, trunc, info = env.step([c])
            if info["tool_results"][0]["error"]:
                problems.add(info["tool_results"][0]["content"].split(":")[1][:20])
            if done or trunc:
                env.reset(seed=0)
        assert len(problems) >= 2  # several kinds of malformed call, each answered


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


class NoTools(skyhub.TextEnv):
    def __init__(self) -> None:
        super().__init__(max_turns=1)
        self.tasks = [skyhub.Task("t", "say hi", "hi", {})]

    def reset(self, *, seed=None, options=None):
        return self.start_episode(seed, options).prompt, self.make_info()

    def step(self, action):
        self.next_turn()
        ok = float(action == "hi")
        return "", ok, True, False, self.make_info("success" if ok else "failure",
                                                   reward_breakdown={"ok": ok})


def test_tools_on_an_env_without_tools_is_a_usage_error(tmp_env_id: str) -> None:
    skyhub.register(tmp_env_id, NoTools)
    with pytest.raises(UsageError, match="declares no tools"):
        harness.run(tmp_env_id, load_agent("oracle"), n=1, tools=True)
    summary, _ = harness.run(tmp_env_id, load_agent("nop"), n=1)
    assert summary.protocol == "text"


def test_view_shows_tool_calls_and_their_results(tmp_path: Path) -> None:
    _, records = eval_cli(tmp_path / "v", "toy-lookup", "--n", "2", "--agent", "oracle",
                          "--tools")
    turns = trajectory(records[0])["turns"]
    assert turns[0]["action"].startswith("-> lookup({\"key\": ")
    assert turns[0]["observation"].startswith("[lookup call_0] ")
    assert turns[1]["action"].startswith("-> answer(")


def test_resume_refuses_another_protocol(tmp_path: Path) -> None:
    out = tmp_path / "r"
    harness.run("toy-lookup", load_agent("oracle"), n=2, out=out, tools=True)
    with pytest.raises(UsageError, match="protocol"):
        harness.run("toy-lookup", load_agent("oracle"), n=3, out=out, resume=True,
                    tools=False)


def test_export_keeps_the_calls_and_their_results(tmp_path: Path) -> None:
    import jsonschema

    from skyhub.eval.export import export_run
    from tests.core.eval.test_export import SCHEMA, harbor_rules

    out = tmp_path / "run"
    harness.run("toy-lookup", load_agent("random", seed=3), n=6, out=out, tools=True)
    harness.run("toy-lookup", load_agent("oracle"), n=6, out=tmp_path / "o", tools=True)
    for run in (out, tmp_path / "o"):
        export_run(run, "atif", tmp_path / "atif" / run.name)
        export_run(run, "sharegpt", tmp_path / f"{run.name}.jsonl")
        for doc in (json.loads(p.read_text()) for p in (tmp_path / "atif" / run.name)
                    .glob("*.json")):
            jsonschema.validate(doc, SCHEMA)
            assert harbor_rules(doc) == []
    oracle = [json.loads(p.read_text()) for p in (tmp_path / "atif" / "o").glob("*.json")]
    step = oracle[0]["steps"][2]
    assert step["tool_calls"][0]["function_name"] == "lookup"
    assert set(step["tool_calls"][0]["arguments"]) == {"key"}
    assert step["observation"]["results"][0]["source_call_id"] == "call_0"
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert rows[0]["conversations"][2]["value"].startswith('<tool_call>{"name": "lookup"')


def test_play_takes_tool_calls() -> None:
    with skyhub.make("toy-lookup") as env:
        env.reset(seed=0)
        key, answer = env.task.meta["key"], env.task.answer
    moves = (f':call lookup {{"key": "{key}"}}\n:call lookup {{"key": 7}}\n'
             f':call answer {{"value": "{answer}"}}\nn\n')
    r = CliRunner().invoke(app, ["play", "toy-lookup", "--seed", "0"], input=moves,
                           env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert f"{answer} (2 turns left)" in r.output  # the lookup's result
    assert "parameter 'key' must be string" in r.output  # the malformed call, answered
    assert "episode over: total reward 1, outcome success" in r.output
