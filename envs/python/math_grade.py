"""Math answers: decide if an answer is right (`is_equiv`, `score`); `math_extract` pulls it
out of an agent's message.

Pure functions, no I/O, so the reward is cheap to call and easy to test. `is_equiv` never
raises and never runs for long, whatever the agent wrote: it is called on untrusted text in
the middle of a training loop, where an exception or a hang would kill the run.

Comparison goes from cheap to expensive: normalised strings, then words (case-insensitive),
then structure (tuples and intervals element-wise with exact brackets, sets and bare lists
order-insensitive), then plain numbers (rel 1e-6 / abs 1e-9), then sympy. LaTeX is turned
into sympy syntax here (a small converter, not `sympy.parsing.latex`, which needs antlr);
the result is parsed once unevaluated to bound the size of every number evaluation would
build (`9**9**9**9` is refused instead of computed), then evaluated and compared
numerically, at random points when it has free symbols.

Over ~400 lines, for a reason: one concept, answer equivalence: pure rules that build on
each other (normalisation, structure, numeric, symbolic).
"""

from __future__ import annotations

import cmath
import functools
import keyword
import random
import re
from fractions import Fraction
from typing import Any

from .math_extract import braced, clean, last_boxed

__all__ = ["is_equiv", "score"]

REL_TOL = 1e-6
ABS_TOL = 1e-9
MAX_SYMBOLIC_CHARS = 1000  # longer answers are not parsed by sympy
MAX_TEXT_CHARS = 20_000  # longer answers are compared as raw strings only
MAX_BITS = 100_000  # largest number (in bits) that evaluation may build
MAX_ELEMENTS = 32  # largest tuple/set compared element-wise

# ---------------------------------------------------------------------------- normalising

_SPACING = re.compile(r"\\[,;:! ]|\\q?quad(?![A-Za-z])|\\displaystyle|\\left(?![A-Za-z])"
                      r"|\\right(?![A-Za-z])|\\bigl?|\\bigr|\\Bigl?|\\Bigr")
_DEGREES = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°|\\degree")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|textit|mbox|mathrm|mathbf|mathit|operatorname)\s*\{")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_LEADING_VAR = re.compile(r"^\\?[A-Za-z]+(?:_\{?[A-Za-z0-9]+\}?)?(?:\([A-Za-z]\))?\s*=\s*")
_MATH_WORDS = frozenset({"pi", "sqrt", "sin", "cos", "tan", "log", "ln", "exp", "oo", "infty",
                         "cot", "sec", "csc"})
_UNIT_WORD = re.compile(r"[A-Za-z]{2,}(?:\.[A-Za-z]{2,})*\.?")
_UNICODE = {"−": "-", "×": "*", "·": "*", "π": "\\pi", "∞": "\\infty", "√": "\\sqrt",
            "≤": "\\le", "≥": "\\ge", "÷": "/"}


def _unwrap_text(s: str) -> str:
    """`5 \\text{ cm}` -> `5` (a unit after a value), `\\text{Yes}` -> `Yes` (the whole answer)."""
    parts: list[tuple[bool, str]] = []  # (is_text, chunk)
    i = 0
    while (m := _TEXT_CMD.search(s, i)) is not None:
        got = braced(s, m.end() - 1)
        if got is None:
            break
        parts.append((False, s[i:m.start()]))
        parts.append((True, got[0]))
        i = got[1]
    parts.append((False, s[i:]))
    rest = "".join(c for is_text, c in parts if not is_text).strip()
    if rest and re.search(r"[\dA-Za-z\\]", rest):
        return rest  # the text groups were units or words around a value
    return "".join(c for _, c in parts)


def _drop_unit_tail(s: str) -> str:
    """`5 cm` -> `5`, `12 sq. ft.` -> `12`: trailing words (no math words among them) after
    a value ending in a digit or a bracket. Linear time (a regex for it backtracked
    exponentially on long runs of letters)."""
    words = s.split()
    i = len(words)
    while i > 1 and _UNIT_WORD.fullmatch(words[i - 1]):
        i -= 1
    tail = words[i:]
    if not tail or any(w.lower().rstrip(".") in _MATH_WORDS for w in tail):
        return s
    head = s.rstrip()
    for w in reversed(tail):
        head = head[:len(head) - len(w)].rstrip()
    return head if head and head[-1] in "0123456789})" else s


