"""The data as SkyRL-SQL used it: the data's own prompt, shown as it is by default, and the
`skyrl-sql` suite pointed at OmniSQL's data root.

- `sql-skyrl653` on a parquet written in SkyRL-SQL-653's exact format (the writer and rows of
  test_upstream_formats.py): the episode's system prompt is the row's system message and its
  first observation the row's user message, verbatim; `data_prompt=False` gives skyhub's.
  The system prompt follows each episode (a task with no chat of its own gets skyhub's
  again), and the trainer's rollout reads it per episode, after the reset.
- `skyhub eval suite skyrl-sql --data-dir ROOT` finds all five releases in OmniSQL's layout
  (spider/, Spider-DK/, spider-realistic/, Spider-Syn/) and scores the oracle 1.0 on each.
"""

from __future__ import annotations

import importlib.util
import json
import types
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import skyhub
from skyhub.cli.main import app
from skyhub.envs.sql import protocol as proto
from skyhub.errors import UsageError
from skyhub.eval.agents import ScriptAgent
from skyhub.task import Task


def _load_upstream() -> types.ModuleType:
    """test_upstream_formats.py, for its writers of the upstream files (test modules are not
    importable by name under pytest's importlib mode)."""
    path = Path(__file__).with_name("test_upstream_formats.py")
    spec = importlib.util.spec_from_file_location("_sql_upstream_formats", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


up = _load_upstream()
GOLD_TURN = "<think>The gold answers it.</think>\n<solution>{}</solution>"


@pytest.fixture
def skyrl653(tmp_path: Path) -> dict[str, Any]:
    """env kwargs of `sql-skyrl653` on a train.parquet in SkyRL-SQL-653's format, with its
    databases in OmniSQL's data/ (SkyRL's DB_PATH)."""
    data = tmp_path / "db_files" / "data"
    up.make_db(data / "SynSQL-2.5M" / "databases", "music_festival_stats", up.SINGERS)
    up.make_db(data / "spider" / "database", "pets_1", up.PETS)
    parquet = up.write_653_parquet(tmp_path / "sql" / "train.parquet", up.SOURCE_ROWS, "train")
    return {"data_dir": str(parquet.parent), "db_root": str(data)}


def test_653_episodes_start_with_the_rows_own_chat(skyrl653: dict[str, Any]) -> None:
    with skyhub.make("sql-skyrl653", **skyrl653) as env:
        assert len(env.tasks) == len(up.SOURCE_ROWS)
        for task, row in zip(env.tasks, up.SOURCE_ROWS, strict=True):
            obs, info = env.reset(options={"task_id": task.id})
            assert obs == up.user_message(row)  # verbatim: no skyhub text added
            assert env.system_prompt == up.SYSTEM
            assert info["db_id"] == row["db_id"]
            _, reward, terminated, _, info = env.step(GOLD_TURN.format(row["sql"]))
            assert terminated and reward == 1.0, info


def test_data_prompt_false_gives_skyhubs_prompt(skyrl653: dict[str, Any]) -> None:
    with skyhub.make("sql-skyrl653", data_prompt=False, **skyrl653) as env:
        for task, row in zip(env.tasks, up.SOURCE_ROWS, strict=True):
            obs, _ = env.reset(options={"task_id": task.id})
            assert env.system_prompt == proto.SYSTEM_PROMPT.format(max_rows=50)
            assert obs.startswith("Database engine:\nSQLite")
            assert row["schema"] in obs  # the data's schema text, in skyhub's template
            assert f"Question:\n{row['question']}\n" in obs and "You have 6 turns." in obs
            assert obs != up.user_message(row)


def test_the_system_prompt_follows_each_episode(skyrl653: dict[str, Any]) -> None:
    with skyhub.make("sql-skyrl653", **skyrl653) as env:
        default = env.default_system_prompt
        assert env.system_prompt == default  # before any reset: skyhub's
        first = env.tasks[0]
        plain = Task("plain", first.prompt, first.answer,
                     {k: v for k, v in first.meta.items() if k != "prompt_messages"})
        user_only = Task("user-only", first.prompt, first.answer, {
            **first.meta, "prompt_messages": [{"role": "user", "content": "Just the question."}]})
        for task, system, obs_is in [
                (first, up.SYSTEM, up.user_message(up.SOURCE_ROWS[0])),
                (plain, default, None),  # no chat of its own: skyhub's prompt again
                (user_only, None, "Just the question."),  # a chat with no system message
                (first, up.SYSTEM, up.user_message(up.SOURCE_ROWS[0]))]:
            obs, _ = env.reset(options={"task": task})
            assert env.system_prompt == system, task.id
            if obs_is is None:
                assert obs.startswith("Database engine:") and first.prompt in obs
            else:
                assert obs == obs_is


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],  # SkyRL's eval chat
    [{"role": "system", "content": "s"}],
    [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}],
    [{"role": "user", "content": None}],
    "not a list",
], ids=["two-user", "system-only", "assistant", "no-content", "text"])
def test_a_chat_an_episode_cannot_show_is_refused(skyrl653: dict[str, Any],
                                                  messages: Any) -> None:
    with skyhub.make("sql-skyrl653", **skyrl653) as env:
        first = env.tasks[0]
        task = Task("odd", first.prompt, first.answer, {**first.meta,
                                                        "prompt_messages": messages})
        with pytest.raises(UsageError, match="data_prompt=False"):
            env.reset(options={"task": task})
    with skyhub.make("sql-skyrl653", data_prompt=False, **skyrl653) as env:
        obs, _ = env.reset(options={"task": task})  # skyhub's prompt needs none of it
        assert obs.startswith("Database engine:")


