"""The public-format loaders (BIRD, SynSQL-2.5M, SkyRL-SQL-653, Spider variants) on small files
written here in each release's own format, with real SQLite databases: what a user who
unpacked the official download gets, and what they are told when something is missing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import skyhub
from skyhub.envs.sql.datasets import load
from skyhub.envs.sql.datasets import synsql as synsql_mod
from skyhub.envs.sql.datasets.skyrl653 import parse_prompt
from skyhub.errors import DataNotFound

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from sql_files import make_db, write_json

SCHOOLS = [
    "CREATE TABLE schools (cds TEXT PRIMARY KEY, name TEXT, county TEXT, enrollment INTEGER, "
    "free_meals INTEGER)",
    "INSERT INTO schools VALUES ('01', 'Oak High', 'Alameda', 400, 100), "
    "('02', 'Pine Middle', 'Alameda', 200, 150), ('03', 'Elm Elementary', 'Fresno', 100, 90)",
]
SINGERS = [
    "CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER)",
    "INSERT INTO singer VALUES (1, 'Joe', 'France', 52), (2, 'Ana', 'Spain', 29), "
    "(3, 'Li', 'France', 41)",
]
PETS = [
    "CREATE TABLE pets (petid INTEGER PRIMARY KEY, pettype TEXT, weight REAL)",
    "INSERT INTO pets VALUES (1, 'dog', 12.0), (2, 'cat', 3.5), (3, 'dog', 9.0)",
]
PLAYERS = [
    "CREATE TABLE players (id INTEGER PRIMARY KEY, team TEXT, goals INTEGER)",
    "INSERT INTO players VALUES (1, 'Reds', 10), (2, 'Blues', 4), (3, 'Reds', 7)",
]


def play_reference(env_id: str, task_id: str, **kwargs: Any) -> tuple[str, float]:
    """The first observation and the reward of the env's own reference action."""
    with skyhub.make(env_id, **kwargs) as env:
        obs, _ = env.reset(options={"task_id": task_id})
        _, reward, terminated, _, info = env.step(env.reference_action() or "")
        assert terminated and not info.get("infra_error"), info
        return obs, reward


# ------------------------------------------------------------------ BIRD
BIRD_DEV = [
    {"question_id": 0, "db_id": "california_schools",
     "question": "Which Alameda school has the highest eligible free meal rate?",
     "evidence": "eligible free meal rate = free_meals / enrollment",
     "SQL": "SELECT name FROM schools WHERE county = 'Alameda' "
            "ORDER BY CAST(free_meals AS REAL) / enrollment DESC LIMIT 1",
     "difficulty": "moderate"},
    {"question_id": 1, "db_id": "ice_hockey_draft",
     "question": "How many goals did the Reds score?", "evidence": "",
     "SQL": "SELECT SUM(goals) FROM players WHERE team = 'Reds'", "difficulty": "simple"},
]


@pytest.fixture
def bird_dir(tmp_path: Path) -> Path:
    root = tmp_path / "bird"
    write_json(root / "dev.json", BIRD_DEV)
    write_json(root / "dev_tables.json", [])
    make_db(root / "dev_databases", "california_schools", SCHOOLS)
    make_db(root / "dev_databases", "ice_hockey_draft", PLAYERS)
    return root


def test_bird_loader_keeps_ids_gold_and_evidence(bird_dir: Path) -> None:
    data = load("bird", data_dir=bird_dir, split="dev")
    t = data.tasks.get("bird-dev-0")
    assert t.answer == BIRD_DEV[0]["SQL"] and t.prompt == BIRD_DEV[0]["question"]
    assert t.meta["db_id"] == "california_schools" and t.meta["split"] == "dev"
    assert t.meta["question"] == t.prompt and t.meta["difficulty"] == "moderate"
    assert t.meta["external_knowledge"] == BIRD_DEV[0]["evidence"]
    assert data.db_path("ice_hockey_draft") == \
        bird_dir / "dev_databases" / "ice_hockey_draft" / "ice_hockey_draft.sqlite"


def test_bird_episode_shows_evidence_as_external_knowledge_and_gold_scores_one(
        bird_dir: Path) -> None:
    obs, reward = play_reference("sql-bird", "bird-dev-0", data_dir=bird_dir)
    assert f"External knowledge:\n{BIRD_DEV[0]['evidence']}" in obs
    assert "CREATE TABLE schools" in obs and BIRD_DEV[0]["question"] in obs
    assert reward == 1.0
    obs, reward = play_reference("sql-bird", "bird-dev-1", data_dir=bird_dir)
    assert "External knowledge:\nNone" in obs and reward == 1.0


