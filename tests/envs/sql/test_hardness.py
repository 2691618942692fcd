"""Spider's difficulty levels from gold SQL text: each counting rule of the official
`eval_hardness` on hand-written queries, exact agreement with the official parser's output
kept in the bundled dev.json, and the level distribution of the bundled dev subset."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest

from skyhub.envs.sql.datasets import load
from skyhub.envs.sql.datasets.spider import BUNDLED_DIR
from skyhub.envs.sql.hardness import (
    LEVELS,
    SpiderCounts,
    hardness_of_counts,
    spider_counts,
    spider_hardness,
)

DEV = json.loads((BUNDLED_DIR / "dev.json").read_text(encoding="utf-8"))

# (sql, (component1, component2, others), level)
CASES = [
    # easy: at most one component-1 item, nothing else
    ("SELECT count(*) FROM singer", (0, 0, 0), "easy"),
    ("SELECT name FROM singer WHERE age > 20", (1, 0, 0), "easy"),
    ("select distinct country from singer order by country;", (1, 0, 0), "easy"),
    # medium: two SELECT columns (others 1), or a JOIN plus a WHERE (component 1 = 2)
    ("SELECT name , age FROM singer WHERE age > 20", (1, 0, 1), "medium"),
    ("SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.sid "
     "WHERE T2.year = 2014", (2, 0, 0), "medium"),
    ("SELECT count(*) , max(age) FROM singer", (0, 0, 2), "medium"),
    # hard: three component-1 items, one nesting alone, or many "others" with few components
    ("SELECT name FROM singer WHERE age > 20 ORDER BY age LIMIT 1", (3, 0, 0), "hard"),
    ("SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer)", (1, 1, 0), "hard"),
    ("SELECT name FROM a INTERSECT SELECT name FROM b", (0, 1, 0), "hard"),
    ("SELECT a , count(*) FROM t WHERE x = 1 AND y = 2 GROUP BY a , b", (2, 0, 3), "hard"),
    # extra: nesting plus anything, or four component-1 items
    ("SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer) ORDER BY age",
     (2, 1, 0), "extra"),
    ("SELECT T1.name FROM a AS T1 JOIN b AS T2 ON T1.id = T2.id WHERE T2.x = 1 "
     "ORDER BY T1.y LIMIT 1", (4, 0, 0), "extra"),
    # OR and LIKE (NOT LIKE too) are component 1; two conditions are "others"; NOT counts as
    # an aggregate in the official script
    ("SELECT name FROM t WHERE a LIKE '%x%' OR b NOT LIKE 'y'", (4, 0, 1), "extra"),
    # BETWEEN's AND joins no conditions
    ("SELECT name FROM t WHERE a BETWEEN 1 AND 5", (1, 0, 0), "easy"),
    ("SELECT name FROM t WHERE a BETWEEN 1 AND 5 AND b = 2", (1, 0, 1), "medium"),
    # string literals are opaque, whatever they hold
    ("SELECT name FROM t WHERE name = 'x OR y LIKE (SELECT' AND b = \"a, b\"", (1, 0, 1),
     "medium"),
    # only the outermost query counts: the subquery's clauses add nothing
    ("SELECT name FROM t WHERE id IN (SELECT id FROM u WHERE a = 1 OR b LIKE 'x' "
     "ORDER BY c LIMIT 1)", (1, 1, 0), "hard"),
    # a subquery in FROM is a table unit, not a nesting (Spider rates this easy)
    ("SELECT count(*) FROM (SELECT DISTINCT a FROM t WHERE b = 1)", (0, 0, 0), "easy"),
    ("SELECT count(*) FROM (SELECT a FROM t) AS x JOIN u ON x.a = u.a", (1, 0, 0), "easy"),
    # one set operator counts once, and the query after it is not counted
    ("SELECT a FROM t UNION SELECT a FROM u UNION SELECT a FROM v", (0, 1, 0), "hard"),
    ("SELECT a FROM t EXCEPT SELECT a , b FROM u WHERE x = 1 ORDER BY a LIMIT 1", (0, 1, 0),
     "hard"),
    # two nested queries in WHERE
    ("SELECT a FROM t WHERE b IN (SELECT b FROM u) AND c NOT IN (SELECT c FROM v)",
     (1, 2, 1), "extra"),
    # HAVING: its aggregate is not counted, its AND is (official quirk)
    ("SELECT a FROM t GROUP BY a HAVING count(*) > 1", (1, 0, 0), "easy"),
    ("SELECT a , count(*) FROM t GROUP BY a HAVING count(*) > 1 AND sum(b) > 2", (1, 0, 2),
     "medium"),
    # ORDER BY aggregates count
    ("SELECT a , count(*) FROM t GROUP BY a ORDER BY count(*) DESC LIMIT 1", (3, 0, 2),
     "hard"),
    # NOT IN counts as an aggregate: with count(*) that makes two
    ("SELECT count(*) FROM t WHERE a NOT IN (SELECT a FROM u)", (1, 1, 1), "extra"),
    # Spider's parser swallows what follows a column value up to the next AND or keyword
    ("SELECT T1.a FROM t AS T1 JOIN u AS T2 ON T1.a = T2.b OR T1.a = T2.c", (1, 0, 0),
     "easy"),
    ("SELECT a FROM t WHERE a = 1 OR a = 2", (2, 0, 1), "medium"),
    # comments, case and a trailing semicolon change nothing
    ("select NAME from SINGER -- the oldest\n where AGE > 20 /* adults */ ;", (1, 0, 0),
     "easy"),
]


@pytest.mark.parametrize(("sql", "counts", "level"), CASES)
def test_counts_and_level_of_hand_written_queries(sql: str, counts: tuple[int, int, int],
                                                  level: str) -> None:
    assert spider_counts(sql) == SpiderCounts(*counts)
    assert spider_hardness(sql) == level


def test_thresholds_are_the_official_ones() -> None:
    assert hardness_of_counts(SpiderCounts(1, 0, 0)) == "easy"
    assert hardness_of_counts(SpiderCounts(1, 0, 2)) == "medium"  # others <= 2, comp1 <= 1
    assert hardness_of_counts(SpiderCounts(2, 0, 1)) == "medium"  # comp1 <= 2, others < 2
    assert hardness_of_counts(SpiderCounts(2, 0, 2)) == "extra"   # neither medium nor hard
    assert hardness_of_counts(SpiderCounts(2, 0, 3)) == "hard"    # others > 2, comp1 <= 2
    assert hardness_of_counts(SpiderCounts(3, 0, 2)) == "hard"    # 2 < comp1 <= 3
    assert hardness_of_counts(SpiderCounts(1, 1, 0)) == "hard"    # one nesting, nothing else
    assert hardness_of_counts(SpiderCounts(0, 2, 0)) == "extra"
    assert hardness_of_counts(SpiderCounts(4, 0, 0)) == "extra"


def test_odd_text_does_not_crash() -> None:
    for sql in ("", "SELECT", "SELECT (a FROM t", "SELECT a) FROM t WHERE", "WITH x AS "
                "(SELECT 1) SELECT * FROM x", "SELECT 'unterminated", "DELETE FROM t"):
        assert spider_hardness(sql) in LEVELS


def _official_counts(sql: dict[str, Any]) -> SpiderCounts:
    """The three counts of `eval_hardness` (taoyds/spider evaluation.py) computed from the dict
    Spider's parser produced, as stored in dev.json's `sql` field: an independent
    reimplementation over the parsed form, to check the text-based one against."""
    like = 9  # index of 'like' in the parser's WHERE_OPS
    frm, where, having = sql["from"]["conds"], sql["where"], sql["having"]
    units = frm[::2] + where[::2] + having[::2]
    links = frm[1::2] + where[1::2] + having[1::2]
    c1 = sum(bool(sql[k]) for k in ("where", "groupBy", "orderBy"))
    c1 += sql["limit"] is not None
    c1 += max(len(sql["from"]["table_units"]) - 1, 0)
    c1 += links.count("or") + sum(u[1] == like for u in units)
    c2 = sum(isinstance(u[3], dict) + isinstance(u[4], dict) for u in units)
    c2 += sum(sql[k] is not None for k in ("intersect", "except", "union"))
    # "aggregates": the first field of each unit, whatever it means there
    aggs = sum(u[0] != 0 for u in sql["select"][1])
    aggs += sum(bool(u[0]) for u in where[::2])  # not_op
    aggs += sum(u[0] != 0 for u in sql["groupBy"])
    if sql["orderBy"]:
        aggs += sum(cu[0] != 0 for vu in sql["orderBy"][1] for cu in vu[1:] if cu)
    aggs += sum(isinstance(u, str) or bool(u[0]) for u in having)  # connectors and not_op
    others = (aggs > 1) + (len(sql["select"][1]) > 1) + (len(where) > 1)
    others += len(sql["groupBy"]) > 1
    return SpiderCounts(c1, c2, others)


def test_text_counts_match_the_official_parse_of_every_dev_question() -> None:
    wrong = [(ex["query"], spider_counts(ex["query"]), _official_counts(ex["sql"]))
             for ex in DEV if spider_counts(ex["query"]) != _official_counts(ex["sql"])]
    assert not wrong, wrong[:5]


def test_dev_subset_distribution_is_spiders() -> None:
    levels = Counter(spider_hardness(ex["query"]) for ex in DEV)
    assert levels == {"easy": 232, "medium": 416, "hard": 160, "extra": 164}
    # the official full dev set (1034 questions, wta_1's 62 included): same proportions
    full = {"easy": 248, "medium": 446, "hard": 174, "extra": 166}
    for level in LEVELS:
        assert abs(levels[level] / len(DEV) - full[level] / 1034) < 0.03, level
    assert max(levels, key=levels.__getitem__) == "medium"


def test_spider_tasks_carry_their_difficulty_cheaply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYHUB_DATA", raising=False)  # the bundled subset, not a download
    t0 = time.perf_counter()
    levels = [spider_hardness(ex["query"]) for ex in DEV]
    assert time.perf_counter() - t0 < 1.0  # about 0.04 s for the 972 queries
    tasks = load("spider").tasks
    assert [t.meta["difficulty"] for t in tasks] == levels
