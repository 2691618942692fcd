"""SQLite-written SQL (every dataset's gold query) rewritten for engines that read it
otherwise: shared by the duckdb and postgres engines.

Two levels:
- the text, token by token: `cross_joins` (SQLite reads `a JOIN b WHERE ...` as a cross
  join; the others refuse a JOIN without ON) and `alias_subqueries` (PostgreSQL before 16
  requires an alias for a subquery in FROM);
- DuckDB's syntax tree (`parse`: json_serialize_sql), where `bare_columns` and `tie_keys`
  find what SQLite resolves its own way in aggregate queries. The duckdb engine rewrites
  the tree and prints it back (engines/duckdb.py); `for_postgres` splices the text at the
  locations the tree gives instead (PostgreSQL does not read DuckDB's printed SQL), so the
  rest of the query stays as written, and adds SQLite's type affinity in comparisons.
What `for_postgres` (engines/rewrite_postgres.py) reproduces of SQLite is described there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb

#: Aggregate functions a Spider/BIRD gold query may use (the AST does not say which are).
AGGREGATES = {"count", "count_star", "sum", "avg", "min", "max", "total", "group_concat",
              "string_agg", "median", "mean", "any_value", "arg_max", "arg_min", "list"}
_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`|\[[^\]]*\]|--[^\n]*|"
                     r"/\*.*?\*/|\w+|\S", re.S)
#: Words after a table in FROM that are no alias: what may follow a table reference.
_NOT_ALIAS = {"where", "group", "order", "limit", "having", "union", "intersect", "except",
              "join", "inner", "left", "right", "full", "cross", "natural", "on", "using",
              "window", "offset", "outer", ")", ",", ";"}


# ------------------------------------------------------------------------- text level
def _tokens(sql: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group(0)) for m in _TOKENS.finditer(sql)
            if not m.group(0).startswith(("--", "/*"))]


def _close(toks: list[tuple[int, int, str]], i: int) -> int:
    """Index of the `)` matching the `(` at toks[i] (the last token if unbalanced)."""
    depth = 0
    for j in range(i, len(toks)):
        depth += {"(": 1, ")": -1}.get(toks[j][2], 0)
        if depth == 0:
            return j
    return len(toks) - 1


def _after_table(toks: list[tuple[int, int, str]], j: int) -> tuple[int, bool]:
    """From a table reference at toks[j] (a name, `a.b`, or a parenthesized subquery): the
    index of the token after it and its alias, and whether it has an alias."""
    if j < len(toks) and toks[j][2] == "(":
        j = _close(toks, j) + 1
    else:
        j += 1
        while j + 1 < len(toks) and toks[j][2] == ".":
            j += 2
    if j < len(toks) and toks[j][2].lower() == "as":
        return j + 2, True
    if j < len(toks) and toks[j][2].lower() not in _NOT_ALIAS and \
            (toks[j][2][0].isalnum() or toks[j][2][0] in "_\"`["):
        return j + 1, True
    return j, False


def _splice(sql: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, text in sorted(edits, reverse=True):
        sql = sql[:start] + text + sql[end:]
    return sql


def cross_joins(sql: str) -> str:
    """`a JOIN b` (or INNER JOIN) with neither ON nor USING -> `a CROSS JOIN b`: what SQLite
    reads it as; DuckDB and PostgreSQL refuse it."""
    toks, edits = _tokens(sql), []
    for i, (start, end, word) in enumerate(toks):
        if word.upper() != "JOIN":
            continue
        before = toks[i - 1][2].upper() if i else ""
        if before in ("LEFT", "RIGHT", "FULL", "OUTER", "CROSS", "NATURAL"):
            continue
        j, _ = _after_table(toks, i + 1)
        if j < len(toks) and toks[j][2].upper() in ("ON", "USING"):
            continue
        edits.append((toks[i - 1][0] if before == "INNER" else start, end, "CROSS JOIN"))
    return _splice(sql, edits)


def alias_subqueries(sql: str) -> str:
    """`FROM (SELECT ...)` without an alias -> `FROM (SELECT ...) AS _subquery1`."""
    toks, edits = _tokens(sql), []
    for i, (_, _, word) in enumerate(toks[:-2]):
        if word.upper() in ("FROM", "JOIN") and toks[i + 1][2] == "(" and \
                toks[i + 2][2].upper() in ("SELECT", "WITH", "VALUES"):
            j, aliased = _after_table(toks, i + 1)
            if not aliased:
                end = toks[j - 1][1]
                edits.append((end, end, f" AS _subquery{len(edits) + 1}"))
    return _splice(sql, edits)


# ------------------------------------------------------------------------- syntax tree
def parse(sql: str, con: duckdb.DuckDBPyConnection) -> dict | None:
    """DuckDB's syntax tree of one statement, or None when DuckDB cannot parse it."""
    import duckdb

    try:
        row = con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()
    except duckdb.Error:
        return None
    tree = json.loads(row[0]) if row else None
    if not tree or tree.get("error") or len(tree.get("statements") or ()) != 1:
        return None
    return tree