def test_bird_release_folder_as_unzipped_is_found(tmp_path: Path) -> None:
    # dev.zip unpacks to dev_20240627/; OmniSQL's copy has bird/train/train.json
    inner = tmp_path / "bird" / "dev_20240627"
    write_json(inner / "dev.json", BIRD_DEV[1:])
    make_db(inner / "dev_databases", "ice_hockey_draft", PLAYERS)
    train = [{"db_id": "ice_hockey_draft", "question": "Goals of Blues?", "evidence": "",
              "SQL": "SELECT goals FROM players WHERE team = 'Blues'"}]
    write_json(tmp_path / "bird" / "train" / "train.json", train)
    make_db(tmp_path / "bird" / "train" / "train_databases", "ice_hockey_draft", PLAYERS)
    assert load("bird", data_dir=tmp_path / "bird").tasks.ids() == ["bird-dev-1"]
    t = load("bird", data_dir=tmp_path / "bird", split="train").tasks[0]
    assert t.id == "bird-train-0" and t.answer == train[0]["SQL"]  # no question_id in train


def test_bird_databases_left_zipped_say_to_unzip(bird_dir: Path) -> None:
    dbs = bird_dir / "dev_databases"
    dbs.rename(bird_dir / "moved")
    (bird_dir / "dev_databases.zip").write_bytes(b"PK")
    with pytest.raises(DataNotFound, match=r"unzip .*dev_databases\.zip"):
        load("bird", data_dir=bird_dir)


