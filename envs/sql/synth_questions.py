"""sql-synth's question templates: each draws a question and its gold SQL from one generated
database, at one difficulty (see synth.py for what the generator guarantees)."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

from skyhub.errors import SkyhubError

from .synth_schemas import Col, Table

LEVELS = ("easy", "medium", "hard")
MAX_TRIES = 12  # redraws of a question whose gold result is empty
Draft = tuple[str, str]  # (question, gold SQL)
NUM = ("int", "money")


class DB:
    """One generated database as the templates see it: schema, joins, distinct values."""

    def __init__(self, path: Path, tables: tuple[Table, ...]) -> None:
        self.con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        self.tables = tables
        self.table = {t.name: t for t in tables}
        #: (child, fk column, parent) for every foreign key
        self.edges = [(t, c, self.table[c.ref]) for t in tables for c in t.cols if c.kind == "fk"]
        self._values: dict[str, list] = {}

    def values(self, sql: str) -> list:
        """The first column of `sql`'s rows (cached; callers put ORDER BY in `sql`, so that
        a value drawn from the list is the same in every process)."""
        if sql not in self._values:
            self._values[sql] = [r[0] for r in self.con.execute(sql)]
        return self._values[sql]

    def distinct(self, t: Table, c: Col) -> list:
        return self.values(f"SELECT DISTINCT {c.name} FROM {t.name} ORDER BY 1")

    def threshold(self, t: Table, c: Col, rng: random.Random, high: bool = False) -> float:
        """A value inside the column's range, so "greater than" (or with `high`, "less than")
        keeps between about a fifth and four fifths of the rows."""
        vals = self.distinct(t, c)
        lo, hi = (len(vals) * 2 // 5, len(vals) * 4 // 5) if high else (len(vals) // 5,
                                                                        len(vals) * 3 // 5)
        v = vals[rng.randint(lo, max(lo, hi - 1))]
        if c.kind != "money":
            return v
        return int(round(v, 2 - len(str(round(v))))) if v >= 100 else round(v)  # 104781 -> 100000


def _cols(t: Table, *kinds: str) -> list[Col]:
    return [c for c in t.cols if c.kind in kinds]


def _ident(t: Table) -> Col:
    """What a question asks for to name a row: its name column, else its key."""
    return (_cols(t, "name") or [t.cols[0]])[0]


def _lit(v: object) -> str:
    return "'" + v.replace("'", "''") + "'" if isinstance(v, str) else repr(v)


def _say(v: object) -> str:
    return f"'{v}'" if isinstance(v, str) else str(v)


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _cond(db: DB, t: Table, rng: random.Random) -> tuple[str, str]:
    """A filter on one of `t`'s columns with a value from its data: (words, SQL)."""
    c = _col(t, rng, "cat", *NUM)
    if c.kind == "cat":
        v = rng.choice(db.distinct(t, c))
        return f"{c.label} {_say(v)}", f"{t.name}.{c.name} = {_lit(v)}"
    x = db.threshold(t, c, rng)
    return f"{c.label} greater than {x}", f"{t.name}.{c.name} > {x}"


def _on(db: DB, a: Table, b: Table) -> str:
    for child, fk, parent in db.edges:
        if {child.name, parent.name} == {a.name, b.name}:
            return f"JOIN {b.name} ON {child.name}.{fk.name} = {parent.name}.{parent.cols[0].name}"
    raise ValueError(f"no foreign key between {a.name} and {b.name}")


def _agg(c: Col, rng: random.Random, table: str = "") -> tuple[str, str]:
    """(words, SQL) for an aggregate of `c` (qualified by `table` if given); averages and
    money sums are rounded, so the gold result does not depend on summation order."""
    col = f"{table}.{c.name}" if table else c.name
    word, fn = rng.choice([("average", "AVG"), ("total", "SUM"), ("highest", "MAX"),
                           ("lowest", "MIN")])
    if fn == "AVG" or (fn == "SUM" and c.kind == "money"):
        return f"{word} {c.label} (rounded to 2 decimal places)", f"ROUND({fn}({col}), 2)"
    return f"{word} {c.label}", f"{fn}({col})"


