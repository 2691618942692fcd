"""SQLite's semantics for gold queries run on PostgreSQL: `for_postgres` splices the query's
text at the locations DuckDB's syntax tree gives (engines/rewrite.py), so the rest of the
query stays as written.

SQLite's behaviours reproduced for PostgreSQL (`for_postgres`):
- bare columns (`SELECT name, count(*) ... GROUP BY fk`): a column neither grouped nor
  aggregated comes from the group's row holding the query's only min()/max() when there is
  exactly one -> `(array_agg(col ORDER BY arg DESC NULLS LAST))[1]`, else from one of its
  rows -> `(array_agg(col))[1]` (PostgreSQL 15 has no any_value; exact when the column
  depends on the grouped key, as in Spider);
- ties: group keys appended to `GROUP BY ... ORDER BY agg` in the first key's direction
  (SQLite keeps ties in group order, as the duckdb engine does); in a one-table query
  without aggregates, `ctid` appended (SQLite keeps ties in rowid order: the load order);
- type affinity (https://sqlite.org/datatype3.html#comparisons): a comparison between a
  column of numeric affinity and a TEXT column compares numbers (the text column is cast to
  numeric, when SQLite would convert every value it holds); between a TEXT column and a
  number without affinity (a literal, count(*), arithmetic) compares text (the literal
  becomes SQLite's text of it, an expression is cast to text); sum(), avg() and arithmetic
  read a text column's values as SQLite does ('12abc' -> 12, 'null' -> 0), and LIKE a
  number as text.

Over ~400 lines, for a reason: one translation (SQLite's semantics for PostgreSQL), whose
rules all go through the same splicing of DuckDB's syntax tree; split, a rule would live
apart from the splice it needs.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .rewrite import (
    _aggregates,
    _children,
    _cte_queries,
    _first_select,
    _modifiers,
    bare_columns,
    dicts,
    parse,
    select_nodes,
    tie_keys,
)

if TYPE_CHECKING:
    import duckdb

@dataclass(frozen=True)
class Column:
    """A column of the SQLite file as the engine serves it."""

    table: str
    name: str
    affinity: str  # SQLite's, from the declared type: INTEGER REAL NUMERIC TEXT BLOB(=none)
    kind: str  # as the engine serves it: "text", "number" or "blob"


class Schema(Protocol):
    def table(self, name: str) -> dict[str, Column] | None:
        """A table's columns by lower-case name; None when there is no such table."""

    def converts(self, column: Column) -> bool:
        """Whether SQLite's numeric affinity converts every text value the column holds."""