class _StubChat:
    """A ChatFormat stand-in that records the (system prompt, first observation) of each
    episode's prompt."""

    stop_token_ids: tuple[int, ...] = ()
    tokenizer = types.SimpleNamespace(eos_token_id=0)

    def __init__(self) -> None:
        self.prompts: list[tuple[str | None, str]] = []

    def prompt_ids(self, first_observation: str, system: str | None) -> list[int]:
        self.prompts.append((system, first_observation))
        return [1, 2, 3]

    def observation_ids(self, observation: str, closed: bool) -> list[int]:
        return [4]


class _OneAnswerEngine:
    """Answers every turn of every episode with `text`, in two tokens."""

    version = 0

    def __init__(self, text: str) -> None:
        self.text = text

    def generate(self, prompts: Any, params: Any, seeds: Any = None) -> list[Any]:
        from skyhub.trainer.inference import Completion

        return [Completion([5, 6], [-0.1, -0.1], [0, 0], "stop", self.text) for _ in prompts]


def test_the_rollout_prompts_each_episode_with_its_own_system_prompt(
        skyrl653: dict[str, Any]) -> None:
    pytest.importorskip("torch")
    from skyhub.trainer.rollout import Rollout, RolloutConfig

    task = "skyrl653-train-1"  # pets_1: "How many dogs are there?"
    chat = _StubChat()
    venv = skyhub.make_vec("sql-skyrl653", 2, autoreset_mode="disabled", **skyrl653)
    try:
        engine = _OneAnswerEngine(GOLD_TURN.format(up.SOURCE_ROWS[1]["sql"]))
        episodes = Rollout(venv, engine, chat, RolloutConfig()).run(
            [task], group_size=2, seed=1)
    finally:
        venv.close()
    assert [e.reward for e in episodes] == [1.0, 1.0]
    assert chat.prompts == [(up.SYSTEM, up.user_message(up.SOURCE_ROWS[1]))] * 2


def test_openrlhf_export_writes_the_rows_own_chat(skyrl653: dict[str, Any],
                                                 tmp_path: Path) -> None:
    from skyhub.trainer.openrlhf import export_prompts

    out = tmp_path / "skyrl653.jsonl"
    assert export_prompts("sql-skyrl653", out, env_kwargs=skyrl653) == len(up.SOURCE_ROWS)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["prompt"] for r in rows] == [
        [{"role": "system", "content": up.SYSTEM},
         {"role": "user", "content": up.user_message(row)}] for row in up.SOURCE_ROWS]