class _NotApplicable(SkyhubError):
    """A template needs a table, column or join this database does not have: draw again."""


def _table(db: DB, rng: random.Random, *needs: tuple[str, ...]) -> Table:
    """A table with at least one column of each kind group in `needs`."""
    ok = [t for t in db.tables if all(_cols(t, *kinds) for kinds in needs)]
    if not ok:
        raise _NotApplicable
    return rng.choice(ok)


def _col(t: Table, rng: random.Random, *kinds: str) -> Col:
    if not _cols(t, *kinds):
        raise _NotApplicable
    return rng.choice(_cols(t, *kinds))


# easy: one table ------------------------------------------------------------------------
def filter_category(db: DB, rng: random.Random) -> Draft:
    t = _table(db, rng, ("cat",))
    c, i = _col(t, rng, "cat"), _ident(t)
    v = rng.choice(db.distinct(t, c))
    return (f"List the {i.label} of every {t.singular} whose {c.label} is {_say(v)}.",
            f"SELECT {i.name} FROM {t.name} WHERE {c.name} = {_lit(v)}")


def count_category(db: DB, rng: random.Random) -> Draft:
    t = _table(db, rng, ("cat",))
    c = _col(t, rng, "cat")
    v = rng.choice(db.distinct(t, c))
    return (f"How many {t.plural} have {c.label} {_say(v)}?",
            f"SELECT COUNT(*) FROM {t.name} WHERE {c.name} = {_lit(v)}")


def filter_number(db: DB, rng: random.Random) -> Draft:
    t = _table(db, rng, NUM)
    c, i, less = _col(t, rng, *NUM), _ident(t), rng.random() < 0.5
    x = db.threshold(t, c, rng, high=less)
    op, word = ("<", "less") if less else (">", "greater")
    return (f"List the {i.label} and {c.label} of the {t.plural} whose {c.label} is {word} than "
            f"{x}.", f"SELECT {i.name}, {c.name} FROM {t.name} WHERE {c.name} {op} {x}")


def top_k(db: DB, rng: random.Random) -> Draft:
    t = _table(db, rng, NUM)
    c, i, k = _col(t, rng, *NUM), _ident(t), rng.randint(3, 10)
    word, order = ("highest", "DESC") if rng.random() < 0.6 else ("lowest", "ASC")
    return (f"Which {k} {t.plural} have the {word} {c.label}? Return their {i.label} and "
            f"{c.label}, sorted by {c.label} {order.lower()}ending, ties broken by {i.label} "
            f"in ascending order.", f"SELECT {i.name}, {c.name} FROM {t.name} "
            f"ORDER BY {c.name} {order}, {i.name} ASC LIMIT {k}")


def date_year(db: DB, rng: random.Random) -> Draft:
    t = _table(db, rng, ("date",))
    d, i = _col(t, rng, "date"), _ident(t)
    y = rng.choice(db.values(f"SELECT DISTINCT substr({d.name}, 1, 4) FROM {t.name} ORDER BY 1"))
    return (f"List the {i.label} and {d.label} of the {t.plural} whose {d.label} is in {y}, "
            f"sorted by {d.label} from earliest to latest, ties broken by {i.label}.",
            f"SELECT {i.name}, {d.name} FROM {t.name} WHERE strftime('%Y', {d.name}) = '{y}' "
            f"ORDER BY {d.name}, {i.name}")


def distinct_values(db: DB, rng: random.Random) -> Draft:
    t = _table(db, rng, ("cat",), NUM)
    c, n = _col(t, rng, "cat"), _col(t, rng, *NUM)
    x = db.threshold(t, n, rng)
    return (f"Which different {c.label} values occur among {t.plural} whose {n.label} is "
            f"greater than {x}? List each once, in ascending order.",
            f"SELECT DISTINCT {c.name} FROM {t.name} WHERE {n.name} > {x} ORDER BY {c.name}")