def affinity(declared: str) -> str:
    """SQLite's column affinity of a declared type (https://sqlite.org/datatype3.html)."""
    d = declared.upper()
    if "INT" in d:
        return "INTEGER"
    if any(k in d for k in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if "BLOB" in d or not d.strip():
        return "BLOB"
    return "REAL" if any(k in d for k in ("REAL", "FLOA", "DOUB")) else "NUMERIC"


_NUMERIC = {"INTEGER", "REAL", "NUMERIC"}
_NUMBER_LITERAL = re.compile(r"-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
#: SQLite's reading of text as a number in sum()/avg()/arithmetic: its longest numeric
#: prefix, 0 without one (the sign kept apart so that '0' can be put before the digits).
_AS_NUMBER = ("CAST(regexp_replace(", r", '^\s*([-+]?)((?:[0-9]+[.]?[0-9]*|[.][0-9]+)"
              r"(?:[eE][-+]?[0-9]+)?)?.*$', '\10\2') AS double precision)")
_TEXT_FUNCTIONS = {"lower", "upper", "substr", "substring", "trim", "ltrim", "rtrim",
                   "replace", "||", "concat", "group_concat", "string_agg"}
_NUMBER_FUNCTIONS = {"count", "count_star", "sum", "avg", "total", "length", "abs", "round",
                     "+", "-", "*", "/", "%"}
_ARITHMETIC = {"+", "-", "*", "/", "%"}
_COMPARISONS = {"COMPARE_EQUAL", "COMPARE_NOTEQUAL", "COMPARE_LESSTHAN", "COMPARE_GREATERTHAN",
                "COMPARE_LESSTHANOREQUALTO", "COMPARE_GREATERTHANOREQUALTO"}


@dataclass
class _Info:
    affinity: str | None  # SQLite's affinity of the expression (None: no affinity)
    kind: str | None  # what PostgreSQL sees: text, number, literal, string; None: unknown
    column: Column | None = None


class _Splices:
    """Insertions and replacements at byte offsets of the query (DuckDB's locations)."""

    def __init__(self, sql: str) -> None:
        self.raw = sql.encode()
        self.items: list[tuple[int, int, int, bytes]] = []  # (start, end, order, text)

    def span(self, e: dict) -> tuple[int, int] | None:
        start, n = e.get("query_location"), e.get("query_location_length")
        if not isinstance(start, int) or not isinstance(n, int) or n <= 0 or \
                start + n > len(self.raw):
            return None
        if e.get("class") == "COLUMN_REF" and not self.raw[start:start + n].decode(
                errors="replace").strip('"`[]').lower().endswith(
                    e["column_names"][-1].lower()):
            return None  # not where DuckDB says: touch nothing
        return start, start + n

    def text(self, e: dict) -> str | None:
        s = self.span(e)
        return None if s is None else self.raw[s[0]:s[1]].decode()

    def wrap(self, e: dict, before: str, after: str) -> bool:
        s = self.span(e)
        if s is None:
            return False
        n = len(self.items)
        self.items += [(s[0], s[0], -n, before.encode()), (s[1], s[1], n, after.encode())]
        return True

    def replace(self, e: dict, text: str) -> bool:
        s = self.span(e)
        if s is None or any(a < s[1] and s[0] < b for a, b, _, _ in self.items if a != b):
            return False
        self.items.append((s[0], s[1], 0, text.encode()))
        return True

    def insert(self, at: int, text: str) -> None:
        self.items.append((at, at, len(self.items), text.encode()))

    def result(self) -> str:
        raw = self.raw
        # from the end; at one offset, closers before openers, inner wraps inside outer ones
        for start, end, _, text in sorted(self.items, key=lambda t: (t[0], t[1] > t[0], t[2]),
                                          reverse=True):
            raw = raw[:start] + text + raw[end:]
        return raw.decode()


def for_postgres(sql: str, con: duckdb.DuckDBPyConnection, schema: Schema) -> str:
    """`sql` (SQLite's) with SQLite's bare columns, tie order and type affinity made
    explicit for PostgreSQL (see the module's docstring); unchanged if DuckDB cannot parse
    it or nothing applies (or the tree is not shaped as this DuckDB version's is)."""
    tree = parse(sql, con)
    if tree is None:
        return sql
    out = _Splices(sql)
    binder = _Binder(schema, out)
    try:
        binder.query(tree["statements"][0]["node"], [])
        ctes = {name for node in dicts(tree) if "cte_map" in node
                for name, _ in _cte_queries(node)}
        for node in select_nodes(tree):
            _bare_for_postgres(node, out)
            _ties_for_postgres(node, out, schema, ctes)
        return out.result() if out.items else sql
    except (KeyError, TypeError, AttributeError, IndexError, UnicodeDecodeError):
        return sql  # a tree of another shape (another DuckDB version): the query as is
    finally:
        binder.close()


def _bare_for_postgres(node: dict, out: _Splices) -> None:
    for i, by in bare_columns(node):
        e = node["select_list"][i]
        alias = "" if e["alias"] else ' AS "' + e["column_names"][-1].lower().replace(
            '"', '""') + '"'
        if by is None:
            out.wrap(e, "(array_agg(", f"))[1]{alias}")
            continue
        arg = out.text(by["arguments"][0]["expression"])
        if arg is not None:
            way = "DESC" if by["function_name"].lower() == "max" else "ASC"
            out.wrap(e, "(array_agg(", f" ORDER BY {arg} {way} NULLS LAST))[1]{alias}")


_ORDER_END = re.compile(rb"(?:\s+(?:ASC|DESC)\b)?(?:\s+NULLS\s+(?:FIRST|LAST)\b)?", re.I)
_AFTER_ORDER = re.compile(rb"\s*(?:LIMIT\b|OFFSET\b|;|\)|$)", re.I)


def _ties_for_postgres(node: dict, out: _Splices, schema: Schema, ctes: set[str]) -> None:
    kinds = _modifiers(node)
    order = kinds.get("ORDER_MODIFIER")
    if not order or not order["orders"]:
        return
    keys = tie_keys(node, need_limit=False)
    if keys is not None:
        way = "DESC NULLS LAST" if keys[0] == "DESCENDING" else "ASC NULLS FIRST"
        texts = [out.text(g) for g in keys[1]]
        if any(t is None for t in texts):
            return
        ordered = {_squeeze(out.text(o["expression"])) for o in order["orders"]}
        extra = "".join(f", {t} {way}" for t in texts if _squeeze(t) not in ordered)
        if not extra:
            return
    else:
        table = node.get("from_table") or {}
        if node.get("group_expressions") or _aggregates(node) or "DISTINCT_MODIFIER" in kinds \
                or table.get("type") != "BASE_TABLE" or table["table_name"].lower() in ctes \
                or schema.table(table["table_name"].lower()) is None:
            return
        extra = ", ctid"  # one table, no aggregate: SQLite keeps ties in rowid order
    last = out.span(order["orders"][-1]["expression"])
    if last is None:
        return
    m = _ORDER_END.match(out.raw, last[1])
    if m is not None and _AFTER_ORDER.match(out.raw, m.end()):
        out.insert(m.end(), extra)


def _squeeze(text: str | None) -> str | None:
    return None if text is None else re.sub(r"\s+", "", text).lower()


class _Binder:
    """Resolves column references to the schema's columns, scope by scope, and splices
    SQLite's affinity rules into comparisons and its reading of text as numbers."""

    def __init__(self, schema: Schema, out: _Splices) -> None:
        self.schema, self.out = schema, out
        self._literals: sqlite3.Connection | None = None  # SQLite, to print numbers as text

    def close(self) -> None:
        if self._literals is not None:
            self._literals.close()

    # scopes: [innermost FROM, ..., outermost]; each maps a table alias to its columns
    def scope(self, node: dict, ctes: dict) -> dict[str, dict[str, Column | None]]:
        ctes = {**ctes, **self.ctes(node, ctes)}
        node = _first_select(node)
        out: dict[str, dict[str, Column | None]] = {}

        def add(t: dict | None) -> None:
            kind = (t or {}).get("type")
            if kind == "BASE_TABLE":
                name = t["table_name"].lower()
                cols = ctes.get(name)
                cols = self.schema.table(name) if cols is None else cols
                if cols is not None:
                    out[(t.get("alias") or name).lower()] = dict(cols)
            elif kind == "JOIN":
                add(t["left"])
                add(t["right"])
            elif kind == "SUBQUERY" and t.get("alias"):
                out[t["alias"].lower()] = self.outputs(t["subquery"]["node"], ctes)

        add(node.get("from_table"))
        return out

    def ctes(self, node: dict, ctes: dict) -> dict[str, dict[str, Column | None]]:
        found: dict[str, dict[str, Column | None]] = {}
        for name, q in _cte_queries(node):
            found[name] = self.outputs(q, {**ctes, **found})
        return found

    def outputs(self, node: dict, ctes: dict) -> dict[str, Column | None]:
        """A derived table's columns: those that are a column keep its affinity."""
        scopes = [self.scope(node, ctes)]
        node = _first_select(node)
        cols: dict[str, Column | None] = {}
        for e in node.get("select_list") or ():
            if e.get("class") == "COLUMN_REF":
                cols[(e["alias"] or e["column_names"][-1]).lower()] = self.resolve(e, scopes)
            elif e.get("alias"):
                cols[e["alias"].lower()] = None
        return cols

    def resolve(self, e: dict, scopes: list[dict]) -> Column | None:
        names = [n.lower() for n in e["column_names"]]
        for sc in scopes:
            if len(names) > 1:
                if names[-2] in sc:
                    return sc[names[-2]].get(names[-1])
                continue
            hits = {id(c): c for c in (cols[names[0]] for cols in sc.values()
                                       if names[0] in cols)}
            if hits:
                return next(iter(hits.values())) if len(hits) == 1 else None
        return None

    # ----------------------------------------------------------------- the walk
    def query(self, node: dict, outer: list[dict], ctes: dict | None = None) -> None:
        ctes = {**(ctes or {}), **self.ctes(node, ctes or {})}
        for _, q in _cte_queries(node):
            self.query(q, outer, ctes)
        if node.get("type") == "SET_OPERATION_NODE":
            for child in _children(node):
                self.query(child, outer, ctes)
            return
        if node.get("type") != "SELECT_NODE":
            return
        scopes = [self.scope(node, ctes), *outer]
        self.tables(node.get("from_table"), scopes, ctes)
        for key, value in node.items():
            if key not in ("from_table", "cte_map"):
                self.walk(value, scopes, ctes)

    def tables(self, t: dict | None, scopes: list[dict], ctes: dict) -> None:
        kind = (t or {}).get("type")
        if kind == "JOIN":
            self.tables(t["left"], scopes, ctes)
            self.tables(t["right"], scopes, ctes)
            self.walk(t.get("condition"), scopes, ctes)
        elif kind == "SUBQUERY":
            self.query(t["subquery"]["node"], [], ctes)

    def walk(self, x: Any, scopes: list[dict], ctes: dict) -> None:
        if isinstance(x, list):
            for v in x:
                self.walk(v, scopes, ctes)
            return
        if not isinstance(x, dict):
            return
        cls, typ = x.get("class"), x.get("type")
        if cls == "SUBQUERY":
            if x.get("subquery_type") == "ANY" and x.get("child") is not None:
                self.compare(x["child"], x, scopes, ctes)
                self.walk(x["child"], scopes, ctes)
            self.query(x["subquery"]["node"], scopes, ctes)
            return
        if cls == "COMPARISON" and typ in _COMPARISONS:
            self.compare(x["left"], x["right"], scopes, ctes)
        elif cls == "BETWEEN":
            self.compare(x["input"], x["lower"], scopes, ctes)
            self.compare(x["input"], x["upper"], scopes, ctes)
        elif cls == "OPERATOR" and typ in ("COMPARE_IN", "COMPARE_NOT_IN"):
            for other in x["children"][1:]:
                self.compare(x["children"][0], other, scopes, ctes)
        elif cls == "FUNCTION":
            self.function(x, scopes, ctes)
        for v in x.values():
            self.walk(v, scopes, ctes)

    def info(self, e: dict, scopes: list[dict], ctes: dict) -> _Info:
        cls = e.get("class")
        if cls == "COLUMN_REF":
            col = self.resolve(e, scopes)
            if col is None:
                return _Info(None, None)
            return _Info(None if col.affinity == "BLOB" else col.affinity, col.kind, col)
        if cls == "CONSTANT":
            kind = e.get("literal", {}).get("kind")
            return _Info(None, {"INTEGER": "literal", "NUMERIC": "literal",
                                "STRING": "string"}.get(kind))
        if cls == "SUBQUERY" and e.get("subquery_type") in ("SCALAR", "ANY"):
            node = e["subquery"]["node"]
            if node.get("type") != "SELECT_NODE" or len(node["select_list"]) != 1:
                return _Info(None, None)
            inner = self.info(node["select_list"][0], [self.scope(node, ctes), *scopes], ctes)
            return _Info(inner.affinity, None if inner.kind == "literal" else inner.kind,
                         inner.column)
        if cls == "FUNCTION":
            name = e["function_name"].lower()
            if name in ("min", "max") and len(e["arguments"]) == 1:
                arg = self.info(e["arguments"][0]["expression"], scopes, ctes)
                return _Info(None, "number" if arg.kind == "literal" else arg.kind)
            if name in _NUMBER_FUNCTIONS:
                return _Info(None, "number")
            if name in _TEXT_FUNCTIONS:
                return _Info(None, "text")
        return _Info(None, None)

    def compare(self, a: dict, b: dict, scopes: list[dict], ctes: dict) -> None:
        ia, ib = self.info(a, scopes, ctes), self.info(b, scopes, ctes)
        for (x, ix), iy in (((a, ia), ib), ((b, ib), ia)):
            if iy.affinity in _NUMERIC and ix.affinity not in _NUMERIC:
                # numeric affinity applied to x: a text column whose values all convert
                if ix.kind == "text" and iy.kind == "number" and ix.column is not None \
                        and self.schema.converts(ix.column):
                    self.out.wrap(self.target(x), "CAST(", " AS numeric)")
                return
            if iy.affinity == "TEXT" and ix.affinity is None and iy.kind == "text":
                # text affinity applied to x: a number becomes SQLite's text of it
                if ix.kind == "literal" and x.get("class") == "CONSTANT":
                    text = self.literal_text(x["literal"]["text"])
                    if text is not None:
                        self.out.replace(x, "'" + text + "'")
                elif ix.kind == "number":
                    self.out.wrap(self.target(x), "CAST(", " AS text)")
                return

    @staticmethod
    def target(e: dict) -> dict:
        """What to convert: a subquery's selected expression, else the expression."""
        if e.get("class") == "SUBQUERY":
            node = e["subquery"]["node"]
            if node.get("type") == "SELECT_NODE" and len(node["select_list"]) == 1:
                return node["select_list"][0]
        return e

    def literal_text(self, token: str) -> str | None:
        """SQLite's text of a number literal (2.0 -> '2.0', 1e3 -> '1000.0')."""
        if not _NUMBER_LITERAL.fullmatch(token):
            return None
        if self._literals is None:
            self._literals = sqlite3.connect(":memory:")
        row = self._literals.execute(f"SELECT CAST({token} AS TEXT)").fetchone()
        return str(row[0]) if row else None

    def function(self, f: dict, scopes: list[dict], ctes: dict) -> None:
        name = f["function_name"].lower()
        args = [a["expression"] for a in f.get("arguments") or ()]
        if name in ("sum", "avg", "total") or (f.get("is_operator") and name in _ARITHMETIC):
            for arg in args:  # SQLite reads text as a number here
                if self.info(arg, scopes, ctes).kind == "text":
                    self.out.wrap(arg, _AS_NUMBER[0], _AS_NUMBER[1])
        elif name in ("~~", "!~~", "~~*", "!~~*") and args and \
                self.info(args[0], scopes, ctes).kind == "number":  # LIKE reads it as text
            self.out.wrap(args[0], "CAST(", " AS text)")
