"""The `skyrl-sql` suite: its five runs and reference rows, each run loading its release from
where `skyhub sql data get` lays it out (small files written here in each official layout, with
databases copied from the bundled subset), the error that names the missing file, and the
oracle scoring 100% on the bundled Spider dev subset under the suite's protocol."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import skyhub
from skyhub.envs.sql.datasets.spider import BUNDLED_DIR
from skyhub.errors import DataNotFound
from skyhub.eval.agents import OracleAgent
from skyhub.eval.harness import run as evaluate
from skyhub.eval.suites import SuiteRun, get_suite

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from sql_files import write_json

COLUMNS = ["Spider-Dev", "Spider-Test", "Spider-Realistic", "Spider-DK", "Spider-Syn"]


def copy_db(src_id: str, dest: Path, db_id: str | None = None) -> None:
    """A bundled Spider database copied to `dest/<db_id>/<db_id>.sqlite`."""
    db_id = db_id or src_id
    (dest / db_id).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(BUNDLED_DIR / "database" / src_id / f"{src_id}.sqlite",
                    dest / db_id / f"{db_id}.sqlite")


def q(db_id: str, question: str, query: str, **extra: Any) -> dict[str, Any]:
    return {"db_id": db_id, "question": question, "query": query, **extra}


SPIDER_DEV = [q("concert_singer", "How many singers do we have?", "SELECT count(*) FROM singer")]
SPIDER_TEST = [q("pets_1", "How many pets are there?", "SELECT count(*) FROM pets")]
REALISTIC = [q("concert_singer", "How many singers are French?",
               "SELECT count(*) FROM singer WHERE country = 'France'")]
DK = [{"type": 0, **q("new_pets_1", "How many dogs are there?",
                      "SELECT count(*) FROM pets WHERE pettype = 'dog'")},
      {"type": 1, **q("concert_singer", "List the singers from the youngest.",
                      "SELECT name FROM singer ORDER BY age")}]
SYN = [{"db_id": "concert_singer", "SpiderQuestion": "How many singers do we have?",
        "SpiderSynQuestion": "How many vocalists do we have?",
        "query": "SELECT count(*) FROM singer"}]

#: run -> the questions it must ask (Spider-Syn: the synonym version)
EXPECTED = {
    "Spider-Dev": ["How many singers do we have?"],
    "Spider-Test": ["How many pets are there?"],
    "Spider-Realistic": ["How many singers are French?"],
    "Spider-DK": ["How many dogs are there?", "List the singers from the youngest."],
    "Spider-Syn": ["How many vocalists do we have?"],
}


@pytest.fixture
def data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$SKYHUB_DATA as 'skyhub sql data get spider / spider-realistic / spider-dk / spider-syn'
    leave it: each release in its own layout, the variants' databases mostly Spider's."""
    root = tmp_path / "data"
    spider = root / "spider"  # spider_data.zip (2024): dev, test, and test_database/
    write_json(spider / "dev.json", SPIDER_DEV)
    write_json(spider / "test.json", SPIDER_TEST)
    write_json(spider / "tables.json", [])
    copy_db("concert_singer", spider / "database")
    copy_db("concert_singer", spider / "test_database")
    copy_db("pets_1", spider / "test_database")  # a test database: only in test_database/
    write_json(root / "spider-realistic" / "spider-realistic.json", REALISTIC)  # no databases
    write_json(root / "spider-realistic" / "tables.json", [])
    write_json(root / "spider-dk" / "Spider-DK.json", DK)
    write_json(root / "spider-dk" / "tables.json", [])
    copy_db("pets_1", root / "spider-dk" / "database", "new_pets_1")  # DK's own database
    write_json(root / "spider-syn" / "dev.json", SYN)
    write_json(root / "spider-syn" / "train_spider.json", [])
    monkeypatch.setenv("SKYHUB_DATA", str(root))
    return root


def make(run: SuiteRun, **kwargs: Any) -> Any:
    return skyhub.make(run.env_id, **run.kwargs, max_turns=run.max_turns, **kwargs)