def _normalize(s: str) -> str:
    s = str(s).strip()
    boxed = last_boxed(s)
    if boxed is not None:
        s = boxed
    for k, v in _UNICODE.items():
        s = s.replace(k, v)
    s = clean(s)
    s = _SPACING.sub(" ", s)
    s = re.sub(r"\\[dtc]frac(?![A-Za-z])", r"\\frac", s)
    s = _DEGREES.sub("", s)
    s = s.replace("\\%", "").replace("%", "").replace("\\$", "").replace("$", "")
    s = s.replace("{,}", ",")
    s = _unwrap_text(s)
    s = s.strip().rstrip(".").strip()
    if s.count("=") == 1 and "==" not in s:
        s = _LEADING_VAR.sub("", s, count=1)
    s = _drop_unit_tail(s)
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    m = re.fullmatch(r"\(([A-Ea-e])\)", s)  # multiple choice: (C) -> C
    if m:
        s = m.group(1)
    return re.sub(r"\s+", " ", s).strip()


# ---------------------------------------------------------------------------- structure

_OPEN, _CLOSE = "([{", ")]}"


def _split_top(s: str, sep: str) -> list[str]:
    """Split on `sep` outside any (), [], {} (brackets of either kind count, for intervals)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(s):
        c = s[i]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif depth == 0 and s.startswith(sep, i):
            parts.append(s[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(s[start:])
    return [p.strip() for p in parts]


def _encloses(s: str) -> bool:
    """True if s[0] is an opening bracket whose match is the last character."""
    depth = 0
    for i, c in enumerate(s):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return i == len(s) - 1
    return False


def _structure(s: str) -> tuple[str, str, list[str]]:
    """("set", "", elems) | ("seq", brackets, elems) | ("scalar", "", [s])."""
    if s.startswith("\\{") and s.endswith("\\}"):
        inner = s[2:-2].strip()
        return "set", "", [] if not inner else _split_top(inner, ",")
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]" and _encloses(s):
        elems = _split_top(s[1:-1], ",")
        if len(elems) > 1:
            return "seq", s[0] + s[-1], elems
    elems = _split_top(s, ",")
    if len(elems) > 1:
        return "set", "", elems  # a bare list of answers: order does not matter
    return "scalar", "", [s]


def _match_unordered(a: list[str], b: list[str], depth: int) -> bool:
    if len(a) != len(b):
        return False
    left = list(b)
    for x in a:
        for j, y in enumerate(left):
            if _equiv(x, y, depth + 1):
                del left[j]
                break
        else:
            return False
    return True


# ---------------------------------------------------------------------------- numbers

# unambiguous (`\d+\.?\d*` backtracked quadratically on long digit runs)
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?(\d+))?")
_RATIO = re.compile(r"([+-]?\d+)\s*/\s*([+-]?\d+)")


def _as_number(s: str) -> Fraction | None:
    s = s.replace(" ", "")
    m = _NUMBER.fullmatch(s)
    if m:
        if m.group(1) and len(m.group(1)) > 3:  # 1e99999: leave to sympy's floats
            return None
        return Fraction(s)
    m = _RATIO.fullmatch(s)
    if m and int(m.group(2)) != 0:
        return Fraction(int(m.group(1)), int(m.group(2)))
    return None


def _close(a: complex, b: complex) -> bool:
    if cmath.isnan(a) or cmath.isnan(b):
        return False
    if cmath.isinf(a) or cmath.isinf(b):
        return a == b
    return abs(a - b) <= max(ABS_TOL, REL_TOL * max(abs(a), abs(b)))


# ---------------------------------------------------------------------------- LaTeX -> sympy

class _Unparseable(Exception):
    """The answer uses LaTeX this converter does not know; compare it as a string only."""


_FUNCS = {"sin": "sin", "cos": "cos", "tan": "tan", "cot": "cot", "sec": "sec", "csc": "csc",
          "arcsin": "asin", "arccos": "acos", "arctan": "atan", "sinh": "sinh",
          "cosh": "cosh", "tanh": "tanh", "log": "log", "ln": "log", "exp": "exp",
          "lfloor": "floor(", "rfloor": ")", "lceil": "ceiling(", "rceil": ")"}
_SYMBOLS = {"pi": "pi", "infty": "oo", "infinity": "oo", "cdot": "*", "times": "*",
            "ast": "*", "div": "/", "e": "E"}
_GREEK = frozenset({"alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta",
                    "theta", "vartheta", "iota", "kappa", "lambda", "mu", "nu", "xi", "rho",
                    "sigma", "tau", "upsilon", "phi", "varphi", "chi", "psi", "omega"})
_SYMPY_NAMES = frozenset({"sqrt", "root", "binomial", "floor", "ceiling", "factorial", "Abs",
                          "pi", "oo", "E", "I", *(v for v in _FUNCS.values() if v.isalpha())})


def _arg(s: str, i: int) -> tuple[str, int]:
    """One TeX argument at s[i:]: a {group}, a \\command, or a single character."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        raise _Unparseable("missing argument")
    if s[i] == "{":
        got = braced(s, i)
        if got is None:
            raise _Unparseable("unbalanced braces")
        return got
    if s[i] == "\\":
        m = re.match(r"\\[A-Za-z]+", s[i:])
        if m:
            return m.group(0), i + m.end()
    return s[i], i + 1


