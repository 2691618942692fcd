"""Dataset loaders, one per public format. Each returns a `SQLDataset`: the tasks (answer =
gold SQL; meta has at least `db_id`, `split`, `question`) and where each database lives.

Where the data carries the text a model saw in the published recipe, the task carries it as
is, for the env to show instead of its own: `meta["prompt_messages"]`, the chat messages of
the row ({role, content} dicts, in order: SkyRL-SQL-653's `prompt`), and
`meta["schema_text"]`, the schema text the data built (OmniSQL's CREATE TABLE statements with
example values, in SkyRL-SQL-653's prompts and SkyRL-SQL's evaluation files)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyhub.errors import UsageError
from skyhub.task import TaskSet

BUNDLED = Path(__file__).parents[1] / "data"


@dataclass
class SQLDataset:
    name: str
    tasks: TaskSet
    db_path: Callable[[str], Path]  # db_id -> the canonical SQLite file


#: dataset name -> "module:function" (imported only when that dataset is loaded)
LOADERS = {
    "spider": "skyhub.envs.sql.datasets.spider:load",
    "bird": "skyhub.envs.sql.datasets.bird:load",
    "synsql": "skyhub.envs.sql.datasets.synsql:load",
    "skyrl653": "skyhub.envs.sql.datasets.skyrl653:load",
    "synth": "skyhub.envs.sql.synth:load",
}


def default_dir(name: str, data_dir: str | Path | None) -> Path | None:
    """`data_dir` if given, else `$SKYHUB_DATA/<name>` if that exists, else None."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    root = os.environ.get("SKYHUB_DATA")
    if root and (Path(root) / name).exists():
        return Path(root) / name
    return None


def load(name: str, /, **kwargs: Any) -> SQLDataset:
    try:
        target = LOADERS[name]
    except KeyError:
        raise UsageError(f"unknown SQL dataset {name!r}; known: {sorted(LOADERS)}") from None
    mod, fn = target.split(":")
    return getattr(importlib.import_module(mod), fn)(**kwargs)
