"""How a solution is scored: pure functions over query results (easy to unit-test).

Two comparisons, named for where they come from:
- `skyrl` (SkyRL-SQL's training reward, skyrl-gym's `text2sql`): the solution is right when
  the *set* of its result rows equals the set of the gold rows (Python's frozenset
  equality: row order and duplicates do not count, column order does: (1, 'a') != ('a', 1);
  1 == 1.0). The format rules that make a reward -1 are protocol.py's.
- `spider_exec` (Spider's official execution match, `evaluation.py --etype exec` of
  taoyds/test-suite-sql-eval, which SkyRL-SQL's published numbers use): rows compare as
  multisets (duplicates count), in order only when the gold contains `order by` anywhere,
  under any permutation of the columns; both queries are first processed as the evaluator
  does (DISTINCT removed, `> =` closed up, ...). The rules and why: spider_eval.py.
So `spider_exec` is stricter about duplicates and ordering and looser about column order
and DISTINCT.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from skyhub.errors import UsageError

from .spider_eval import order_matters, results_match

Rows = Sequence[tuple]


def skyrl_match(pred: Rows, gold: Rows) -> bool:
    return set(map(tuple, pred)) == set(map(tuple, gold))


def has_order_by(sql: str) -> bool:
    """Whether a query has an ORDER BY outside parentheses and string literals. Not the
    official evaluator's test (`spider_eval.order_matters`: `order by` anywhere in the
    text); engine comparisons use it to tell a top-level ordering apart."""
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
    """The official evaluator's comparison of two results (`spider_eval.results_match`)."""
    return results_match(gold, pred, order_matters=order_matters)


def score(kind: str, pred: Rows, gold: Rows, gold_sql: str) -> bool:
    """Whether `pred` answers like `gold` under comparison `kind` (`skyrl`/`spider_exec`);
    `gold_sql` is the dataset's gold query (for spider_exec, whether order counts)."""
    if kind == "skyrl":
        return skyrl_match(pred, gold)
    if kind == "spider_exec":
        return results_match(gold, pred, order_matters=order_matters(gold_sql))
    raise UsageError(f"reward must be 'skyrl' or 'spider_exec', got {kind!r}")
