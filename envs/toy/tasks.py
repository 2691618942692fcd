"""Task sets for the toy envs: generated from a seed, or loaded from skyhub's JSONL format."""

from __future__ import annotations

import random
from pathlib import Path

from skyhub.errors import UsageError
from skyhub.task import Task, TaskSet, load_jsonl

DATA_DIR = Path(__file__).parent / "data"


def arith_tasks(n: int = 1000, seed: int = 0, max_operand: int = 50,
                split: str = "train") -> TaskSet:
    """`n` additions/subtractions/multiplications of operands up to `max_operand`."""
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
        op = rng.choice("+-*")
        answer = {"+": a + b, "-": a - b, "*": a * b}[op]
        tasks.append(Task(id=f"arith-{seed}-{i}", prompt=f"What is {a} {op} {b}?",
                          answer=str(answer), meta={"op": op, "split": split}))
    return TaskSet(tasks, name=f"toy-arith(seed={seed})")


_WORDS = ("amber", "birch", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo",
          "juniper", "krypton", "lotus", "marble", "nectar", "onyx", "pepper", "quartz", "raven")


def lookup_tasks(n: int = 1000, seed: int = 0, table_size: int = 8,
                 split: str = "train") -> TaskSet:
    """`n` tables of `table_size` random key -> word pairs, each asking for one key's value."""
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        keys = rng.sample(range(100, 1000), table_size)
        table = {f"k{k}": rng.choice(_WORDS) for k in keys}
        key = rng.choice(sorted(table))
        tasks.append(Task(id=f"lookup-{seed}-{i}", prompt=f"What is the value stored under key "
                          f"{key}?", answer=table[key],
                          meta={"key": key, "table": table, "split": split}))
    return TaskSet(tasks, name=f"toy-lookup(seed={seed})")


#: Keys of `recall_tasks` tables: few and distinct from the words, so a tiny tokenizer gives
#: each key and each word one token.
_KEYS = ("alfa", "bravo", "charlie", "echo", "golf", "hotel", "kilo", "lima")


def recall_tasks(n: int = 1000, seed: int = 0, table_size: int = 4,
                 split: str = "train", n_words: int = len(_WORDS)) -> TaskSet:
    """`n` tables of `table_size` key -> word pairs (words from the first `n_words` of 18);
    the task is one key's word. The prompt shows the word itself ("word: raven");
    `RecallEnv(hops=2)` shows only the key."""
    if not 2 <= n_words <= len(_WORDS):
        raise UsageError(f"n_words must be between 2 and {len(_WORDS)}, got {n_words}")
    rng = random.Random(seed)
    tasks = []
    words = _WORDS[:n_words]
    for i in range(n):
        table = {k: rng.choice(words) for k in rng.sample(_KEYS, table_size)}
        key = rng.choice(sorted(table))
        tasks.append(Task(id=f"recall-{seed}-{i}", prompt=f"word: {table[key]}",
                          answer=table[key], meta={"key": key, "table": table, "split": split}))
    return TaskSet(tasks, name=f"toy-recall(seed={seed})")


#: The bundled `dev` split: 100 tasks per env made once by `write_dev_split` (seed 10_000),
#: so evaluations compare on a fixed set that training (`split="train"`, generated from
#: `seed`) does not see unless it uses seed 10_000.
DEV_SEED, DEV_SIZE = 10_000, 100


def dev_file(kind: str) -> Path:
    return DATA_DIR / f"{kind}-dev.jsonl"


def load_tasks(kind: str, *, split: str = "train", tasks_file: str | Path | None = None,
               n: int = 1000, seed: int = 0, **options: int) -> TaskSet:
    """Tasks from `tasks_file` (JSONL) when given; else the bundled `dev` split, or `n`
    `train` tasks generated from `seed`."""
    if tasks_file is not None:
        return load_jsonl(tasks_file)
    if split == "dev":
        return load_jsonl(dev_file(kind), name=f"toy-{kind}(dev)")
    if split != "train":
        raise UsageError(f"split must be 'train' (generated) or 'dev' (bundled), got {split!r}")
    make = {"arith": arith_tasks, "lookup": lookup_tasks, "recall": recall_tasks}[kind]
    return make(n, seed, **options)


def write_dev_split() -> None:
    """Regenerate the bundled dev files (`python -m skyhub.envs.toy.tasks`)."""
    import json

    DATA_DIR.mkdir(exist_ok=True)
    for kind, make in (("arith", arith_tasks), ("lookup", lookup_tasks),
                       ("recall", recall_tasks)):
        with dev_file(kind).open("w", encoding="utf-8") as f:
            for t in make(DEV_SIZE, DEV_SEED, split="dev"):
                f.write(json.dumps(t.to_dict()) + "\n")


if __name__ == "__main__":
    write_dev_split()
