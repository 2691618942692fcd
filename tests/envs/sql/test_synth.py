"""sql-synth: generated databases and questions that are deterministic, executable, answerable,
cached, and split so that evaluation never sees a training database."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import skyhub
from skyhub.envs.sql.engines.base import sqlite_schema
from skyhub.envs.sql.synth import load
from skyhub.envs.sql.synth_questions import LEVELS, TEMPLATES
from skyhub.errors import UsageError

THINK = "<think>checking</think>"


def run(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def test_same_parameters_give_the_same_tasks_and_database_bytes(tmp_path: Path) -> None:
    a = load(data_dir=tmp_path / "a", n_tasks=200, seed=7, n_databases=8)
    b = load(data_dir=tmp_path / "b", n_tasks=200, seed=7, n_databases=8)
    assert [t.to_dict() for t in a.tasks] == [t.to_dict() for t in b.tasks]
    assert files(tmp_path / "a") == files(tmp_path / "b")


def test_another_process_with_another_hash_seed_generates_the_same_files(tmp_path: Path) -> None:
    load(data_dir=tmp_path / "here", n_tasks=150, seed=3, n_databases=6)
    code = ("import sys; from skyhub.envs.sql.synth import load; "
            "load(data_dir=sys.argv[1], n_tasks=150, seed=3, n_databases=6)")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "there")], check=True, env=env,
                   timeout=120)
    assert files(tmp_path / "here") == files(tmp_path / "there")


def test_different_seeds_give_different_tasks_and_databases(tmp_path: Path) -> None:
    a = load(data_dir=tmp_path, n_tasks=50, seed=0, n_databases=5)
    b = load(data_dir=tmp_path, n_tasks=50, seed=1, n_databases=5)
    assert [t.prompt for t in a.tasks] != [t.prompt for t in b.tasks]
    dbs_a = {a.db_path(t.meta["db_id"]).read_bytes() for t in a.tasks}
    dbs_b = {b.db_path(t.meta["db_id"]).read_bytes() for t in b.tasks}
    assert not dbs_a & dbs_b


def test_a_smaller_task_set_is_a_prefix_of_a_larger_one(tmp_path: Path) -> None:
    small = load(data_dir=tmp_path, n_tasks=40, seed=2)
    large = load(data_dir=tmp_path, n_tasks=120, seed=2)
    assert [t.to_dict() for t in small.tasks] == [t.to_dict() for t in large.tasks[:40]]


def test_every_gold_query_runs_and_nearly_all_have_rows(tmp_path: Path) -> None:
    checked, with_rows = 0, 0
    for seed in range(3):
        data = load(data_dir=tmp_path, n_tasks=300, seed=seed, n_databases=10)
        for t in data.tasks:
            rows = run(data.db_path(t.meta["db_id"]), t.answer)  # raises if SQLite rejects it
            assert t.meta["empty_result"] == (not rows), t.id
            checked, with_rows = checked + 1, with_rows + bool(rows)
    assert with_rows / checked >= 0.95, f"only {with_rows}/{checked} gold results have rows"


def test_each_difficulty_has_the_sql_features_it_claims(tmp_path: Path) -> None:
    data = load(data_dir=tmp_path, n_tasks=900, seed=4)
    by_level = Counter(t.meta["difficulty"] for t in data.tasks)
    assert set(by_level) == set(LEVELS) and min(by_level.values()) == 300
    for t in data.tasks:
        sql, level = t.answer.upper(), t.meta["difficulty"]
        joins = len(re.findall(r"\bJOIN\b", sql))
        if level == "easy":
            assert joins == 0, t.answer
        elif level == "medium":
            assert "GROUP BY" in sql or joins >= 1, t.answer
        else:
            assert joins >= 2 or "(SELECT" in sql or re.search(r"\b(INTERSECT|EXCEPT)\b", sql), \
                t.answer
    used = Counter(t.meta["template"] for t in data.tasks)
    assert set(used) == {f.__name__ for fs in TEMPLATES.values() for f in fs}


def test_difficulty_filter_gives_only_that_level(tmp_path: Path) -> None:
    for level in LEVELS:
        data = load(data_dir=tmp_path, n_tasks=30, difficulty=level)
        assert {t.meta["difficulty"] for t in data.tasks} == {level}
        assert all(level in t.id for t in data.tasks)


def test_meta_has_what_the_env_and_reports_use(tmp_path: Path) -> None:
    t = load(data_dir=tmp_path, n_tasks=3, seed=5).tasks[0]
    assert t.id == "synth-5-0" and t.prompt == t.meta["question"]
    assert {"db_id", "split", "question", "dataset", "difficulty", "template",
            "empty_result", "external_knowledge"} <= set(t.meta)
    assert (t.meta["dataset"], t.meta["split"], t.meta["external_knowledge"]) == \
        ("synth", "train", "")


def test_train_dev_and_test_share_no_database(tmp_path: Path) -> None:
    splits = {s: load(data_dir=tmp_path, split=s, n_tasks=100, n_databases=6)
              for s in ("train", "dev", "test")}
    dbs = {s: {t.meta["db_id"] for t in d.tasks} for s, d in splits.items()}
    assert not dbs["train"] & dbs["dev"] and not dbs["train"] & dbs["test"]
    assert not dbs["dev"] & dbs["test"]
    contents = {s: {d.db_path(i).read_bytes() for i in dbs[s]} for s, d in splits.items()}
    assert not contents["train"] & (contents["dev"] | contents["test"])
    assert not {t.id for t in splits["train"].tasks} & {t.id for t in splits["dev"].tasks}


def test_schema_shown_to_the_agent_has_types_and_keys(tmp_path: Path) -> None:
    data = load(data_dir=tmp_path, n_tasks=20, n_databases=5)
    for db_id in sorted({t.meta["db_id"] for t in data.tasks}):
        schema = sqlite_schema(data.db_path(db_id))
        assert "PRIMARY KEY" in schema and "FOREIGN KEY" in schema and "INTEGER" in schema


def test_second_load_reuses_the_cached_files(tmp_path: Path) -> None:
    load(data_dir=tmp_path, n_tasks=100)
    before = {p: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    assert any(p.suffix == ".sqlite" for p in before) and any(p.suffix == ".jsonl" for p in before)
    load(data_dir=tmp_path, n_tasks=100)
    assert {p: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before


def test_a_deleted_database_is_regenerated_identically(tmp_path: Path) -> None:
    data = load(data_dir=tmp_path, n_tasks=10)
    path = data.db_path(data.tasks[0].meta["db_id"])
    original = path.read_bytes()
    path.unlink()
    load(data_dir=tmp_path, n_tasks=10)
    assert path.read_bytes() == original


def test_concurrent_first_loads_agree_and_leave_no_temporary_files(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    with ThreadPoolExecutor(4) as pool:
        loaded = list(pool.map(lambda _: load(data_dir=shared, n_tasks=60, n_databases=5),
                               range(4)))
    assert all([t.to_dict() for t in d.tasks] == [t.to_dict() for t in loaded[0].tasks]
               for d in loaded)
    load(data_dir=tmp_path / "alone", n_tasks=60, n_databases=5)
    assert files(shared) == files(tmp_path / "alone")  # also: no temporary file left behind


def test_cache_goes_to_data_dir_else_skyhub_cache(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKYHUB_CACHE", str(tmp_path / "cache"))
    data = load(n_tasks=5)
    assert data.db_path(data.tasks[0].meta["db_id"]).parent == tmp_path / "cache" / "synth"
    data = load(data_dir=tmp_path / "mine", n_tasks=6)
    assert data.db_path(data.tasks[0].meta["db_id"]).parent == tmp_path / "mine"
    assert len(list((tmp_path / "cache" / "synth").glob("*.jsonl"))) == 1
    assert len(list((tmp_path / "mine").glob("*.jsonl"))) == 1


def test_bad_arguments_name_the_valid_choices(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="train"):
        load(data_dir=tmp_path, split="validation")
    with pytest.raises(UsageError, match="easy, medium, hard or mixed"):
        load(data_dir=tmp_path, difficulty="extreme")
    with pytest.raises(UsageError, match=">= 1"):
        load(data_dir=tmp_path, n_tasks=0)


def test_reference_action_scores_one_on_a_hundred_episodes(tmp_path: Path) -> None:
    with skyhub.make("sql-synth", data_dir=tmp_path, n_tasks=100) as env:
        assert len(env.tasks) == 100
        for task in env.tasks:
            obs, _ = env.reset(options={"task_id": task.id})
            assert task.prompt in obs and "CREATE TABLE" in obs
            _, reward, term, _, info = env.step(env.reference_action() or "")
            assert (reward, term, info["outcome"]) == (1.0, True, "success"), task.id


def test_a_wrong_solution_scores_zero(tmp_path: Path) -> None:
    with skyhub.make("sql-synth", data_dir=tmp_path, n_tasks=10) as env:
        for task in env.tasks:
            env.reset(options={"task_id": task.id})
            _, reward, term, _, info = env.step(
                f"{THINK}<solution>SELECT 'not the answer'</solution>")
            assert (reward, term, info["outcome"]) == (0.0, True, "failure"), task.id


def test_make_with_hard_difficulty_runs_episodes(tmp_path: Path) -> None:
    with skyhub.make("sql-synth", data_dir=tmp_path, difficulty="hard", n_tasks=50) as env:
        assert len(env.tasks) == 50
        assert {t.meta["difficulty"] for t in env.tasks} == {"hard"}
        _, info = env.reset(seed=0)
        assert info["db_id"] == env.task.meta["db_id"]
        _, reward, *_ = env.step(f"{THINK}<sql>SELECT 1</sql>")
        assert reward == 0.0
        _, reward, term, _, _ = env.step(env.reference_action() or "")
        assert (reward, term) == (1.0, True)
