"""The SQL loaders on files written in exactly the upstream formats SkyRL-SQL used.

- SkyRL-SQL-653 (NovaSky-AI/SkyRL-SQL-653-data-newfmt): the parquet that skyrl-train's
  examples/text_to_sql/sql_dataset.py writes (a `datasets.map` over the source JSON, which
  keeps its columns) and skyrl-train's PromptDataset / skyrl-gym's text2sql env read: `prompt`
  a list of {role, content} structs, `reward_spec` {method, ground_truth}, `extra_info`
  {split, index: int64}, `db_id`, `data`, `env_class`, `data_source`.
- SkyRL-SQL's evaluation files (NovaSky-AI/SkyRL-SQL-eval), as OmniSQL's fork
  evaluate_skysql/infer_multiturn.py reads them: a JSON list of {schema, external_knowledge,
  question}, one per question of the release, in its order.
- OmniSQL's data/ layout (its data.zip, SkyRL-SQL's DB_PATH / DB_ROOT): spider/, Spider-DK/,
  spider-realistic/, Spider-Syn/, bird/dev_20240627/, SynSQL-2.5M/.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

import skyhub
from skyhub.envs.sql.datasets import load
from skyhub.errors import DataNotFound

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from sql_files import make_db, write_json

SINGERS = [
    "CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER)",
    "INSERT INTO singer VALUES (1, 'Joe', 'France', 52), (2, 'Ana', 'Spain', 29)",
]
PETS = [
    "CREATE TABLE pets (petid INTEGER PRIMARY KEY, pettype TEXT, weight REAL)",
    "INSERT INTO pets VALUES (1, 'dog', 12.0), (2, 'cat', 3.5)",
]
# OmniSQL's schema text (process_dataset.py's obtain_db_details): CREATE TABLE with 4-space
# indented columns, a `-- example: [...]` of sampled values per column, then the keys.
SINGER_SCHEMA = ("CREATE TABLE singer (\n    singer_id INTEGER, -- example: [1, 2]\n"
                 "    name TEXT, -- example: ['Joe', 'Ana']\n"
                 "    country TEXT, -- example: ['France', 'Spain']\n"
                 "    age INTEGER, -- example: [52, 29]\n    PRIMARY KEY (singer_id)\n);")
PETS_SCHEMA = ("CREATE TABLE pets (\n    petid INTEGER, -- example: [1, 2]\n"
               "    pettype TEXT, -- example: ['dog', 'cat']\n"
               "    weight REAL, -- example: [12.0, 3.5]\n    PRIMARY KEY (petid)\n);")
SYSTEM = ("\nTask Overview:\nYou are a data science expert. ...\n\nDatabase Schema:\n"
          "{db_details}\n...\nQuestion:\n{question}\n...")


# ------------------------------------------------------------------ SkyRL-SQL-653 parquet
SOURCE_ROWS = [  # the source JSON's rows (653_skyrl_sql.json): schema, knowledge, question...
    {"db_id": "music_festival_stats", "data": "synsql", "schema": SINGER_SCHEMA,
     "external_knowledge": "senior means older than 40", "question": "List the senior singers.",
     "sql": "SELECT name FROM singer WHERE age > 40"},
    {"db_id": "pets_1", "data": "spider", "schema": PETS_SCHEMA, "external_knowledge": "",
     "question": "How many dogs are there?",
     "sql": "SELECT count(*) FROM pets WHERE pettype = 'dog'"},
]


def user_message(row: dict[str, str]) -> str:
    """The user message sql_dataset.py builds from a source row."""
    return ("{db_details}:" + row["schema"] + ";\n {external_knowledge}: "
            + row["external_knowledge"] + ";\n {question}: " + row["question"])


def sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def write_653_parquet(path: Path, rows: list[dict[str, str]], split: str, *,
                      source_columns: bool = True) -> Path:
    """The parquet with the columns, nesting and types sql_dataset.py's map gives: the mapped
    fields, plus (`source_columns`) the source JSON's columns that `datasets.map` keeps."""
    import duckdb

    selects = []
    for i, r in enumerate(rows):
        cols = {
            "data_source": sql_literal("synsql" if split == "train" else "spider"),
            "prompt": (f"[{{'role': 'system', 'content': {sql_literal(SYSTEM)}}}, "
                       f"{{'role': 'user', 'content': {sql_literal(user_message(r))}}}]"),
            "env_class": "'text2sql'",
            "reward_spec": f"{{'method': 'rule', 'ground_truth': {sql_literal(r['sql'])}}}",
            "db_id": sql_literal(r["db_id"]), "data": sql_literal(r["data"]),
            "extra_info": f"{{'split': {sql_literal(split)}, 'index': CAST({i} AS BIGINT)}}",
        }
        if source_columns:
            cols |= {k: sql_literal(r[k]) for k in ("schema", "external_knowledge",
                                                     "question", "sql")}
        selects.append("SELECT " + ", ".join(f"{v} AS {k}" for k, v in cols.items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    try:
        con.execute(f"COPY ({' UNION ALL '.join(selects)}) TO '{path}' (FORMAT parquet)")
        described = con.execute(f"DESCRIBE SELECT * FROM read_parquet('{path}')").fetchall()
        types = {c[0]: c[1].replace('"', "") for c in described}
    finally:
        con.close()
    # the Arrow types HF `datasets` writes for these fields
    assert types["prompt"] == "STRUCT(role VARCHAR, content VARCHAR)[]", types["prompt"]
    assert types["reward_spec"] == "STRUCT(method VARCHAR, ground_truth VARCHAR)"
    assert types["extra_info"] == "STRUCT(split VARCHAR, index BIGINT)"
    return path


@pytest.fixture
def omnisql_data(tmp_path: Path) -> Path:
    """OmniSQL's data/ (SkyRL's DB_PATH) with the two databases the rows use."""
    data = tmp_path / "db_files" / "data"
    make_db(data / "SynSQL-2.5M" / "databases", "music_festival_stats", SINGERS)
    make_db(data / "spider" / "database", "pets_1", PETS)
    return data


@pytest.mark.parametrize("source_columns", [True, False],
                         ids=["with-source-columns", "mapped-columns-only"])
def test_653_parquet_rows_carry_skyrls_own_prompt(tmp_path: Path, omnisql_data: Path,
                                                  source_columns: bool) -> None:
    parquet = write_653_parquet(tmp_path / "sql" / "train.parquet", SOURCE_ROWS, "train",
                                source_columns=source_columns)
    data = load("skyrl653", data_dir=parquet.parent, db_root=omnisql_data)
    first, second = data.tasks
    for task, row in ((first, SOURCE_ROWS[0]), (second, SOURCE_ROWS[1])):
        # the chat exactly as the row has it: what SkyRL-SQL's model was trained on
        assert task.meta["prompt_messages"] == [
            {"role": "system", "content": SYSTEM}, {"role": "user", "content": user_message(row)}]
        assert task.meta["schema_text"] == row["schema"]  # OmniSQL's text, examples included
        assert task.prompt == task.meta["question"] == row["question"]
        assert task.meta["external_knowledge"] == row["external_knowledge"]
        assert task.answer == row["sql"] and task.meta["db_id"] == row["db_id"]
        assert task.meta["collection"] == row["data"] and task.meta["split"] == "train"
    assert data.db_path("music_festival_stats") == (
        omnisql_data / "SynSQL-2.5M" / "databases" / "music_festival_stats"
        / "music_festival_stats.sqlite")
    assert data.db_path("pets_1") == omnisql_data / "spider" / "database" / "pets_1" / \
        "pets_1.sqlite"


def test_653_validation_parquet_is_spider_dev_with_its_prompts(tmp_path: Path,
                                                               omnisql_data: Path) -> None:
    parquet = write_653_parquet(tmp_path / "sql" / "validation.parquet", SOURCE_ROWS[1:],
                                "validation")
    (task,) = load("skyrl653", data_dir=parquet.parent, split="validation",
                   db_root=omnisql_data).tasks
    assert task.id == "skyrl653-validation-0" and task.meta["data_source"] == "spider"
    assert task.meta["prompt_messages"][1]["content"] == user_message(SOURCE_ROWS[1])


def test_653_gold_runs_on_the_resolved_databases(tmp_path: Path, omnisql_data: Path) -> None:
    parquet = write_653_parquet(tmp_path / "sql" / "train.parquet", SOURCE_ROWS, "train")
    data = load("skyrl653", data_dir=parquet.parent, db_root=omnisql_data)
    for task in data.tasks:
        con = sqlite3.connect(f"file:{data.db_path(task.meta['db_id'])}?mode=ro", uri=True)
        try:
            assert con.execute(task.answer).fetchall()  # the gold answers on its database
        finally:
            con.close()


# ------------------------------------------------------------------ OmniSQL's data/ layout
DEV = [{"db_id": "concert_singer", "query": "SELECT count(*) FROM singer",
        "question": "How many singers do we have?"},
       {"db_id": "pets_1", "query": "SELECT count(*) FROM pets WHERE pettype = 'dog'",
        "question": "How many dogs are there?"}]


@pytest.fixture
def omnisql(tmp_path: Path) -> Path:
    """OmniSQL's unzipped data/ with the five Spider releases SkyRL-SQL evaluates on, as
    infer_multiturn_all.sh uses them (--db_path per release), plus BIRD dev."""
    data = tmp_path / "evaluate_skysql" / "data"
    spider = data / "spider"
    write_json(spider / "dev.json", DEV)
    write_json(spider / "test.json", DEV[:1])
    write_json(spider / "tables.json", [])
    make_db(spider / "database", "concert_singer", SINGERS)
    make_db(spider / "database", "pets_1", PETS)
    make_db(spider / "test_database", "concert_singer", SINGERS)
    (spider / "dev_gold.sql").write_text("".join(f"{q['query']}\t{q['db_id']}\n" for q in DEV))
    write_json(data / "Spider-DK" / "Spider-DK.json", [
        {"db_id": "new_pets_1", "query": "SELECT count(*) FROM pets WHERE weight > 10",
         "question": "How many pets weigh more than 10?"}])
    make_db(data / "Spider-DK" / "database", "new_pets_1", PETS)
    write_json(data / "spider-realistic" / "spider-realistic.json", DEV[:1])
    write_json(data / "Spider-Syn" / "dev.json", [
        {"db_id": "concert_singer", "SpiderQuestion": DEV[0]["question"],
         "SpiderSynQuestion": "How many vocalists do we have?", "query": DEV[0]["query"]}])
    bird = data / "bird" / "dev_20240627"
    write_json(bird / "dev.json", [{"question_id": 0, "db_id": "pets_1", "evidence": "",
                                    "question": "How many dogs?", "difficulty": "simple",
                                    "SQL": "SELECT count(*) FROM pets WHERE pettype = 'dog'"}])
    make_db(bird / "dev_databases", "pets_1", PETS)
    return data


RELEASES = [  # (variant, split, db_id of the first task, its database's folder under data/)
    ("spider", "dev", "concert_singer", "spider/database"),
    ("spider", "test", "concert_singer", "spider/test_database"),
    ("spider-dk", "Spider-DK", "new_pets_1", "Spider-DK/database"),
    ("spider-realistic", "spider-realistic", "concert_singer", "spider/database"),
    ("spider-syn", "dev", "concert_singer", "spider/database"),
]


@pytest.mark.parametrize(("variant", "split", "db_id", "db_folder"), RELEASES,
                         ids=[f"{v}-{s}" for v, s, *_ in RELEASES])
def test_omnisql_layout_is_found_from_its_root(omnisql: Path, variant: str, split: str,
                                               db_id: str, db_folder: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYHUB_DATA", raising=False)
    for root in (omnisql, omnisql.parent):  # data/ itself, or the folder holding it
        data = load("spider", data_dir=root, split=split, variant=variant, skyrl_eval=False)
        first = data.tasks[0]
        assert first.id == f"{variant}-{split}-0" and first.meta["db_id"] == db_id
        assert data.db_path(db_id) == omnisql / db_folder / db_id / f"{db_id}.sqlite"
    if variant == "spider-syn":
        assert first.prompt == "How many vocalists do we have?"


def test_omnisql_layout_through_the_env(omnisql: Path) -> None:
    with skyhub.make("sql-spider", data_dir=omnisql, variant="spider-dk",
                     split="Spider-DK") as env:
        obs, info = env.reset(options={"task_id": "spider-dk-Spider-DK-0"})
        assert "How many pets weigh more than 10?" in obs and info["db_id"] == "new_pets_1"


def test_omnisql_layout_bird_synsql_and_653_databases(omnisql: Path) -> None:
    (task,) = load("bird", data_dir=omnisql).tasks
    assert task.meta["db_id"] == "pets_1"
    make_db(omnisql / "SynSQL-2.5M" / "databases", "music_festival_stats", SINGERS)
    write_json(omnisql / "SynSQL-2.5M" / "data.json", SOURCE_ROWS[:1])
    assert load("synsql", data_dir=omnisql).tasks[0].meta["db_id"] == "music_festival_stats"


# ------------------------------------------------------------------ SkyRL-SQL's eval files
def eval_rows(questions: list[dict[str, Any]], schemas: dict[str, str]) -> list[dict]:
    """SkyRL-SQL-eval rows for a release's questions: the schema text OmniSQL built for the
    question's database, its (empty for Spider) external knowledge and the question."""
    return [{"schema": schemas[q["db_id"]], "external_knowledge": "",
             "question": q.get("SpiderSynQuestion") or q["question"]} for q in questions]


SCHEMAS = {"concert_singer": SINGER_SCHEMA, "pets_1": PETS_SCHEMA, "new_pets_1": PETS_SCHEMA}


def test_skyrl_eval_files_next_to_omnisql_data_are_used_as_they_are(
        omnisql: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYHUB_DATA", raising=False)
    # evaluate_skysql/{data, skyrl_eval}: the layout SkyRL-SQL's evaluation README sets up
    evals = omnisql.parent / "skyrl_eval"
    write_json(evals / "dev_spider.json", eval_rows(DEV, SCHEMAS))
    syn = json.loads((omnisql / "Spider-Syn" / "dev.json").read_text())
    write_json(evals / "dev_spider_syn.json", eval_rows(syn, SCHEMAS))
    first, second = load("spider", data_dir=omnisql).tasks
    assert first.meta["schema_text"] == SINGER_SCHEMA and second.meta["schema_text"] == \
        PETS_SCHEMA
    assert first.meta["prompt_source"] == str(evals / "dev_spider.json")
    assert first.prompt == DEV[0]["question"] and first.meta["external_knowledge"] == ""
    assert first.answer == DEV[0]["query"]  # the gold stays the release's
    (syn_task,) = load("spider", data_dir=omnisql, variant="spider-syn").tasks
    assert syn_task.meta["schema_text"] == SINGER_SCHEMA
    assert syn_task.prompt == "How many vocalists do we have?"
    # no file for this release: its tasks carry no schema text; skyrl_eval=False: none at all
    assert "schema_text" not in load("spider", data_dir=omnisql, split="test").tasks[0].meta
    assert "schema_text" not in load("spider", data_dir=omnisql, skyrl_eval=False).tasks[0].meta


def test_skyrl_eval_file_given_explicitly_or_under_skyhub_data(
        omnisql: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = write_json(tmp_path / "mine" / "dev_spider_dk.json", [
        {"schema": PETS_SCHEMA + "\n-- DK", "external_knowledge": "heavy means > 10 kg",
         "question": "How many heavy pets are there?"}])
    (task,) = load("spider", data_dir=omnisql, variant="spider-dk", split="Spider-DK",
                   skyrl_eval=mine).tasks
    assert task.meta["schema_text"].endswith("-- DK")
    assert task.meta["external_knowledge"] == "heavy means > 10 kg"
    assert task.prompt == "How many heavy pets are there?"  # the file's question, as asked
    (task,) = load("spider", data_dir=omnisql, variant="spider-dk", split="Spider-DK",
                   skyrl_eval=mine.parent).tasks  # a folder holding the files
    assert task.meta["schema_text"].endswith("-- DK")
    monkeypatch.setenv("SKYHUB_DATA", str(tmp_path / "data"))
    write_json(tmp_path / "data" / "skyrl-sql-eval" / "dev_spider_realistic.json",
               eval_rows(DEV[:1], SCHEMAS))
    (task,) = load("spider", data_dir=omnisql, variant="spider-realistic",
                   split="spider-realistic").tasks
    assert task.meta["schema_text"] == SINGER_SCHEMA


def test_skyrl_eval_rows_are_matched_to_the_bundled_dev_subset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundled subset lacks one database's questions (972 of 1034): the full evaluation
    file's rows are matched question by question, in order."""
    bundled = load("spider", skyrl_eval=False).tasks
    rows: list[dict[str, Any]] = []
    for i, t in enumerate(bundled):
        if i % 100 == 50:  # questions of a database the subset does not ship
            rows.append({"schema": "CREATE TABLE wta (...);", "external_knowledge": "",
                         "question": "How many players are there?"})
        rows.append({"schema": f"-- schema text for question {i}", "external_knowledge": "",
                     "question": "  " + t.prompt + " "})
    monkeypatch.setenv("SKYHUB_DATA", str(tmp_path))
    write_json(tmp_path / "skyrl-sql-eval" / "dev_spider.json", rows)
    tasks = load("spider").tasks
    assert len(tasks) == len(bundled) == 972
    assert [t.meta["schema_text"] for t in tasks] == [
        f"-- schema text for question {i}" for i in range(len(bundled))]
    assert [t.answer for t in tasks] == [t.answer for t in bundled]


def test_files_that_are_not_skyrl_eval_files_say_so(omnisql: Path, tmp_path: Path) -> None:
    # OmniSQL's own processed files share the name (data/dev_spider.json) but not the format
    omni = write_json(tmp_path / "omni" / "dev_spider.json",
                      [{"input_seq": "Task Overview: ...", "output_seq": q["query"]} for q in DEV])
    with pytest.raises(ValueError, match=r"input_seq.*NovaSky-AI/SkyRL-SQL-eval"):
        load("spider", data_dir=omnisql, skyrl_eval=omni)
    short = write_json(tmp_path / "short" / "dev_spider.json", eval_rows(DEV[:1], SCHEMAS))
    with pytest.raises(ValueError, match="1 questions, the release 2"):
        load("spider", data_dir=omnisql, skyrl_eval=short)
    wrong = write_json(tmp_path / "wrong" / "dev_spider.json",
                       [dict(r, db_id="world_1") for r in eval_rows(DEV, SCHEMAS)])
    with pytest.raises(ValueError, match="about database 'world_1'"):
        load("spider", data_dir=omnisql, skyrl_eval=wrong)
    with pytest.raises(DataNotFound, match="skyrl-sql-eval"):
        load("spider", data_dir=omnisql, skyrl_eval=tmp_path / "nowhere")
