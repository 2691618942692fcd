"""QA sets: JSONL (or parquet, read with duckdb) rows with `question` and `golden_answers`.

Search-R1's parquet files (`nq_search/train.parquet`, ...) have those columns too; rows that
only carry `reward_model.ground_truth.target` are read from there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from skyhub.errors import DataNotFound, MissingDependency
from skyhub.task import Task, TaskSet

DATA_DIR = Path(__file__).parent / "data"
BUNDLED_QA = DATA_DIR / "qa-dev.jsonl"


def _rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        try:
            import duckdb
        except ImportError as e:
            raise MissingDependency(f"reading {path} needs duckdb: pip install duckdb (or "
                                    "'skyhub[sql]'), or convert it to JSONL") from e
        con = duckdb.connect()
        try:
            rel = con.execute("SELECT * FROM read_parquet(?)", [str(path)])
            cols = [c[0] for c in rel.description]
            return [dict(zip(cols, r, strict=True)) for r in rel.fetchall()]
        finally:
            con.close()
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _golden(row: dict[str, Any]) -> list[str]:
    gold = row.get("golden_answers")
    if gold is None:
        gold = ((row.get("reward_model") or {}).get("ground_truth") or {}).get("target")
    if gold is None:
        gold = row.get("answers", row.get("answer"))
    if gold is None:
        return []
    if isinstance(gold, str):
        return [gold]
    return [str(g) for g in gold]


def load_qa(path: str | Path | None = None, *, split: str = "dev",
            dataset: str | None = None) -> TaskSet:
    """Tasks from a QA file (default: the bundled 50 questions). Task: prompt = question,
    answer = golden answers (list), meta {split, question, golden_answers, dataset, ...}."""
    p = Path(path).expanduser() if path is not None else BUNDLED_QA
    if not p.is_file():
        raise DataNotFound(f"QA file not found: {p} (JSONL or parquet with 'question' and "
                           f"'golden_answers'). Pass qa=PATH or omit it for the bundled set")
    dataset = dataset or ("synth" if path is None else p.stem)
    tasks = []
    for i, row in enumerate(_rows(p)):
        question = str(row.get("question", "")).strip()
        gold = _golden(row)
        if not question or not gold:
            raise DataNotFound(f"{p}: row {i} lacks 'question' or 'golden_answers'")
        meta: dict[str, Any] = {"split": split, "question": question, "golden_answers": gold,
                                "dataset": str(row.get("data_source") or dataset)}
        for extra in ("gold_id", "gold_title"):
            if row.get(extra) is not None:
                meta[extra] = str(row[extra])
        tasks.append(Task(id=str(row.get("id") or f"{dataset}-{i}"), prompt=question,
                          answer=gold, meta=meta))
    return TaskSet(tasks, name=f"search-qa({p.name})")