def extreme(db: DB, rng: random.Random) -> Draft:
    t = _table(db, rng, ("cat",), NUM)
    c, n = _col(t, rng, "cat"), _col(t, rng, *NUM)
    v = rng.choice(db.distinct(t, c))
    word, sql = _agg(n, rng)
    return (f"What is the {word} of {t.plural} whose {c.label} is {_say(v)}?",
            f"SELECT {sql} FROM {t.name} WHERE {c.name} = {_lit(v)}")


# medium: GROUP BY, one join -------------------------------------------------------------
def group_count(db: DB, rng: random.Random) -> Draft:
    t = _table(db, rng, ("cat",))
    c = _col(t, rng, "cat")
    return (f"For each {c.label}, how many {t.plural} are there? Return the {c.label} and the "
            f"number of {t.plural}.", f"SELECT {c.name}, COUNT(*) FROM {t.name} GROUP BY {c.name}")


def group_aggregate(db: DB, rng: random.Random) -> Draft:
    t = _table(db, rng, ("cat",), NUM)
    c, n = _col(t, rng, "cat"), _col(t, rng, *NUM)
    word, sql = _agg(n, rng)
    return (f"For each {c.label} of {t.plural}, what is the {word}? Return the {c.label} and "
            f"that value.", f"SELECT {c.name}, {sql} FROM {t.name} GROUP BY {c.name}")


