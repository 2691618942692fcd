"""Spider and the variants that share its layout (Spider-Realistic, Spider-DK, Spider-Syn).

Layout (the official release): `<split>.json` (a list of {db_id, question, query, ...}),
`tables.json`, and `database/<db_id>/<db_id>.sqlite`. `split` names the question file:
`dev` -> dev.json, `train` -> train_spider.json (+ train_others.json when present), `test` ->
test.json (its databases in `test_database/`, as spider_data.zip ships them), anything else
-> `<split>.json` (e.g. `Spider-DK`, `spider-realistic`). Without `data_dir` or
`$SKYHUB_DATA/spider`, Spider's split `dev` uses the bundled dev subset (19 databases,
972 questions; CC BY-SA 4.0, see data/spider-dev-subset/SOURCE.md); a variant (another
`name`) never falls back to it, since its questions differ.

Each task's meta has `difficulty`, Spider's level of its gold query (easy / medium / hard /
extra, see `skyhub.envs.sql.hardness`), so results can be broken down as papers do.
"""

from __future__ import annotations

import json
from pathlib import Path

from skyhub.errors import DataNotFound
from skyhub.task import Task, TaskSet

from ..hardness import spider_hardness
from . import BUNDLED, SQLDataset, default_dir

SPLIT_FILES = {"dev": ["dev.json"], "train": ["train_spider.json", "train_others.json"],
               "test": ["test.json"]}
BUNDLED_DIR = BUNDLED / "spider-dev-subset"


def load(data_dir: str | Path | None = None, split: str = "dev", name: str = "spider",
         spider_dir: str | Path | None = None, variant: str | None = None,
         **_: object) -> SQLDataset:
    """Variants that ship no databases (Spider-Syn, Spider-Realistic) or only a few
    (Spider-DK) find the rest in `spider_dir` (default `$SKYHUB_DATA/spider`).

    `name` (or `variant`, which wins) is the release's folder under `$SKYHUB_DATA` and the
    prefix of the task ids, e.g. `spider-dk`. Envs pass `variant`: `skyhub.make("sql-spider",
    name=...)` cannot reach this function, since the dataset dispatcher takes `name` as the
    dataset (`spider`)."""
    name = variant or name
    root = default_dir(name, data_dir)
    if root is None:
        if split != "dev" or name != "spider":
            what = f"Spider split {split!r}" if name == "spider" else f"{name} ({split!r})"
            dbs = ("tables.json and test_database/" if split == "test" else
                   "tables.json and database/" if name == "spider" else
                   "its databases, if it has its own (the others come from "
                   "$SKYHUB_DATA/spider/database)")
            raise DataNotFound(
                f"{what} is not bundled (only Spider's dev subset is). Download it "
                f"('skyhub data get {name}', or the official release) and pass data_dir=... "
                f"or set SKYHUB_DATA so that $SKYHUB_DATA/{name}/ holds "
                f"{', '.join(SPLIT_FILES.get(split, [split + '.json']))} and {dbs}")
        root = BUNDLED_DIR
    files = [root / f for f in SPLIT_FILES.get(split, [f"{split}.json"])]
    found = [f for f in files if f.is_file()]
    # Spider's test databases (a superset of the others) ship in test_database/
    own = [root / "test_database"] if split == "test" else []
    db_roots = [d for d in (*own, root / "database", _spider_databases(spider_dir, root))
                if d is not None and d.is_dir()]
    if not found or not db_roots:
        get = f"'skyhub data get {name}'" + (" and 'skyhub data get spider'"
                                              if name != "spider" else "")
        raise DataNotFound(
            f"{'Spider' if name == 'spider' else name} not found under {root} (looked for "
            f"{', '.join(f.name for f in files)}, tables.json, database/; a variant without "
            "databases also looks in $SKYHUB_DATA/spider/database or spider_dir=). Run "
            f"{get} or pass data_dir=... pointing at the unpacked release")
    tasks, i = [], 0
    for f in found:
        for ex in json.loads(f.read_text(encoding="utf-8")):
            # Spider-Syn keeps the original as SpiderQuestion and its synonym version apart
            question = ex.get("SpiderSynQuestion") or ex["question"]
            tasks.append(Task(
                id=f"{name}-{split}-{i}", prompt=question, answer=ex["query"],
                meta={"db_id": ex["db_id"], "split": split, "question": question,
                      "dataset": name, "external_knowledge": "",
                      "difficulty": spider_hardness(ex["query"])}))
            i += 1

    def db_path(db_id: str) -> Path:
        for d in db_roots:
            p = d / db_id / f"{db_id}.sqlite"
            if p.is_file():
                return p
        raise DataNotFound(f"database {db_id!r} not found under {' or '.join(map(str, db_roots))}"
                           "; the Spider download must include database/<db_id>/<db_id>.sqlite")

    return SQLDataset(name, TaskSet(tasks, name=f"{name}-{split}"), db_path)


def _spider_databases(spider_dir: str | Path | None, root: Path) -> Path | None:
    base = default_dir("spider", spider_dir)
    if base is None or base.resolve() == root.resolve():
        return None
    return base / "database"
