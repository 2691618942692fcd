"""Shared by the SQL family's tests: files in the layouts the SQL datasets ship in, written
from a few rows; the bundled Spider subset's databases; an episode started on one of them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

#: the bundled Spider dev subset's databases, `<db_id>/<db_id>.sqlite`
SPIDER = Path(__file__).resolve().parents[2] / "envs/sql/data/spider-dev-subset/database"


def spider_db(db_id: str) -> Path:
    """One database of the bundled Spider subset."""
    return SPIDER / db_id / f"{db_id}.sqlite"


def make_db(folder: Path, db_id: str, statements: list[str]) -> Path:
    """`folder/<db_id>/<db_id>.sqlite`, the layout every release uses."""
    path = folder / db_id / f"{db_id}.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    for s in statements:
        con.execute(s)
    con.commit()
    con.close()
    return path


def write_json(path: Path, data: Any) -> Path:
    """`data` as the releases write it (indented, UTF-8 as is), its folders made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    return path


def start(env: Any, db: str = "pets_1") -> str:
    """Reset `env` (an SQLEnv) onto its first task on database `db`; the first observation."""
    task = next(t for t in env.tasks if t.meta["db_id"] == db)
    obs, info = env.reset(options={"task_id": task.id})
    assert info["db_id"] == db
    return obs