def dicts(x: Any, skip_subqueries: bool = False) -> Iterator[dict]:
    """Every dict in a tree, depth first (not into subquery expressions if asked)."""
    if isinstance(x, dict):
        if skip_subqueries and x.get("class") == "SUBQUERY":
            return
        yield x
        for v in x.values():
            yield from dicts(v, skip_subqueries)
    elif isinstance(x, list):
        for v in x:
            yield from dicts(v, skip_subqueries)


def select_nodes(tree: Any) -> list[dict]:
    return [node for node in dicts(tree) if node.get("type") == "SELECT_NODE"]


def _children(node: dict) -> list[dict]:
    """The queries a set operation (UNION, ...) combines."""
    return [c for c in node.get("children") or (node.get("left"), node.get("right")) if c]


def _cte_queries(node: dict) -> list[tuple[str, dict]]:
    """(name, query node) of each WITH entry of a query node."""
    out = []
    for entry in (node.get("cte_map") or {}).get("map") or ():
        value = entry.get("value") or {}
        q = value.get("query_node") or (value.get("query") or {}).get("node")
        if q:
            out.append((str(entry.get("key", "")).lower(), q))
    return out


def _first_select(node: dict) -> dict:
    """A set operation's first query (its column names are the result's)."""
    while node.get("type") == "SET_OPERATION_NODE" and _children(node):
        node = _children(node)[0]
    return node


def _modifiers(node: dict) -> dict[str, dict]:
    return {m.get("type"): m for m in node.get("modifiers") or ()}


def _aggregates(node: dict) -> list[dict]:
    order = _modifiers(node).get("ORDER_MODIFIER") or {"orders": []}
    scope = [*node["select_list"], node.get("having"), *(o["expression"] for o in order["orders"])]
    return [f for f in dicts(scope, skip_subqueries=True) if f.get("class") == "FUNCTION"
            and f["function_name"].lower() in AGGREGATES]


def bare_columns(node: dict) -> list[tuple[int, dict | None]]:
    """SQLite's bare columns in an aggregate query: the select-list items that are a column
    neither grouped (by name, alias or position) nor aggregated, each with the query's
    only min()/max() call when there is exactly one (SQLite then takes the column from the
    row holding that extreme; else from some row of the group)."""
    aggs, keys = _aggregates(node), node.get("group_expressions") or []
    if not keys and not aggs:
        return []
    groups = [tuple(n.lower() for n in g["column_names"]) for g in keys
              if g.get("class") == "COLUMN_REF"]
    ordinals = {str(g.get("literal", {}).get("text")) for g in keys if g.get("class") == "CONSTANT"}
    extremes = [f for f in aggs if f["function_name"].lower() in ("min", "max")]
    by = extremes[0] if len(extremes) == 1 and len(extremes[0]["arguments"]) == 1 else None
    out = []
    for i, e in enumerate(node["select_list"]):
        if e.get("class") != "COLUMN_REF":
            continue
        names = tuple(n.lower() for n in e["column_names"])
        if str(i + 1) in ordinals or any(  # grouped: by position, name or alias
                g == names or (g[-1] == names[-1] and 1 in (len(g), len(names)))
                or g == (e["alias"].lower(),) for g in groups):
            continue
        out.append((i, by))
    return out


def tie_keys(node: dict, *, need_limit: bool = True) -> tuple[str, list[dict]] | None:
    """For `GROUP BY g ... ORDER BY ... [LIMIT n]`: (the first ORDER BY term's direction,
    the group keys), to append to ORDER BY so that ties come in SQLite's order (groups in
    key order, kept among ties, reversed under DESC). None where that does not apply (no
    ORDER BY, no LIMIT when `need_limit`, or DISTINCT, under which ORDER BY may only name
    selected columns)."""
    groups, kinds = node.get("group_expressions") or [], _modifiers(node)
    order = kinds.get("ORDER_MODIFIER")
    if not (groups and order and order["orders"]) or "DISTINCT_MODIFIER" in kinds or \
            (need_limit and "LIMIT_MODIFIER" not in kinds):
        return None
    return order["orders"][0]["type"], groups