def test_bird_missing_says_what_to_download(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYHUB_DATA", raising=False)
    with pytest.raises(DataNotFound, match=r"dev\.json.*dev_databases/.*skyhub sql data get bird"):
        load("bird")
    with pytest.raises(DataNotFound, match=rf"under {tmp_path}.*train\.json.*bird-train"):
        load("bird", data_dir=tmp_path, split="train")


# ------------------------------------------------------------------ SynSQL-2.5M
SYNSQL = [
    {"db_id": "music_festival_stats", "sql_complexity": "Simple", "question_style": "Formal",
     "question": "How many singers are from France?", "external_knowledge": "",
     "cot": "...", "sql": "SELECT COUNT(*) FROM singer WHERE country = 'France'"},
    {"db_id": "music_festival_stats", "sql_complexity": "Moderate", "question_style": "Vague",
     "question": "Who are the senior singers?",
     "external_knowledge": "senior singers are older than 40",
     "cot": "Filter on age.\n```sql\nSELECT name FROM singer WHERE age > 40;\n```"},
    {"db_id": "pet_clinic_records", "sql_complexity": "Simple", "question_style": "Colloquial",
     "question": "How heavy is the heaviest pet?", "external_knowledge": "",
     "cot": "", "sql": "SELECT MAX(weight) FROM pets"},
]


@pytest.fixture
def synsql_dir(tmp_path: Path) -> Path:
    root = tmp_path / "SynSQL-2.5M"
    write_json(root / "data.json", SYNSQL)
    write_json(root / "tables.json", [])
    make_db(root / "databases", "music_festival_stats", SINGERS)
    make_db(root / "databases", "pet_clinic_records", PETS)
    return root


def test_synsql_loader_reads_omnisql_fields(synsql_dir: Path) -> None:
    tasks = load("synsql", data_dir=synsql_dir).tasks
    assert tasks.ids() == ["synsql-train-0", "synsql-train-1", "synsql-train-2"]
    t = tasks[1]
    assert t.meta["external_knowledge"] == "senior singers are older than 40"
    assert t.meta["sql_complexity"] == "Moderate" and t.meta["question_style"] == "Vague"
    assert t.answer == "SELECT name FROM singer WHERE age > 40;"  # from cot: no 'sql' here
    assert len(load("synsql", data_dir=synsql_dir, n_tasks=2).tasks) == 2
    # OmniSQL's data/ folder (the one above SynSQL-2.5M/) works too
    assert len(load("synsql", data_dir=synsql_dir.parent).tasks) == 3


def test_synsql_episode_scores_the_gold_one(synsql_dir: Path) -> None:
    obs, reward = play_reference("sql-synsql", "synsql-train-1", data_dir=synsql_dir)
    assert "senior singers are older than 40" in obs and reward == 1.0
    assert play_reference("sql-synsql", "synsql-train-2", data_dir=synsql_dir)[1] == 1.0


def test_synsql_data_json_is_streamed_across_chunk_boundaries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values = [{"a": "x" * n, "n": n, "s": "]},[{"} for n in range(40)] + [12345, "tail"]
    monkeypatch.setattr(synsql_mod, "_CHUNK", 7)
    listed = write_json(tmp_path / "list.json", values)
    assert list(synsql_mod.iter_json_values(listed)) == values
    lines = tmp_path / "lines.jsonl"
    lines.write_text("\n".join(json.dumps(v) for v in values), encoding="utf-8")
    assert list(synsql_mod.iter_json_values(lines)) == values
    (tmp_path / "empty.json").write_text("[ ]")
    assert list(synsql_mod.iter_json_values(tmp_path / "empty.json")) == []
    (tmp_path / "bad.json").write_text('[{"a": 1}, {"b": ]')
    with pytest.raises(ValueError, match="not valid JSON"):
        list(synsql_mod.iter_json_values(tmp_path / "bad.json"))


def test_synsql_missing_says_what_to_download(tmp_path: Path) -> None:
    with pytest.raises(DataNotFound, match=r"data\.json, tables\.json, databases/.*"
                                           r"skyhub sql data get synsql"):
        load("synsql", data_dir=tmp_path)
    with pytest.raises(ValueError, match="one split"):
        load("synsql", data_dir=tmp_path, split="dev")


# ------------------------------------------------------------------ SkyRL-SQL-653
def skyrl_user(schema: str, knowledge: str, question: str) -> str:
    # how SkyRL's examples/text_to_sql/sql_dataset.py builds the user message
    return ("{db_details}:" + schema + ";\n {external_knowledge}: " + knowledge
            + ";\n {question}: " + question)


SKYRL_ROWS = [  # (data, db_id, knowledge, question, gold)
    ("synsql", "music_festival_stats", "senior means older than 40",
     "List the senior singers.", "SELECT name FROM singer WHERE age > 40"),
    ("spider", "concert_singer", "", "How many singers do we have?",
     "SELECT count(*) FROM singer"),
]


def write_skyrl_parquet(path: Path, rows: list[tuple[str, str, str, str, str]]) -> Path:
    """A parquet file with the newfmt columns, written by DuckDB's COPY."""
    import duckdb

    selects = []
    for i, (data, db_id, knowledge, question, gold) in enumerate(rows):
        user = skyrl_user("CREATE TABLE singer (...)", knowledge, question).replace("'", "''")
        selects.append(
            f"SELECT '{data}' AS data_source, [{{'role': 'system', 'content': 'Task Overview: "
            f"...'}}, {{'role': 'user', 'content': '{user}'}}] AS prompt, 'text2sql' AS env_class,"
            f" {{'method': 'rule', 'ground_truth': '{gold.replace(chr(39), chr(39) * 2)}'}} AS "
            f"reward_spec, '{db_id}' AS db_id, '{data}' AS data, "
            f"{{'split': 'train', 'index': {i}}} AS extra_info")
    path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(f"COPY ({' UNION ALL '.join(selects)}) TO '{path}' (FORMAT parquet)")
    con.close()
    return path


@pytest.fixture
def data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$SKYHUB_DATA with skyrl653/, synsql/ and spider/ as 'skyhub sql data get' lays them out."""
    root = tmp_path / "data"
    write_skyrl_parquet(root / "skyrl653" / "train.parquet", SKYRL_ROWS)
    make_db(root / "synsql" / "databases", "music_festival_stats", SINGERS)
    write_json(root / "synsql" / "data.json", [])
    make_db(root / "spider" / "database", "concert_singer", SINGERS[:1])  # same name, no rows
    monkeypatch.setenv("SKYHUB_DATA", str(root))
    return root


def test_skyrl653_rows_resolve_to_synsql_and_spider_databases(data_root: Path) -> None:
    data = load("skyrl653")
    first, second = data.tasks
    assert (first.meta["collection"], second.meta["collection"]) == ("synsql", "spider")
    assert first.prompt == "List the senior singers." and first.answer == SKYRL_ROWS[0][4]
    assert first.meta["external_knowledge"] == "senior means older than 40"
    assert second.meta["external_knowledge"] == "" and second.meta["split"] == "train"
    assert data.db_path("music_festival_stats") == \
        data_root / "synsql" / "databases" / "music_festival_stats" / "music_festival_stats.sqlite"
    assert data.db_path("concert_singer") == \
        data_root / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"


def test_skyrl653_takes_explicit_dirs_and_skyrl_db_path(data_root: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYHUB_DATA")
    omni = tmp_path / "omnisql" / "data"  # SkyRL's DB_PATH: OmniSQL's unzipped data/
    make_db(omni / "SynSQL-2.5M" / "databases", "music_festival_stats", SINGERS)
    make_db(omni / "spider" / "database", "concert_singer", SINGERS)
    data = load("skyrl653", data_dir=data_root / "skyrl653", db_root=omni)
    assert data.db_path("concert_singer") == \
        omni / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"
    data = load("skyrl653", data_dir=data_root / "skyrl653", synsql_dir=omni / "SynSQL-2.5M",
                spider_dir=data_root / "spider")
    assert data.db_path("music_festival_stats").is_relative_to(omni)
    assert data.db_path("concert_singer").is_relative_to(data_root)


def test_skyrl653_episodes_score_the_gold_one(data_root: Path) -> None:
    obs, reward = play_reference("sql-skyrl653", "skyrl653-train-0")
    assert "senior means older than 40" in obs and "List the senior singers." in obs
    assert reward == 1.0
    assert play_reference("sql-skyrl653", "skyrl653-train-1")[1] == 1.0


def test_skyrl653_missing_databases_say_which_collection(data_root: Path) -> None:
    import shutil

    shutil.rmtree(data_root / "synsql")
    with pytest.raises(DataNotFound, match=r"1 synsql databases.*skyhub sql data get synsql.*"
                                           r"synsql_dir="):
        load("skyrl653")
    with pytest.raises(DataNotFound, match=r"validation\.parquet.*skyhub sql data get skyrl653"):
        load("skyrl653", split="validation")


def test_skyrl653_prompt_parsing_accepts_the_known_forms() -> None:
    msgs = [{"role": "system", "content": "sys"},
            {"role": "user", "content": skyrl_user("CREATE TABLE t (a);", "None", "What is a?")}]
    assert parse_prompt(msgs) == ("What is a?", "")
    omnisql = ("Database Schema:\nCREATE TABLE t (a);\n\nExternal Knowledge:\na is b\n\n"
               "Question:\nWhat is a?\n\nInstructions:\n- be brief")
    assert parse_prompt([{"role": "user", "content": omnisql}]) == ("What is a?", "a is b")
    assert parse_prompt([{"role": "user", "content": " Just ask. "}]) == ("Just ask.", "")


# ------------------------------------------------------------------ Spider variants
def test_spider_dk_loads_with_its_file_name_as_split(tmp_path: Path) -> None:
    # github.com/ygan/Spider-DK: Spider-DK.json, tables.json, database/ (merged with Spider's)
    root = tmp_path / "spider-dk"
    write_json(root / "Spider-DK.json", [
        {"type": 0, "db_id": "new_pets_1", "query": "SELECT count(*) FROM pets WHERE weight > 10",
         "question": "How many pets weigh more than 10?"}])
    write_json(root / "tables.json", [])
    make_db(root / "database", "new_pets_1", PETS)
    obs, reward = play_reference("sql-spider", "spider-Spider-DK-0", data_dir=root,
                                 split="Spider-DK")
    assert "How many pets weigh more than 10?" in obs and reward == 1.0


def test_spider_realistic_loads_with_its_file_name_as_split(tmp_path: Path) -> None:
    # zenodo.org/records/5205322: spider-realistic.json (+ Spider's database/ alongside)
    root = tmp_path / "spider-realistic"
    write_json(root / "spider-realistic.json", [
        {"db_id": "concert_singer", "query": "SELECT count(*) FROM singer",
         "question": "How many singers do we have?"}])
    make_db(root / "database", "concert_singer", SINGERS)
    assert play_reference("sql-spider", "spider-spider-realistic-0", data_dir=root,
                          split="spider-realistic")[1] == 1.0


def test_spider_syn_uses_the_synonym_question(tmp_path: Path) -> None:
    # github.com/ygan/Spider-Syn: Spider-Syn/dev.json and train_spider.json
    root = tmp_path / "spider-syn"
    write_json(root / "dev.json", [
        {"db_id": "concert_singer", "SpiderQuestion": "How many singers do we have?",
         "SpiderSynQuestion": "How many vocalists do we have?",
         "query": "SELECT count(*) FROM singer"}])
    make_db(root / "database", "concert_singer", SINGERS)
    obs, reward = play_reference("sql-spider", "spider-dev-0", data_dir=root, split="dev")
    assert "How many vocalists do we have?" in obs and reward == 1.0


def test_spider_variant_without_databases_uses_spiders(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    make_db(tmp_path / "spider" / "database", "concert_singer", SINGERS)
    monkeypatch.setenv("SKYHUB_DATA", str(tmp_path))
    root = tmp_path / "spider-realistic"
    write_json(root / "spider-realistic.json", [
        {"db_id": "concert_singer", "query": "SELECT count(*) FROM singer",
         "question": "How many singers do we have?"}])
    assert play_reference("sql-spider", "spider-spider-realistic-0", data_dir=root,
                          split="spider-realistic")[1] == 1.0
