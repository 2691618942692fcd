"""SkyRL-SQL's evaluation protocol (`protocol="skyrl-eval"`) and the `skyrl-sql` suite that
uses it: up to 5 tool rounds, then one final generation; the prediction is the last
`<solution>` of the agent's turns, with no format rule; a query that fails, times out or is
missing is wrong; scored with Spider's official execution match.

The suite is run from the command line (`skyhub eval suite skyrl-sql --agent script:...`)
with two small script agents written to a module here: one answers with the gold query on
its 5th turn, one after an invalid turn. Both score 1.0 on Spider-Dev (the bundled subset)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import skyhub
from skyhub.cli.main import app
from skyhub.envs.sql.env import SQLEnv

T = "<think>checking</think>\n"


@pytest.fixture
def env() -> Iterator[SQLEnv]:
    with skyhub.make("sql-spider", protocol="skyrl-eval") as e:
        yield e  # type: ignore[misc]


def start(env: SQLEnv, db: str = "pets_1", distinct: bool = False) -> str:
    task = next(t for t in env.tasks if t.meta["db_id"] == db
                and ("DISTINCT" in str(t.answer).upper()) == distinct)
    env.reset(options={"task_id": task.id})
    return str(task.answer)


def play(env: SQLEnv, actions: list[str]) -> list[tuple[float, bool, bool]]:
    out = []
    for a in actions:
        _, r, term, trunc, _ = env.step(a)
        out.append((r, term, trunc))
        if term or trunc:
            break
    return out


def test_defaults_are_the_evaluations(env: SQLEnv) -> None:
    assert (env.protocol, env.reward_kind, env.max_turns) == ("skyrl-eval", "spider_exec", 5)
    assert env.solution_timeout_s == 40.0
    start(env)
    assert env.turn == 0


def test_five_tool_rounds_then_a_final_answer(env: SQLEnv) -> None:
    gold = start(env)
    rounds = play(env, [T + "<sql>SELECT 1</sql>"] * 5)
    assert rounds == [(0.0, False, False)] * 5
    assert play(env, [T + f"<solution>{gold}</solution>"]) == [(1.0, True, False)]
    # the final generation's query is not run, and the episode ends there
    start(env)
    calls: list[str] = []
    real = env.engine.execute
    env.engine.execute = lambda db, p, sql, **kw: calls.append(sql) or real(db, p, sql, **kw)  # type: ignore[method-assign]
    play(env, [T + "<sql>SELECT 1</sql>"] * 5)
    assert play(env, [T + "<sql>SELECT 2</sql>"]) == [(0.0, False, True)]
    assert "SELECT 2" not in calls


def test_the_last_solution_counts_with_no_format_rule(env: SQLEnv) -> None:
    gold = start(env)
    assert play(env, [f"<solution>SELECT 1</solution> no, <solution>{gold}</solution>"]) == \
        [(1.0, True, False)]
    start(env)
    assert play(env, [f"<THINK>x<solution>{gold}</solution>"]) == [(1.0, True, False)]
    start(env)  # an upper-case tag is not a solution: a round is spent
    assert play(env, [f"<SOLUTION>{gold}</SOLUTION>", f"<solution>{gold}</solution>"]) == \
        [(0.0, False, False), (1.0, True, False)]


def test_wrong_failing_and_missing_answers_score_zero(env: SQLEnv) -> None:
    start(env)
    assert play(env, [T + "<solution>SELECT 12345</solution>"])[-1][0] == 0.0
    start(env)
    _, r, _, _, info = env.step(T + "<solution>SELEC nothing</solution>")
    assert r == 0.0 and info["solution_error"]
    start(env)
    assert play(env, ["no idea"] * 6)[-1] == (0.0, False, True)


def test_a_solution_past_the_time_limit_is_wrong() -> None:
    endless = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
               "SELECT count(*) FROM c")
    with skyhub.make("sql-spider", protocol="skyrl-eval", solution_timeout_s=0.5) as env:
        start(env)
        _, r, term, _, info = env.step(f"<solution>{endless}</solution>")
        assert (r, term) == (0.0, True) and "interrupted" in info["solution_error"]


def test_scored_with_the_official_execution_match(env: SQLEnv) -> None:
    gold = start(env, distinct=True)  # DISTINCT is removed from both queries
    assert env.step(f"<solution>{gold.replace('DISTINCT', '').replace('distinct', '')}"
                    "</solution>")[1] == 1.0
    gold = start(env)  # duplicates count
    assert env.step(f"<solution>SELECT * FROM ({gold.rstrip(';')}) UNION ALL "
                    f"SELECT * FROM ({gold.rstrip(';')})</solution>")[1] == 0.0


AGENTS = '''
import json
import re

from skyhub.envs.sql.datasets.spider import BUNDLED_DIR

GOLD = {e["question"]: e["query"] for e in json.loads((BUNDLED_DIR / "dev.json").read_text())}


def _question_and_turn(messages):
    first = next(m["content"] for m in messages if m["role"] == "user")
    question = re.search(r"Question:\\n(.*?)\\n\\nYou have", first, re.S).group(1)
    return question, 1 + sum(m["role"] == "assistant" for m in messages)


def gold_on_fifth_turn(messages):
    question, turn = _question_and_turn(messages)
    if turn < 5:
        return "<think>Let me look.</think>\\n<sql>SELECT 1</sql>"
    return f"<think>Found it.</think>\\n<solution>{GOLD[question]}</solution>"


def gold_after_an_invalid_turn(messages):
    question, turn = _question_and_turn(messages)
    if turn == 1:
        return "I am not sure what to do yet."
    return f"<solution>{GOLD[question]}</solution>"
'''


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["gold_on_fifth_turn", "gold_after_an_invalid_turn"])
def test_suite_scores_one_on_spider_dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        agent: str) -> None:
    monkeypatch.delenv("SKYHUB_DATA", raising=False)
    (tmp_path / "skyrl_eval_agents.py").write_text(textwrap.dedent(AGENTS))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "suite"
    r = CliRunner().invoke(app, ["eval", "suite", "skyrl-sql", "--agent",
                                 f"script:skyrl_eval_agents:{agent}", "--only", "Spider-Dev",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    episodes = [json.loads(x) for x in
                (out / "Spider-Dev" / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 972
    assert all(e["outcome"] == "success" and e["reward"] == 1.0 for e in episodes)
    assert {e["turns"] for e in episodes} == ({5} if agent == "gold_on_fifth_turn" else {2})
    run = json.loads((out / "Spider-Dev" / "run.json").read_text())
    assert run["env_kwargs"]["protocol"] == "skyrl-eval"
    assert run["env_kwargs"]["reward"] == "spider_exec"
    report = (out / "report.md").read_text()
    assert "100.0" in report
    assert "skyrl-eval" in report and "official execution accuracy" in report