def test_the_eval_harness_shows_the_agent_the_datas_system_prompt(
        skyrl653: dict[str, Any]) -> None:
    from skyhub.eval.harness import run as evaluate

    seen: list[list[dict[str, str]]] = []

    def agent(messages: list[dict[str, str]]) -> str:
        seen.append([dict(m) for m in messages])
        question = messages[-1]["content"].rsplit("{question}: ", 1)[-1]
        row = next(r for r in up.SOURCE_ROWS if r["question"] == question)
        return GOLD_TURN.format(row["sql"])

    summary, _ = evaluate("sql-skyrl653", ScriptAgent(agent, parallel=False), concurrency=1,
                          env_kwargs=skyrl653)
    assert summary.accuracy == 1.0 and len(seen) == len(up.SOURCE_ROWS)
    for messages, row in zip(seen, up.SOURCE_ROWS, strict=True):
        assert messages == [{"role": "system", "content": up.SYSTEM},
                            {"role": "user", "content": up.user_message(row)}]


# ------------------------------------------------------------------ the suite's data root
def omnisql_data(root: Path) -> Path:
    """OmniSQL's unzipped data/ with the five Spider releases SkyRL-SQL evaluates on (the
    folders and files test_upstream_formats.py's `omnisql` fixture writes)."""
    data = root / "evaluate_skysql" / "data"
    spider = data / "spider"
    up.write_json(spider / "dev.json", up.DEV)
    up.write_json(spider / "test.json", up.DEV[:1])
    up.write_json(spider / "tables.json", [])
    up.make_db(spider / "database", "concert_singer", up.SINGERS)
    up.make_db(spider / "database", "pets_1", up.PETS)
    up.make_db(spider / "test_database", "concert_singer", up.SINGERS)
    up.write_json(data / "Spider-DK" / "Spider-DK.json", [
        {"db_id": "new_pets_1", "query": "SELECT count(*) FROM pets WHERE weight > 10",
         "question": "How many pets weigh more than 10?"}])
    up.make_db(data / "Spider-DK" / "database", "new_pets_1", up.PETS)
    up.write_json(data / "spider-realistic" / "spider-realistic.json", up.DEV[:1])
    up.write_json(data / "Spider-Syn" / "dev.json", [
        {"db_id": "concert_singer", "SpiderQuestion": up.DEV[0]["question"],
         "SpiderSynQuestion": "How many vocalists do we have?", "query": up.DEV[0]["query"]}])
    return data


@pytest.mark.slow
def test_suite_finds_omnisqls_layout_from_data_dir(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYHUB_DATA", raising=False)
    omnisql = omnisql_data(tmp_path)
    out = tmp_path / "suite"
    r = CliRunner().invoke(app, ["eval", "suite", "skyrl-sql", "--agent", "oracle",
                                 "--concurrency", "1", "--data-dir", str(omnisql),
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    expected = {"Spider-Dev": 2, "Spider-Test": 1, "Spider-Realistic": 1, "Spider-DK": 1,
                "Spider-Syn": 1}  # the fixture's questions per release
    for column, n in expected.items():
        run = json.loads((out / column / "run.json").read_text())
        assert run["env_kwargs"]["data_dir"] == str(omnisql)
        episodes = [json.loads(x) for x in
                    (out / column / "episodes.jsonl").read_text().splitlines()]
        assert len(episodes) == n, column
        assert all(e["reward"] == 1.0 for e in episodes), (column, episodes)
    dk = json.loads((out / "Spider-DK" / "episodes.jsonl").read_text().splitlines()[0])
    assert dk["task_id"] == "spider-dk-Spider-DK-0"
    # without the root, the releases that are not bundled are not found
    bare = tmp_path / "bare"
    r = CliRunner().invoke(app, ["eval", "suite", "skyrl-sql", "--agent", "oracle",
                                 "--only", "Spider-DK", "--out", str(bare)])
    assert r.exit_code == 0, r.output
    assert "Spider-DK: no data" in " ".join(r.output.split())
