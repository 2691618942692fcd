"""How a solution is scored: pure functions over query results (easy to unit-test).

Two comparisons, named for where they come from:
- `skyrl` (SkyRL-SQL's training reward): the solution is right when the *set* of its result
  rows equals the set of the gold rows. Row order, duplicates and a different column order
  that changes tuples count as written: (1, 'a') != ('a', 1).
- `spider_exec` (Spider's execution accuracy, as in the official test-suite evaluation):
  rows are compared as *multisets* (duplicates matter), in order only when the gold query has
  a top-level ORDER BY, and a permutation of the columns is accepted (the evaluator does
  that, since `SELECT a, b` and `SELECT b, a` answer the same question).
So `spider_exec` is stricter about duplicates and ordering and looser about column order.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Sequence

Rows = Sequence[tuple]


def skyrl_match(pred: Rows, gold: Rows) -> bool:
    return set(map(tuple, pred)) == set(map(tuple, gold))


def has_order_by(sql: str) -> bool:
    """Whether a query has an ORDER BY outside parentheses and string literals."""
    s = re.sub(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"", "''", sql)
    depth, i, low = 0, 0, s.lower()
    while i < len(low):
        c = low[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth = max(0, depth - 1)
        elif depth == 0 and low.startswith("order", i) and re.match(r"order\s+by\b", low[i:]):
            before = low[i - 1] if i else " "
            if not (before.isalnum() or before == "_"):
                return True
        i += 1
    return False


def spider_exec_match(pred: Rows, gold: Rows, *, order_matters: bool) -> bool:
    pred, gold = [tuple(r) for r in pred], [tuple(r) for r in gold]
    if len(pred) != len(gold):
        return False
    if not gold:
        return True
    width = len(gold[0])
    if any(len(r) != width for r in pred):
        return False
    if width > 8:  # permutations explode; compare as written (no Spider gold is this wide)
        perms: Sequence[tuple[int, ...]] = [tuple(range(width))]
    else:
        perms = list(itertools.permutations(range(width)))
    gold_counter = None if order_matters else Counter(gold)
    gold_columns = [Counter(r[j] for r in gold) for j in range(width)]
    for perm in perms:
        # cheap filter: each permuted column must hold the same values as the gold column
        if any(Counter(r[p] for r in pred) != gold_columns[j] for j, p in enumerate(perm)):
            continue
        permuted = [tuple(r[p] for p in perm) for r in pred]
        if order_matters and permuted == gold:
            return True
        if not order_matters and Counter(permuted) == gold_counter:
            return True
    return False


def score(kind: str, pred: Rows, gold: Rows, gold_sql: str) -> bool:
    """Whether `pred` answers like `gold` under comparison `kind` (`skyrl`/`spider_exec`)."""
    if kind == "skyrl":
        return skyrl_match(pred, gold)
    if kind == "spider_exec":
        return spider_exec_match(pred, gold, order_matters=has_order_by(gold_sql))
    raise ValueError(f"reward must be 'skyrl' or 'spider_exec', got {kind!r}")