def _tex_to_sympy(s: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out.append({"{": "(", "}": ")"}.get(c, c))
            i += 1
            continue
        m = re.match(r"\\([A-Za-z]+)", s[i:])
        if not m:
            nxt = s[i + 1:i + 2]
            if nxt in "{}":
                out.append("(" if nxt == "{" else ")")
                i += 2
                continue
            raise _Unparseable(f"unknown TeX {s[i:i + 2]!r}")
        name = m.group(1)
        i += m.end()
        if name == "frac":
            a, i = _arg(s, i)
            b, i = _arg(s, i)
            out.append(f"(({_tex_to_sympy(a)})/({_tex_to_sympy(b)}))")
        elif name in ("binom", "dbinom", "tbinom"):
            a, i = _arg(s, i)
            b, i = _arg(s, i)
            out.append(f"binomial({_tex_to_sympy(a)},{_tex_to_sympy(b)})")
        elif name == "sqrt":
            index = None
            while i < len(s) and s[i] == " ":
                i += 1
            if i < len(s) and s[i] == "[":
                j = s.find("]", i)
                if j < 0:
                    raise _Unparseable("unclosed root index")
                index, i = s[i + 1:j], j + 1
            a, i = _arg(s, i)
            inner = _tex_to_sympy(a)
            out.append(f"sqrt({inner})" if index is None
                       else f"(({inner})**(1/({_tex_to_sympy(index)})))")
        elif name in _FUNCS:
            out.append(" " + _FUNCS[name])
        elif name in _SYMBOLS:
            out.append(" " + _SYMBOLS[name] + " ")
        elif name in _GREEK:
            out.append(f" {name} ")
        else:
            raise _Unparseable(f"unknown TeX command \\{name}")
    return "".join(out)


_ALLOWED = re.compile(r"[0-9A-Za-z+\-*/^().,!\s]*")


def _sympy_source(s: str) -> str:
    """Sympy syntax for a normalised answer; `_Unparseable` unless it is safe to parse.

    `parse_expr` runs `eval`, so only digits, letters, operators and parentheses may reach
    it: no underscores (no dunders), no quotes, no attribute access, no Python keywords.
    """
    src = re.sub(r"_\{([A-Za-z0-9]+)\}|_([A-Za-z0-9])", r"\1\2", s)  # x_{1} -> x1
    src = _tex_to_sympy(src)
    src = src.replace("|", " ")
    if "," in src and "binomial" not in src:
        raise _Unparseable("a comma outside a tuple")  # would build a Tuple, not a number
    for m in re.finditer(r"\d[eE]\s*[+-]?\s*(\d+)", src):
        if len(m.group(1)) > 3:  # sympy turns 1e999999999 into an exact Rational first
            raise _Unparseable("exponent too large")
    if re.search(r"\(\s*\)", src):
        raise _Unparseable("empty parentheses")  # `()` is an empty Tuple
    if not _ALLOWED.fullmatch(src) or re.search(r"[A-Za-z]\s*\.|\.\s*[A-Za-z]", src):
        raise _Unparseable("characters outside arithmetic")
    for word in re.findall(r"[A-Za-z][A-Za-z0-9]*", src):
        if keyword.iskeyword(word) or word in ("True", "False", "None"):
            raise _Unparseable(f"Python keyword {word!r}")

    # `x(x+1)` is a product, not a call, unless the name is a known function.
    def product(m: re.Match[str]) -> str:
        return m.group(0) if m.group(1) in _SYMPY_NAMES else f"{m.group(1)}*("

    src = re.sub(r"\b([A-Za-z][A-Za-z0-9]*)\s*\(", product, src)
    src = re.sub(r"(?<![A-Za-z0-9])i(?![A-Za-z0-9])", "I", src)  # 3+4i: the imaginary unit
    src = re.sub(r"(?<![A-Za-z0-9])e(?![A-Za-z0-9])", "E", src)
    return src


def _namespaces() -> tuple[dict[str, Any], dict[str, Any]]:
    """(evaluating, inert) namespaces for `parse_expr`; the inert one keeps every function
    unevaluated so that `99999999!` is seen before it is computed."""
    import sympy as sp

    base: dict[str, Any] = {"__builtins__": {}, "Integer": sp.Integer, "Float": sp.Float,
                            "Rational": sp.Rational, "Symbol": sp.Symbol, "Mul": sp.Mul,
                            "Add": sp.Add, "Pow": sp.Pow, "pi": sp.pi, "E": sp.E, "I": sp.I,
                            "oo": sp.oo}
    funcs = {"sqrt": sp.sqrt, "root": sp.root, "binomial": sp.binomial, "floor": sp.floor,
             "ceiling": sp.ceiling, "factorial": sp.factorial, "Abs": sp.Abs,
             "sin": sp.sin, "cos": sp.cos, "tan": sp.tan, "cot": sp.cot, "sec": sp.sec,
             "csc": sp.csc, "asin": sp.asin, "acos": sp.acos, "atan": sp.atan,
             "sinh": sp.sinh, "cosh": sp.cosh, "tanh": sp.tanh, "log": sp.log, "exp": sp.exp}
    inert = {name: sp.Function(name) for name in funcs}
    return {**base, **funcs}, {**base, **inert}


_NS: tuple[dict[str, Any], dict[str, Any]] | None = None
#: Functions whose value can be as large as e^|x| (trigonometric ones for complex x).
_EXP_LIKE = frozenset({"exp", "sinh", "cosh", "tanh", "sin", "cos", "tan", "cot", "sec", "csc"})
_LOG_LIKE = frozenset({"log", "asin", "acos", "atan"})
#: Largest argument (in bits) of an exp-like function: e^(2^16) has ~94,500 bits.
_EXP_ARG_BITS = 16


def _bits(e: Any) -> float:
    """Upper bound on the bits of any number that evaluating the inert tree `e` builds.

    Raises `_Unparseable` as soon as the bound passes MAX_BITS: the point is to refuse
    `9**9**9**9` or `100000!` before sympy starts computing them.
    """
    import sympy as sp

    if e.is_Integer:
        return abs(int(e)).bit_length() + 1.0
    if e.is_Rational:
        return abs(e.p).bit_length() + e.q.bit_length() + 1.0
    if e.is_Float:
        _, man, exp, bc = e._mpf_
        return max(exp + bc, bc) + 1.0 if man else 1.0
    if e.is_Symbol or e.is_NumberSymbol or e is sp.I or e.is_infinite:
        return 2.0
    args = e.args
    name = type(e).__name__
    if e.is_Pow or name in ("root",):
        base, expo = _bits(args[0]), _bits(args[1])
        if expo > 64:
            raise _Unparseable("exponent too large")
        total = base * max(1.0, _abs_bound(args[1], expo))
    elif name in ("factorial", "binomial"):
        n = _bits(args[0])
        if n > 20:
            raise _Unparseable("factorial too large")
        total = 2.0 ** n * n + sum(_bits(a) for a in args[1:])
    elif name in _EXP_LIKE:
        # |exp(x)|, |sinh x|, |sin x| (x complex) ... <= e^|x|: 1.45 |x| bits, and |x| must
        # be small for that to be bounded at all (exp(exp(exp(100))) is refused here)
        arg = _bits(args[0])
        if arg > _EXP_ARG_BITS:
            raise _Unparseable(f"{name} of a number too large")
        total = 1.45 * _abs_bound(args[0], arg) + arg + 2.0
    elif name in _LOG_LIKE:  # no bigger than (the bits of) the argument
        total = sum(_bits(a) for a in args) + 2.0
    else:  # Add, Mul, floor, ceiling, Abs, sqrt: no bigger than their arguments
        total = sum(_bits(a) for a in args) + len(args)
    if total > MAX_BITS:
        raise _Unparseable("number too large")
    return total


def _abs_bound(e: Any, bits: float) -> float:
    """|value| of a small inert exponent (cheap: `_bits` bounded it), else 2**bits."""
    if not e.free_symbols:
        try:
            return abs(complex(e.doit()))
        except (TypeError, ValueError, OverflowError):
            pass
    return 2.0 ** bits


@functools.lru_cache(maxsize=2048)
def _to_sympy(s: str) -> Any:
    global _NS
    if len(s) > MAX_SYMBOLIC_CHARS:
        raise _Unparseable("too long")
    from sympy import Expr
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    if _NS is None:
        _NS = _namespaces()
    src = _sympy_source(s)
    if not src.strip():
        raise _Unparseable("empty")
    transforms = (*standard_transformations, implicit_multiplication_application, convert_xor)
    live, inert = _NS
    _bits(parse_expr(src, global_dict=dict(inert), local_dict={},
                     transformations=transforms, evaluate=False))
    expr = parse_expr(src, global_dict=dict(live), local_dict={},
                      transformations=transforms, evaluate=True)
    if not isinstance(expr, Expr):
        raise _Unparseable(f"not an expression: {type(expr).__name__}")
    return expr


def _sympy_equal(a: Any, b: Any) -> bool:
    if a == b:
        return True
    free = sorted(a.free_symbols | b.free_symbols, key=str)
    if not free:
        return _close(complex(a.evalf(30)), complex(b.evalf(30)))
    # Equal at a handful of random points is equal for the answers graders see; it is
    # much cheaper and more predictable than simplify().
    rng = random.Random(0)
    for _ in range(5):
        point = {x: rng.uniform(0.5, 2.5) for x in free}
        if not _close(complex(a.evalf(30, subs=point)), complex(b.evalf(30, subs=point))):
            return False
    return True


# ---------------------------------------------------------------------------- comparison

_WORD = re.compile(r"[A-Za-z][A-Za-z ]*[A-Za-z]")


def _scalar_equiv(p: str, g: str) -> bool:
    if p.lower() == g.lower() and _WORD.fullmatch(p):
        return True
    if _WORD.fullmatch(p) and _WORD.fullmatch(g) and not {p.lower(), g.lower()} & _MATH_WORDS:
        return False  # two different words: "yes" vs "no"
    np_, ng = _as_number(p), _as_number(g)
    if np_ is not None and ng is not None:
        return np_ == ng or _close(float(np_), float(ng))
    if p.count("=") == 1 and g.count("=") == 1:  # equations: same up to sides swapped
        lp, rp = p.split("=")
        lg, rg = g.split("=")
        a, b = _to_sympy(f"({lp})-({rp})"), _to_sympy(f"({lg})-({rg})")
        return _sympy_equal(a, b) or _sympy_equal(a, -b)
    if "=" in p or "=" in g:
        return False
    return _sympy_equal(_to_sympy(p), _to_sympy(g))


def _equiv(pred: str, gold: str, depth: int = 0) -> bool:
    if depth > 4:
        return False
    p, g = _normalize(pred), _normalize(gold)
    if p == g:
        return bool(p)
    if not p or not g:
        return False
    up, ug = _split_top(p, "\\cup"), _split_top(g, "\\cup")
    if len(up) > 1 or len(ug) > 1:
        return _match_unordered(up, ug, depth)
    kp, bp, ep = _structure(p)
    kg, bg, eg = _structure(g)
    if kp != kg or bp != bg or len(ep) != len(eg) or len(ep) > MAX_ELEMENTS:
        return False
    if kp == "seq":
        return all(_equiv(x, y, depth + 1) for x, y in zip(ep, eg, strict=True))
    if kp == "set":
        return _match_unordered(ep, eg, depth)
    try:
        return _scalar_equiv(p, g)
    except Exception:  # untrusted text: any failure means "not shown equal"
        return False


def is_equiv(pred: str, gold: str) -> bool:
    """True when `pred` and `gold` denote the same answer; never raises.

    Accepts LaTeX or plain text: numbers within rel 1e-6 / abs 1e-9, `1,000`, `$`, `%`,
    degrees, `\\text{}` units, a leading `x =`, fractions, roots, tuples and intervals
    (ordered, brackets must match), sets (unordered), and expressions equal under sympy.
    Answers that cannot be parsed safely compare as strings only, so an unusual but correct
    notation may score False; it is never scored True by accident.
    """
    try:
        if pred is None or gold is None:
            return False
        if len(str(pred)) > MAX_TEXT_CHARS or len(str(gold)) > MAX_TEXT_CHARS:
            return str(pred).strip() == str(gold).strip()
        return _equiv(str(pred), str(gold))
    except Exception:  # the reward must not crash on agent text
        return False


def score(response_answer: str | None, gold: str) -> float:
    """1.0 if the extracted answer is equivalent to the gold one, else 0.0 (None scores 0)."""
    return 1.0 if response_answer is not None and is_equiv(response_answer, gold) else 0.0
