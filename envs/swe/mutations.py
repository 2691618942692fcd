"""Bugs planted in real code, for `swe-synth` (SWE-smith's idea, our code): small semantic
mutations of one function each, as a text edit of the source, with the gold fix its reverse.

Kinds (`KINDS`), each a single site inside a function body:

- `operator`: an arithmetic or comparison operator swapped for its usual confusion (`+`/`-`,
  `*`/`//`... , `<`/`<=`, `==`/`!=`, `in`/`not in`, `is`/`is not`, `and`/`or`);
- `condition`: an `if`/`while`/conditional-expression test negated;
- `off_by_one`: an integer literal in a comparison, subscript, slice or `range()` moved by one;
- `drop`: a statement dropped (never the only statement of its block);
- `swap_args`: the first two positional arguments of a call swapped;
- `return`: a returned value replaced (`True`/`False` flipped, anything else `None`).

Only the site's own characters change (the rest of the file keeps its formatting), and a
mutation whose result does not parse, or that leaves the code unchanged, is not offered.
Whether a mutation makes a usable task (some test fails with it, all pass without it) is
for the generator to find out by running the tests.
"""

from __future__ import annotations

import ast
import copy
import random
from collections.abc import Iterator
from dataclasses import dataclass

from .diffs import unified_diff

KINDS = ("operator", "condition", "off_by_one", "drop", "swap_args", "return")

_BINOPS: dict[type, type] = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv,
                             ast.FloorDiv: ast.Mult, ast.Div: ast.Mult, ast.Mod: ast.FloorDiv,
                             ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd, ast.LShift: ast.RShift,
                             ast.RShift: ast.LShift}
_CMPOPS: dict[type, type] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
                             ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn,
                             ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BOOLOPS: dict[type, type] = {ast.And: ast.Or, ast.Or: ast.And}


@dataclass(frozen=True)
class Mutation:
    """One planted bug: `path`'s `function` (qualified name) changed at `line` by `kind`;
    `source` is the whole mutated file."""

    path: str
    function: str
    kind: str
    line: int
    before: str  # the site's original text
    after: str  # its mutated text
    source: str

    def bug_patch(self, original: str) -> str:
        """The diff that plants the bug (original -> mutated), as `git diff` writes it."""
        return unified_diff(self.path, original, self.source)

    def fix_patch(self, original: str) -> str:
        """The gold patch: the diff that removes the bug (mutated -> original)."""
        return unified_diff(self.path, self.source, original)


def mutations(source: str, path: str, kinds: tuple[str, ...] = KINDS) -> Iterator[Mutation]:
    """Every mutation of `kinds` the functions of `source` offer, in source order."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return
    offsets = _line_offsets(source)
    for qualname, func in _functions(tree):
        for node in ast.walk(func):  # (the function itself too: its body's statements)
            for kind, site, replacement in _sites(node, func):
                if kind not in kinds:
                    continue
                m = _apply(source, offsets, site, replacement, path, qualname, kind)
                if m is not None:
                    yield m


def sample(source: str, path: str, k: int, rng: random.Random,
           kinds: tuple[str, ...] = KINDS) -> list[Mutation]:
    """Up to `k` distinct mutations of `source`, drawn with `rng` (the same seed, the same
    draw)."""
    found = list(mutations(source, path, kinds))
    return rng.sample(found, min(k, len(found)))


# -- where a node can be mutated -----------------------------------------------------------

def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """(qualified name, node) of every function not nested in another function."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + child.name, child
        elif not isinstance(child, ast.expr):
            yield from _functions(child, prefix)


