"""`reward="spider_exec"` is Spider's official execution match: it agrees with the official
evaluator (taoyds/test-suite-sql-eval, `evaluation.py --etype exec`) on all 3,799
(database, gold, prediction) triples of tests/envs/sql/data/spider-exec-verdicts (its README
says how they were made), scored through the env's own path (`SQLEnv.judge`, as the final
step scores a solution) on the bundled databases; plus the rules one by one."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import skyhub
from skyhub.envs.sql.spider_eval import (
    first_statement_without_distinct,
    order_matters,
    prediction_query,
    results_match,
)
from skyhub.task import Task

# in the repository (tests/envs/sql/data/), so the test runs on any clone
VERDICTS = Path(__file__).parent / "data" / "spider-exec-verdicts" / "verdicts.jsonl"


def test_agrees_with_every_official_verdict() -> None:
    if not VERDICTS.is_file():
        pytest.fail(f"{VERDICTS} is missing (the official verdicts this test checks against)")
    cases = [json.loads(line) for line in VERDICTS.read_text().splitlines() if line.strip()]
    assert len(cases) == 3799
    disagree: Counter[str] = Counter()
    examples = []
    with skyhub.make("sql-spider", reward="spider_exec") as env:
        for i, c in enumerate(cases):
            env.reset(options={"task": Task(id=f"verdict-{i}", prompt="?", answer=c["gold"],
                                            meta={"db_id": c["db_id"]})})
            ours, _ = env.judge(c["pred"])
            if int(ours) != c["official"]:
                disagree[c["kind"]] += 1
                examples.append((c["kind"], c["official"], c["gold"], c["pred"]))
    print(f"\n{len(cases) - sum(disagree.values())} of {len(cases)} official verdicts agree; "
          f"disagreements by kind: {dict(disagree)}")
    for e in examples[:10]:
        print("  ", *e)
    assert not disagree


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT DISTINCT name FROM t", "SELECT  name FROM t"),
    ("select count(distinct x) from t", "select count( x) from t"),
    ("SELECT 'distinct' FROM t -- distinct", "SELECT 'distinct' FROM t -- distinct"),
    ('SELECT "DISTINCT", distinct_id FROM t', 'SELECT "DISTINCT", distinct_id FROM t'),
    ("SELECT a FROM t; DROP TABLE t", "SELECT a FROM t;"),
    ("SELECT (SELECT 1; ) FROM t", "SELECT (SELECT 1; ) FROM t"),  # ';' inside parentheses
    ("SELECT ';' FROM t; SELECT 2", "SELECT ';' FROM t;"),
])
def test_distinct_goes_and_only_the_first_statement_stays(sql: str, expected: str) -> None:
    assert first_statement_without_distinct(sql) == expected


def test_prediction_processing() -> None:
    assert prediction_query("SELECT a FROM t WHERE b > = 3 AND c ! = 'value'") == \
        "SELECT a FROM t WHERE b >= 3 AND c != '1'"
    assert prediction_query("SELECT 1 WHERE YEAR(CURDATE()) > 2000") == \
        "SELECT 1 WHERE 2020> 2000"
    assert prediction_query("") is None and prediction_query("  \n") is None
    assert prediction_query("SELECT value FROM t", placeholders=False) == "SELECT value FROM t"


def test_order_counts_when_the_gold_says_order_by_anywhere() -> None:
    assert order_matters("SELECT a FROM (SELECT a FROM t ORDER BY a LIMIT 3)")
    assert order_matters("SELECT a FROM t WHERE b = 'x order by y'")  # even inside a string
    assert not order_matters("SELECT a FROM t ORDER  BY a")  # two spaces: not the text
    gold, pred = [(1,), (2,)], [(2,), (1,)]
    assert results_match(gold, pred, order_matters=False)
    assert not results_match(gold, pred, order_matters=True)


def test_rows_compare_as_bags_under_a_column_permutation() -> None:
    assert results_match([(1, "a"), (2, "b")], [("b", 2), ("a", 1)], order_matters=False)
    assert results_match([(1, "a"), (2, "b")], [("a", 1), ("b", 2)], order_matters=True)
    assert not results_match([(1,), (1,), (2,)], [(1,), (2,), (2,)], order_matters=False)
    assert not results_match([(1,)], [(1,), (1,)], order_matters=False)
    assert results_match([], [], order_matters=False)
    assert not results_match([], [(1,)], order_matters=False)
    # six columns of the same values: one permutation pairs them up
    gold = [(i, i + 1, i + 2, 0, 0, 0) for i in range(5)]
    pred = [(0, r[2], 0, r[0], 0, r[1]) for r in gold]
    assert results_match(gold, pred, order_matters=True)
    assert not results_match(gold, [(*r[:5], 1) for r in pred], order_matters=False)


def test_the_quick_rejection_keeps_the_evaluators_verdict_on_int_vs_float() -> None:
    # each row's values sorted by str(v) + type: (1, '1.5') -> ('1.5', 1) but
    # (1.0, '1.5') stays as is, so the evaluator rejects what a permutation would accept
    assert not results_match([(1, "1.5")], [(1.0, "1.5")], order_matters=False)
    assert results_match([(2, "a")], [(2.0, "a")], order_matters=False)


def test_empty_and_failing_predictions_are_wrong() -> None:
    with skyhub.make("sql-spider", reward="spider_exec") as env:
        task = next(t for t in env.tasks if env.reset(options={"task_id": t.id})
                    and not env.gold_result().rows)
        env.reset(options={"task_id": task.id})
        assert env.judge("")[0] is False
        assert env.judge("SELEC nothing")[0] is False
        assert env.judge(str(task.answer))[0] is True