def group_having(db: DB, rng: random.Random) -> Draft:
    t = _table(db, rng, ("cat",))
    c = _col(t, rng, "cat")
    counts = db.values(f"SELECT COUNT(*) FROM {t.name} GROUP BY {c.name} ORDER BY 1")
    x = counts[rng.randint(len(counts) // 3, (len(counts) - 1) * 2 // 3)]
    return (f"Which {c.label} values have at least {x} {t.plural}? Return the {c.label} and "
            f"the number of {t.plural}.",
            f"SELECT {c.name}, COUNT(*) FROM {t.name} GROUP BY {c.name} HAVING COUNT(*) >= {x}")


def join_filter(db: DB, rng: random.Random) -> Draft:
    child, _, parent = rng.choice(db.edges)
    i, pi = _ident(child), _ident(parent)
    if rng.random() < 0.4:  # a parent by name, among those that have children
        v = rng.choice(db.values(f"SELECT DISTINCT {parent.name}.{pi.name} FROM {child.name} "
                                 f"{_on(db, child, parent)} ORDER BY 1"))
        words, cond = f"{pi.label} {_say(v)}", f"{parent.name}.{pi.name} = {_lit(v)}"
    else:
        words, cond = _cond(db, parent, rng)
    return (f"List the {i.label} of the {child.plural} whose {parent.singular} has {words}.",
            f"SELECT {child.name}.{i.name} FROM {child.name} {_on(db, child, parent)} "
            f"WHERE {cond}")


def join_count(db: DB, rng: random.Random) -> Draft:
    child, _, parent = rng.choice(db.edges)
    pi = _ident(parent)
    sql = (f"SELECT {parent.name}.{pi.name}, COUNT(*) FROM {parent.name} "
           f"{_on(db, parent, child)} GROUP BY {parent.name}.{parent.cols[0].name}")
    if rng.random() < 0.5:
        return (f"For each {parent.singular} that has at least one {child.singular}, give its "
                f"{pi.label} and its number of {child.plural}.", sql)
    return (f"Which {parent.singular} has the most {child.plural}? Return its {pi.label} and "
            f"its number of {child.plural}; if several tie, the one whose {pi.label} comes "
            f"first in ascending order.",
            f"{sql} ORDER BY COUNT(*) DESC, {parent.name}.{pi.name} ASC LIMIT 1")


def join_aggregate(db: DB, rng: random.Random) -> Draft:
    child, _, parent = rng.choice(db.edges)
    c, n = _col(parent, rng, "cat"), _col(child, rng, *NUM)
    word, sql = _agg(n, rng, child.name)
    return (f"What is the {word} of {child.plural}, grouped by the {c.label} of their "
            f"{parent.singular}? Return the {c.label} and that value.",
            f"SELECT {parent.name}.{c.name}, {sql} FROM {child.name} {_on(db, child, parent)} "
            f"GROUP BY {parent.name}.{c.name}")


# hard: two joins, subqueries, set operations, ranking ------------------------------------
def _paths(db: DB) -> list[tuple[str, Table, Table, Table]]:
    """Three tables linked by two foreign keys: ("bridge", A, B, C) when B references A and
    C; ("chain", A, B, C) when B references A and C references B."""
    out = []
    for b, _, a in db.edges:
        for b2, _, c in db.edges:
            if b2 is b and c is not a:
                out.append(("bridge", a, b, c))
            if c is b:
                out.append(("chain", a, b, b2))
    if not out:
        raise _NotApplicable
    return out


def two_join_filter(db: DB, rng: random.Random) -> Draft:
    kind, a, b, c = rng.choice(_paths(db))
    if kind == "chain" and rng.random() < 0.5:  # from the far end up: "tracks whose album's..."
        (words, cond), i = _cond(db, a, rng), _ident(c)
        return (f"List the {i.label} of the {c.plural} whose {b.singular}'s {a.singular} has "
                f"{words}.", f"SELECT {c.name}.{i.name} FROM {c.name} {_on(db, c, b)} "
                f"{_on(db, b, a)} WHERE {cond}")
    (words, cond), i = _cond(db, c, rng), _ident(a)
    via = f"whose {c.singular}" if kind == "bridge" else f"with {_a(c.singular)} that"
    return (f"List the {i.label} of the {a.plural} that have {_a(b.singular)} {via} has "
            f"{words}, each once.", f"SELECT DISTINCT {a.name}.{i.name} FROM {a.name} "
            f"{_on(db, a, b)} {_on(db, b, c)} WHERE {cond}")


def two_join_group(db: DB, rng: random.Random) -> Draft:
    kind, a, b, c = rng.choice(_paths(db))
    # a measure M, filtered through its parent F, grouped by a category of G (two joins away)
    m, f, g = (b, a, c) if kind == "bridge" else (c, b, a)
    (words, cond), gc = _cond(db, f, rng), _col(g, rng, "cat")
    if _cols(m, *NUM) and rng.random() < 0.7:
        what, agg = _agg(_col(m, rng, *NUM), rng, m.name)
    else:
        what, agg = f"number of {m.plural}", "COUNT(*)"
    return (f"Considering only {m.plural} whose {f.singular} has {words}, what is the {what} "
            f"for each {g.singular} {gc.label}? Return the {gc.label} and that value.",
            f"SELECT {g.name}.{gc.name}, {agg} FROM {m.name} {_on(db, m, f)} "
            f"{_on(db, m if kind == 'bridge' else f, g)} WHERE {cond} "
            f"GROUP BY {g.name}.{gc.name}")


def above_average(db: DB, rng: random.Random) -> Draft:
    t = _table(db, rng, NUM)
    n, i = _col(t, rng, *NUM), _ident(t)
    if not _cols(t, "cat") or rng.random() < 0.5:
        return (f"List the {i.label} and {n.label} of the {t.plural} whose {n.label} is above "
                f"the average {n.label} of all {t.plural}.",
                f"SELECT {i.name}, {n.name} FROM {t.name} "
                f"WHERE {n.name} > (SELECT AVG({n.name}) FROM {t.name})")
    c = _col(t, rng, "cat")
    return (f"List the {i.label}, {c.label} and {n.label} of the {t.plural} whose {n.label} is "
            f"above the average {n.label} of the {t.plural} with the same {c.label}.",
            f"SELECT t1.{i.name}, t1.{c.name}, t1.{n.name} FROM {t.name} AS t1 WHERE t1.{n.name}"
            f" > (SELECT AVG(t2.{n.name}) FROM {t.name} AS t2 WHERE t2.{c.name} = t1.{c.name})")


def without_related(db: DB, rng: random.Random) -> Draft:
    child, fk, parent = rng.choice(db.edges)
    pi, pk = _ident(parent), parent.cols[0]
    what, where = f"no {child.plural}", ""
    if rng.random() < 0.5:
        words, cond = _cond(db, child, rng)
        what, where = f"no {child.singular} with {words}", f" WHERE {cond}"
    return (f"List the {pi.label} of the {parent.plural} that have {what}.",
            f"SELECT {pi.name} FROM {parent.name} WHERE {parent.name}.{pk.name} NOT IN "
            f"(SELECT {child.name}.{fk.name} FROM {child.name}{where})")


def set_operation(db: DB, rng: random.Random) -> Draft:
    child, _, parent = rng.choice(db.edges)
    c = _col(child, rng, "cat")
    if len(db.distinct(child, c)) < 2:
        raise _NotApplicable
    x, y = rng.sample(db.distinct(child, c), 2)
    pi, one = _ident(parent), _a(child.singular)
    base = (f"SELECT {parent.name}.{pi.name} FROM {parent.name} {_on(db, parent, child)} "
            f"WHERE {child.name}.{c.name} = ")
    if rng.random() < 0.5:
        return (f"List the {pi.label} of the {parent.plural} that have both {one} with "
                f"{c.label} {_say(x)} and {one} with {c.label} {_say(y)}.",
                f"{base}{_lit(x)} INTERSECT {base}{_lit(y)}")
    return (f"List the {pi.label} of the {parent.plural} that have {one} with {c.label} "
            f"{_say(x)} but none with {c.label} {_say(y)}.",
            f"{base}{_lit(x)} EXCEPT {base}{_lit(y)}")


def rank_in_group(db: DB, rng: random.Random) -> Draft:
    t = _table(db, rng, ("cat",), NUM)
    c, n, i = _col(t, rng, "cat"), _col(t, rng, *NUM), _ident(t)
    word, order = ("highest", "DESC") if rng.random() < 0.6 else ("lowest", "ASC")
    return (f"For each {c.label}, which {t.singular} has the {word} {n.label}? Return the "
            f"{c.label}, the {i.label} and the {n.label}; if several tie, return all of them.",
            f"SELECT {c.name}, {i.name}, {n.name} FROM (SELECT {c.name}, {i.name}, {n.name}, "
            f"RANK() OVER (PARTITION BY {c.name} ORDER BY {n.name} {order}) AS rnk "
            f"FROM {t.name}) WHERE rnk = 1")


TEMPLATES: dict[str, tuple[Callable[[DB, random.Random], Draft], ...]] = {
    "easy": (filter_category, count_category, filter_number, top_k, date_year,
             distinct_values, extreme),
    "medium": (group_count, group_aggregate, group_having, join_filter, join_count,
               join_aggregate),
    "hard": (two_join_filter, two_join_group, above_average, without_related, set_operation,
             rank_in_group),
}


def draw_question(db: DB, rng: random.Random, level: str) -> tuple[str, str, str, bool]:
    """(question, gold SQL, template, empty_result): a template that applies to `db` and
    whose gold result is not empty, redrawn up to `MAX_TRIES` times."""
    fallback = None
    for _ in range(MAX_TRIES):
        template = rng.choice(TEMPLATES[level])
        try:
            question, sql = template(db, rng)
        except _NotApplicable:
            continue
        try:
            row = db.con.execute(sql).fetchone()
        except sqlite3.Error as e:
            raise RuntimeError(f"sql-synth generated a query SQLite rejects ({e}) from template "
                               f"{template.__name__}: {sql}. This is a bug in skyhub; please "
                               "report it with the seed and parameters") from e
        if row is not None:
            return question, sql, template.__name__, False
        fallback = fallback or (question, sql, template.__name__, True)
    if fallback is None:
        raise RuntimeError(f"no {level} sql-synth template applies to this database")
    return fallback
