"""The two comparisons: SkyRL's set equality and Spider's execution accuracy."""

from __future__ import annotations

import pytest

from skyhub.envs.sql.reward import has_order_by, score, skyrl_match, spider_exec_match


def test_skyrl_compares_sets_of_rows() -> None:
    assert skyrl_match([(1,), (2,)], [(2,), (1,)])
    assert skyrl_match([(1,), (1,), (2,)], [(1,), (2,)])        # duplicates ignored
    assert not skyrl_match([(1, "a")], [("a", 1)])               # column order counts
    assert not skyrl_match([(1,)], [(1,), (2,)])


def test_spider_exec_compares_multisets_and_allows_column_permutations() -> None:
    assert spider_exec_match([(1, "a"), (2, "b")], [("b", 2), ("a", 1)], order_matters=False)
    assert not spider_exec_match([(1,), (1,), (2,)], [(1,), (2,), (2,)], order_matters=False)
    assert not spider_exec_match([(1,), (2,)], [(1,), (2,), (2,)], order_matters=False)


def test_spider_exec_checks_order_only_when_gold_orders() -> None:
    gold = "SELECT name FROM t ORDER BY age DESC"
    assert score("spider_exec", [("b",), ("a",)], [("b",), ("a",)], gold)
    assert not score("spider_exec", [("a",), ("b",)], [("b",), ("a",)], gold)
    assert score("spider_exec", [("a",), ("b",)], [("b",), ("a",)], "SELECT name FROM t")


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT a FROM t ORDER BY a", True),
    ("select a from t order   by a desc limit 3", True),
    ("SELECT a FROM (SELECT a FROM t ORDER BY a) AS s", False),   # only inside a subquery
    ("SELECT 'ORDER BY' FROM t", False),                          # inside a string
    ("SELECT border_by FROM t", False),
])
def test_has_order_by_looks_at_the_top_level_only(sql: str, expected: bool) -> None:
    assert has_order_by(sql) is expected


def test_the_comparisons_disagree_where_documented() -> None:
    # duplicates: SkyRL says right, Spider says wrong
    assert score("skyrl", [(1,), (1,)], [(1,)], "SELECT x FROM t")
    assert not score("spider_exec", [(1,), (1,)], [(1,)], "SELECT x FROM t")
    # swapped columns: SkyRL says wrong, Spider says right
    assert not score("skyrl", [("a", 1)], [(1, "a")], "SELECT x, y FROM t")
    assert score("spider_exec", [("a", 1)], [(1, "a")], "SELECT x, y FROM t")
    with pytest.raises(ValueError, match="reward"):
        score("bleu", [], [], "")