def _sites(node: ast.AST, func: ast.AST) -> Iterator[tuple[str, ast.AST, str]]:
    """(kind, the node whose text is replaced, the replacement text) for one node."""
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        new = copy.copy(node)
        new.op = _BINOPS[type(node.op)]()
        yield "operator", node, ast.unparse(new)
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMPOPS:
        new = copy.copy(node)
        new.ops = [_CMPOPS[type(node.ops[0])]()]
        yield "operator", node, ast.unparse(new)
    elif isinstance(node, ast.BoolOp):
        new = copy.copy(node)
        new.op = _BOOLOPS[type(node.op)]()
        yield "operator", node, ast.unparse(new)
    if isinstance(node, (ast.If, ast.While, ast.IfExp)):
        test = node.test
        negated = (ast.unparse(test.operand) if isinstance(test, ast.UnaryOp)
                   and isinstance(test.op, ast.Not) else f"not ({ast.unparse(test)})")
        yield "condition", test, negated
    value = _int_literal(node)
    if value is not None and _counts(node, func):
        for delta in (1, -1):
            yield "off_by_one", node, repr(value + delta)
    if isinstance(node, ast.Call) and len(node.args) >= 2 \
            and not any(isinstance(a, ast.Starred) for a in node.args[:2]):
        new = copy.copy(node)
        new.args = [node.args[1], node.args[0], *node.args[2:]]
        yield "swap_args", node, ast.unparse(new)
    if isinstance(node, ast.Return) and node.value is not None:
        v = node.value
        if isinstance(v, ast.Constant) and isinstance(v.value, bool):
            yield "return", v, repr(not v.value)
        elif not (isinstance(v, ast.Constant) and v.value is None):
            yield "return", v, "None"
    for field in ("body", "orelse", "finalbody"):
        block = getattr(node, field, None)
        if isinstance(block, list) and len(block) > 1:
            for stmt in block:
                if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                         ast.Pass, ast.Expr)) or _is_call(stmt):
                    yield "drop", stmt, ""


def _is_call(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)


def _int_literal(node: ast.AST) -> int | None:
    """The value of an int literal (`3`, or `-1`, which ast reads as minus applied to 1)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) is int:
        return -node.operand.value
    return None


def _counts(const: ast.expr, func: ast.AST) -> bool:
    """Whether an int literal is a bound or an index: in a comparison, a subscript or slice,
    or a `range()` call."""
    for parent in ast.walk(func):
        if isinstance(parent, ast.Compare) and const in [parent.left, *parent.comparators]:
            return True
        if isinstance(parent, ast.Subscript) and (parent.slice is const or (
                isinstance(parent.slice, ast.Slice)
                and const in (parent.slice.lower, parent.slice.upper))):
            return True
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) \
                and parent.func.id == "range" and const in parent.args:
            return True
    return False


# -- text edits ----------------------------------------------------------------------------

def _line_offsets(source: str) -> list[int]:
    out, total = [0], 0
    for line in source.splitlines(keepends=True):
        total += len(line)
        out.append(total)
    return out


def _apply(source: str, offsets: list[int], node: ast.AST, text: str, path: str,
           function: str, kind: str) -> Mutation | None:
    """`source` with `node`'s characters replaced by `text` (a dropped statement takes its
    whole lines), or None if that changes nothing or does not parse."""
    lines = source.splitlines(keepends=True)
    start_line, end_line = node.lineno, node.end_lineno or node.lineno  # type: ignore[attr-defined]
    if kind == "drop":
        before = "".join(lines[start_line - 1:end_line])
        first, last = offsets[start_line - 1], offsets[end_line]
        # the statement must own its lines (nothing else on them, e.g. `a = 1; b = 2`)
        rest = (lines[start_line - 1][:node.col_offset].strip()  # type: ignore[attr-defined]
                + lines[end_line - 1][node.end_col_offset:].strip())  # type: ignore[attr-defined]
        if rest and not rest.startswith("#"):
            return None
        mutated = source[:first] + source[last:]
    else:
        first = _char_offset(source, offsets, start_line, node.col_offset)  # type: ignore[attr-defined]
        last = _char_offset(source, offsets, end_line, node.end_col_offset)  # type: ignore[attr-defined]
        before = source[first:last]
        if "\n" in before:  # a multi-line site: its text would lose its layout
            return None
        mutated = source[:first] + text + source[last:]
    if mutated == source:
        return None
    try:
        if ast.dump(ast.parse(mutated)) == ast.dump(ast.parse(source)):
            return None
    except (SyntaxError, ValueError):
        return None
    return Mutation(path, function, kind, start_line, before, text, mutated)


def _char_offset(source: str, offsets: list[int], line: int, col: int) -> int:
    """ast's (line, UTF-8 byte column) as an index into `source`."""
    start = offsets[line - 1]
    text = source[start:offsets[line] if line < len(offsets) else len(source)]
    return start + len(text.encode("utf-8")[:col].decode("utf-8", errors="ignore"))


__all__ = ["KINDS", "Mutation", "mutations", "sample"]
