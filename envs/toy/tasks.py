"""Task sets for the toy envs: generated from a seed, or loaded from skyhub's JSONL format."""

from __future__ import annotations

import random
from pathlib import Path

from skyhub.task import Task, TaskSet, load_jsonl

DATA_DIR = Path(__file__).parent / "data"


def arith_tasks(n: int = 1000, seed: int = 0, max_operand: int = 50) -> TaskSet:
    """`n` additions/subtractions/multiplications of operands up to `max_operand`."""
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
        op = rng.choice("+-*")
        answer = {"+": a + b, "-": a - b, "*": a * b}[op]
        tasks.append(Task(id=f"arith-{seed}-{i}", prompt=f"What is {a} {op} {b}?",
                          answer=str(answer), meta={"op": op, "split": "synthetic"}))
    return TaskSet(tasks, name=f"toy-arith(seed={seed})")


_WORDS = ("amber", "birch", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo",
          "juniper", "krypton", "lotus", "marble", "nectar", "onyx", "pepper", "quartz", "raven")


def lookup_tasks(n: int = 1000, seed: int = 0, table_size: int = 8) -> TaskSet:
    """`n` tables of `table_size` random key -> word pairs, each asking for one key's value."""
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        keys = rng.sample(range(100, 1000), table_size)
        table = {f"k{k}": rng.choice(_WORDS) for k in keys}
        key = rng.choice(sorted(table))
        tasks.append(Task(id=f"lookup-{seed}-{i}", prompt=f"What is the value stored under key "
                          f"{key}?", answer=table[key],
                          meta={"key": key, "table": table, "split": "synthetic"}))
    return TaskSet(tasks, name=f"toy-lookup(seed={seed})")


def load_tasks(kind: str, tasks_file: str | Path | None, n: int, seed: int) -> TaskSet:
    """Tasks from `tasks_file` (JSONL) when given, else generated."""
    if tasks_file is not None:
        return load_jsonl(tasks_file)
    return arith_tasks(n, seed) if kind == "arith" else lookup_tasks(n, seed)
