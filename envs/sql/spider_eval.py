"""Spider's official execution match, as SkyRL-SQL and most Text-to-SQL papers score it.

The official evaluator (taoyds/test-suite-sql-eval, `evaluation.py --etype exec`) calls
`eval_exec_match(db, pred.replace("value", "1"), gold, plug_value=False, keep_distinct=False)`.
Its rules, reimplemented here (`prediction_query`, `gold_query`, `order_matters`,
`results_match`), and why they are what they are:

- `value` -> `1` in the prediction (every occurrence, case-sensitive): Spider's older models
  wrote the placeholder `value` for literals; the evaluator plugs in 1 so the query runs.
- `> =`, `< =`, `! =` are closed up in both queries (tokenisers of older models split them).
- DISTINCT is removed from both queries (`keep_distinct=False`): Spider's annotators used
  it inconsistently, so neither adding nor dropping it changes a verdict. The words removed
  are the SQL tokens `distinct` in any case, never text inside quotes or comments; the
  evaluator reads the text with sqlparse, which also keeps only the *first statement*
  (`SELECT ...; DROP ...` is judged by its SELECT).
- `YEAR(CURDATE())` is replaced by 2020 (a MySQL-ism in some golds).
- rows compare as a multiset (duplicates count) and columns may come in any order (a column
  permutation that makes the results equal is searched for: `SELECT a, b` answers what
  `SELECT b, a` answers); row order counts only when the gold contains `order by` (lower
  case, one space) *anywhere* in its text, subqueries included.
- two empty results are equal whatever their columns; a prediction that fails to run, or
  is empty (no statement at all), is wrong.

Before the permutation search the evaluator compares each row's values sorted by
`str(value) + str(type(value))` (a quick rejection); that test is part of its verdict (it
can reject 1 vs 1.0 when the sort puts them at different places), so it is kept.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

Rows = Sequence[tuple]

#: sqlparse's view of a query, as far as the rules above need it: comments (`--` and `# `
#: to the end of the line, `/* */`), quoted text (with '' and \' escapes), [bracketed]
#: names, placeholders and @names, words (which may contain $ and #), and ( ) ;
_TOKEN = re.compile(
    r"(?P<skip>--[^\r\n]*|\# [^\r\n]*|/\*.*?\*/"
    r"|'(?:''|\\'|[^'])*'|\"(?:\"\"|\\\"|[^\"])*\"|`(?:``|[^`])*`"
    r"|(?<![\w\])])\[[^\]\[]+\]|(?<!\w)[$:?]\w+|[@#]\w+)"
    r"|(?P<word>\w[\w$#]*)|(?P<punct>[;()])", re.S)
_CUR_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.I)


def close_operators(sql: str) -> str:
    return sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")


def first_statement_without_distinct(sql: str) -> str | None:
    """The first statement of `sql` (up to its first `;` outside parentheses, quotes and
    comments) with every DISTINCT token removed; None when `sql` holds no statement."""
    if not sql.strip():
        return None
    out, last, depth = [], 0, 0
    for m in _TOKEN.finditer(sql):
        kind = m.lastgroup
        if kind == "word" and m.group().lower() == "distinct":
            out.append(sql[last:m.start()])
            last = m.end()
        elif kind == "punct":
            c = m.group()
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            elif depth <= 0:  # ';' ends the first statement
                out.append(sql[last:m.end()])
                return "".join(out)
    out.append(sql[last:])
    return "".join(out)


def prediction_query(pred: str, *, placeholders: bool = True) -> str | None:
    """The query the official evaluator runs for prediction `pred`, None when it holds no
    statement (then it is wrong). `placeholders=False` skips the `value` -> `1` substitution
    (for engines whose SQL has words such as DuckDB's any_value)."""
    if placeholders:
        pred = pred.replace("value", "1")
    q = first_statement_without_distinct(close_operators(pred))
    return None if q is None else _CUR_YEAR.sub("2020", q)


def gold_query(gold: str) -> str:
    """The query the official evaluator runs for a gold query (in the gold's dialect)."""
    q = first_statement_without_distinct(close_operators(gold))
    return _CUR_YEAR.sub("2020", q if q is not None else gold)


def order_matters(gold: str) -> bool:
    """Whether row order counts: the processed gold contains `order by` anywhere."""
    q = first_statement_without_distinct(close_operators(gold))
    return "order by" in (q if q is not None else gold).lower()


def _unordered(row: tuple) -> tuple:
    return tuple(sorted(row, key=lambda v: str(v) + str(type(v))))


def results_match(gold: Rows, pred: Rows, *, order_matters: bool) -> bool:
    """The evaluator's verdict on two results: equal as bags of rows (as lists when
    `order_matters`) under some permutation of the prediction's columns."""
    gold, pred = [tuple(r) for r in gold], [tuple(r) for r in pred]
    if not gold and not pred:
        return True
    if len(gold) != len(pred):
        return False
    width = len(gold[0])
    if len(pred[0]) != width:
        return False
    g_un, p_un = [_unordered(r) for r in gold], [_unordered(r) for r in pred]
    if (g_un != p_un) if order_matters else (set(g_un) != set(p_un)):
        return False
    if width == 1:
        return gold == pred if order_matters else Counter(gold) == Counter(pred)
    return _find_permutation(gold, pred, width, order_matters)


def _find_permutation(gold: list[tuple], pred: list[tuple], width: int,
                      order_matters: bool) -> bool:
    """Whether some assignment of the prediction's columns to the gold's makes the results
    equal. Backtracking over gold columns, each given a prediction column whose values all
    occur in it; a partial assignment survives only while the projected rows still match
    (a necessary condition), and identical prediction columns are tried in one order only.
    The evaluator enumerates the same candidates more bluntly; the verdict is the same."""
    gold_sets = [{r[i] for r in gold} for i in range(width)]
    pred_cols = [tuple(r[j] for r in pred) for j in range(width)]
    twin = {j: min(k for k in range(width) if pred_cols[k] == pred_cols[j])
            for j in range(width)}
    cands = [[j for j in range(width) if all(v in gold_sets[i] for v in pred_cols[j])]
             for i in range(width)]
    chosen: list[int] = []
    used: set[int] = set()

    def projected_match(k: int) -> bool:
        g = [r[:k] for r in gold]
        p = [tuple(r[j] for j in chosen) for r in pred]
        return g == p if order_matters else Counter(g) == Counter(p)

    def search(i: int) -> bool:
        if i == width:
            return True
        for j in cands[i]:
            if j in used:
                continue
            # among identical columns, take the lowest unused one first
            if twin[j] != j and any(k not in used for k in range(width)
                                    if twin[k] == twin[j] and k < j):
                continue
            chosen.append(j)
            used.add(j)
            if projected_match(i + 1) and search(i + 1):
                return True
            chosen.pop()
            used.discard(j)
        return False

    return search(0)