def test_suite_is_skyrl_sqls_table() -> None:
    suite = get_suite("skyrl-sql")
    assert [r.name for r in suite.runs] == COLUMNS
    assert {r.env_id for r in suite.runs} == {"sql-spider"}
    assert all(r.max_turns == 5 for r in suite.runs)
    # SkyRL-SQL's evaluation loop, scored with Spider's official execution match
    assert all(r.kwargs["protocol"] == "skyrl-eval" for r in suite.runs)
    assert all(r.kwargs["reward"] == "spider_exec" for r in suite.runs)
    assert "skyrl-eval" in suite.description and "official" in suite.description
    assert all(r.data_hint for r in suite.runs)
    assert suite.reference == {
        "SkyRL-SQL-7B": dict(zip(COLUMNS, [83.9, 85.2, 81.1, 72.0, 73.7], strict=True)),
        "GPT-4o": dict(zip(COLUMNS, [81.3, 82.4, 80.1, 72.1, 71.9], strict=True)),
        "o4-mini": dict(zip(COLUMNS, [80.6, 81.8, 81.2, 70.8, 72.1], strict=True)),
        "Qwen2.5-Coder-7B-Instruct": dict(zip(COLUMNS, [77.1, 79.6, 74.2, 62.8, 66.2],
                                              strict=True)),
    }
    assert "https://novasky-ai.notion.site/skyrl-sql" in suite.source
    assert "skyhub sql data get spider-syn" in suite.run("Spider-Syn").data_hint


@pytest.mark.parametrize("column", COLUMNS)
def test_each_run_loads_its_release_and_scores_the_gold_one(data_root: Path,
                                                            column: str) -> None:
    run = get_suite("skyrl-sql").run(column)
    with make(run) as env:
        assert env.max_turns == 5
        assert [t.prompt for t in env.tasks] == EXPECTED[column]
        assert all(t.meta["difficulty"] in ("easy", "medium") for t in env.tasks)
        for task in env.tasks:
            obs, _ = env.reset(options={"task_id": task.id})
            assert task.prompt in obs and "5" in obs
            _, reward, terminated, _, info = env.step(env.reference_action() or "")
            assert terminated and reward == 1.0, info


def test_runs_take_explicit_dirs_with_spiders_databases_elsewhere(
        data_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYHUB_DATA")
    suite = get_suite("skyrl-sql")
    # a variant without databases finds Spider's in spider_dir (here: the bundled subset)
    with make(suite.run("Spider-Syn"), data_dir=data_root / "spider-syn",
              spider_dir=BUNDLED_DIR) as env:
        assert env.tasks[0].prompt == "How many vocalists do we have?"
        assert env.data.db_path("concert_singer").is_relative_to(BUNDLED_DIR)
    with make(suite.run("Spider-DK"), data_dir=data_root / "spider-dk",
              spider_dir=data_root / "spider") as env:
        assert env.data.db_path("new_pets_1").is_relative_to(data_root / "spider-dk")
        assert env.data.db_path("concert_singer").is_relative_to(data_root / "spider")


@pytest.mark.parametrize(("column", "named"), [
    ("Spider-Test", r"skyhub sql data get spider.*spider/ holds test\.json and tables\.json and "
                    r"test_database/"),
    ("Spider-Realistic", r"spider-realistic/ holds spider-realistic\.json.*"),
    ("Spider-DK", r"spider-dk/ holds Spider-DK\.json"),
    # not the bundled Spider dev questions: Spider-Syn's dev.json is another file
    ("Spider-Syn", r"skyhub sql data get spider-syn.*spider-syn/ holds dev\.json"),
])
def test_missing_data_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     column: str, named: str) -> None:
    run = get_suite("skyrl-sql").run(column)
    for root in (None, tmp_path):  # no data root, and an empty one
        if root is None:
            monkeypatch.delenv("SKYHUB_DATA", raising=False)
        else:
            monkeypatch.setenv("SKYHUB_DATA", str(root))
        with pytest.raises(DataNotFound, match=named):
            make(run)


def test_variant_without_spiders_databases_says_to_get_spider(
        data_root: Path) -> None:
    shutil.rmtree(data_root / "spider")
    with pytest.raises(DataNotFound, match=r"spider-realistic\.json.*skyhub sql data get "
                                           r"spider-realistic' and 'skyhub sql data get spider'"):
        make(get_suite("skyrl-sql").run("Spider-Realistic"))


def test_oracle_scores_the_whole_bundled_dev_subset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYHUB_DATA", raising=False)
    run = get_suite("skyrl-sql").run("Spider-Dev")
    t0 = time.perf_counter()
    summary, episodes = evaluate(run.env_id, OracleAgent(), n=972, concurrency=8,
                                 env_kwargs={**run.kwargs, "max_turns": run.max_turns})
    assert time.perf_counter() - t0 < 60  # about 2 s
    assert summary.n == len(episodes) == 972 and summary.infra_errors == 0
    assert summary.accuracy >= 0.99
