"""Math task sets: the bundled problems, or a public math dataset in its own JSONL format.

One loader reads every format we meet so that `data=PATH` just works: skyhub's own
`{"id", "prompt", "answer", "meta"}`, GSM8K (`question`, `answer` ending in `#### 72`),
MATH (`problem`, `solution` with a `\\boxed{}` answer, `level`, `type`), MATH-500
(`problem`, `answer`, `unique_id`) and any `{"question"|"problem"|"prompt", "answer"}`.
`Task.answer` is always the gold answer as a string, ready for `math_grade.is_equiv`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skyhub.errors import DataNotFound, UsageError
from skyhub.task import Task, TaskSet, read_rows

from .math_extract import gold_from_solution

DATA_DIR = Path(__file__).parent / "data"
BUNDLED_MATH = DATA_DIR / "math.jsonl"

_EXPECTED = ("{'id', 'prompt', 'answer'} (skyhub), {'question', 'answer'} (GSM8K), "
             "{'problem', 'solution'} (MATH), {'problem', 'answer'} (MATH-500)")
_META_KEYS = ("level", "type", "subject", "unique_id", "split")


def _task(row: Any, *, default_id: str, source: str, where: str) -> Task:
    """One row in any supported format as a Task; ValueError naming `where` otherwise."""
    if not isinstance(row, dict):
        raise UsageError(f"{where}: expected a JSON object, got {type(row).__name__}; "
                         f"rows need one of {_EXPECTED}")
    meta: dict[str, Any] = {}
    if isinstance(row.get("meta"), dict):
        meta.update(row["meta"])
    meta.update({k: row[k] for k in _META_KEYS if k in row})
    prompt = next((row[k] for k in ("prompt", "problem", "question") if row.get(k)), None)
    answer: str | None = None
    if row.get("answer") not in (None, ""):
        raw = str(row["answer"])
        # GSM8K's answer is a worked solution ending in '#### 72'; MATH-500's is the answer.
        answer = gold_from_solution(raw) if "####" in raw else raw.strip()
    elif isinstance(row.get("solution"), str):
        answer = gold_from_solution(row["solution"])
        if answer is None:
            raise UsageError(f"{where}: the solution has no \\boxed{{}} answer; MATH rows need "
                             "one (or give 'answer' explicitly)")
        meta.setdefault("solution", row["solution"])
    if prompt is None or answer is None:
        raise UsageError(f"{where}: row with keys {sorted(row)} is not a math task; expected "
                         f"one of {_EXPECTED}")
    meta.setdefault("source", source)
    task_id = row.get("id", row.get("unique_id", default_id))
    return Task(id=str(task_id), prompt=str(prompt), answer=answer, meta=meta)


def load_math_tasks(data: str | Path | None = None, split: str | None = None) -> TaskSet:
    """Math tasks from `data` (JSONL or a `.json` list), or the 20 bundled problems.

    Rows without an id get `f"{stem}-{i}"` (i counts rows from 0), so ids are stable as
    long as the file is. `split`, when given, is recorded in each task's meta (a file is
    one split; pass the file of the split you want).
    """
    path = BUNDLED_MATH if data is None else Path(data).expanduser()
    if not path.is_file():
        raise DataNotFound(f"math task file not found: {path}. Pass data_dir=PATH "
                           "(load_math_tasks: data=PATH) to a JSONL file (skyhub, GSM8K, MATH "
                           "or MATH-500 rows) or omit data_dir for the bundled problems")
    source = "skyhub" if data is None else path.stem
    tasks = []
    for i, (lineno, row) in enumerate(read_rows(path)):
        task = _task(row, default_id=f"{path.stem}-{i}", source=source,
                     where=f"{path}:{lineno}")
        if split is not None:
            task.meta.setdefault("split", split)
        tasks.append(task)
    return TaskSet(tasks, name=path.stem if split is None else f"{path.stem}-{split}")
