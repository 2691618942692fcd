"""Bug localization scored as CodeScout scores it: precision, recall and F1 of the locations
an agent names (or edits) against those of the gold patch, at three levels.

- **file**: a repository path (`pkg/mod.py`);
- **module**: a class, `pkg/mod.py:Cls` (nested: `pkg/mod.py:Outer.Inner`);
- **entity**: a function or method, `pkg/mod.py:func` or `pkg/mod.py:Cls.meth`. A method
  named `__init__` stands for its class (`pkg/mod.py:Cls`), as in CodeScout's data.

The gold locations are those a patch touches (`patch_locations`): each changed line belongs to
the outermost function around it (with the classes around that function: a helper nested in a
method counts as the method), or to its class when it lies in a class body outside any method
(the class is then a touched module too), or to its file only. Removed lines are looked up in
the old source, added lines in the new one, so a function the patch adds counts too
(CodeScout's "edited" and "added" entities). Modules are the classes of those entities that
are methods: a standalone function is not a module.

An agent names locations in CodeScout's answer format (`parse_answer`):

    pkg/mod.py
    class: Cls
    function: meth

    pkg/other.py
    function: helper

or edits them (the same `patch_locations` over the diff of its working tree).

Scores (`score`): per level, precision = |pred & gold| / |pred|, recall = |pred & gold| /
|gold|, F1 their harmonic mean; nothing predicted where nothing is gold is a perfect 1.0 (for
modules and entities: a fix that touches no class), anything predicted where nothing is gold
0.0. The reward is the weighted mean of the three F1s (CodeScout's reward is their weighted
sum; with weights 1, 1, 1 it is 3x this one, the same ranking and the same GRPO advantages).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .diffs import parse_patch

LEVELS = ("file", "module", "entity")


@dataclass(frozen=True)
class Locations:
    files: frozenset[str] = frozenset()
    modules: frozenset[str] = frozenset()
    entities: frozenset[str] = frozenset()

    @classmethod
    def of(cls, files: Iterable[str] = (), entities: Iterable[str] = (),
           modules: Iterable[str] = ()) -> Locations:
        """Locations from files, entities (`path:Qual.name`) and modules; the modules also
        get the class of every entity that is a method (`path:Cls.meth` -> `path:Cls`),
        and the files every entity's file."""
        raw = set(entities)
        mods = set(modules) | {e.rsplit(".", 1)[0] for e in raw if "." in e.split(":", 1)[1]}
        return cls(frozenset(set(files) | {e.split(":", 1)[0] for e in raw}), frozenset(mods),
                   frozenset(_entity(e) for e in raw))

    def level(self, name: str) -> frozenset[str]:
        return {"file": self.files, "module": self.modules, "entity": self.entities}[name]


def _entity(e: str) -> str:
    return e[: -len(".__init__")] if e.endswith(".__init__") else e


# --- what a patch touches -------------------------------------------------------------------

def definitions(source: str) -> list[tuple[int, int, str, bool]]:
    """(first line, last line, qualified name, is a class) of every class and of every
    function that is not nested in another function, outermost first. Source that does not
    parse has none (its lines count for the file only)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out: list[tuple[int, int, str, bool]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = prefix + child.name
                out.append((_first_line(child), child.end_lineno or child.lineno, name, True))
                walk(child, name + ".")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((_first_line(child), child.end_lineno or child.lineno,
                            prefix + child.name, False))
            elif not isinstance(child, ast.expr):
                walk(child, prefix)  # if/try/with blocks at module or class level

    walk(tree, "")
    return out


def _first_line(node: ast.AST) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decorators])  # type: ignore[attr-defined]


def entity_at(defs: list[tuple[int, int, str, bool]], line: int) -> tuple[str, bool] | None:
    """What a line belongs to, and whether that is a class: the function around it
    (outermost), else the innermost class around it, else None (module level)."""
    best: tuple[int, str] | None = None  # (span length, name) of the innermost class
    for first, last, name, is_class in defs:
        if not first <= line <= last:
            continue
        if not is_class:
            return name, False
        if best is None or last - first < best[0]:
            best = (last - first, name)
    return (best[1], True) if best else None


def patch_locations(patch: str, read_old: Callable[[str], str | None]) -> Locations:
    """The locations `patch` touches, with `read_old(path)` the file's text before it (None
    for a file that did not exist). Only Python files have modules and entities."""
    files: set[str] = set()
    entities: set[str] = set()
    classes: set[str] = set()
    for fd in parse_patch(patch):
        files.add(fd.path)
        if not fd.path.endswith(".py"):
            continue
        old = (read_old(fd.old_path) if fd.old_path else None) or ""
        new = fd.apply(old) if fd.new_path else ""
        for text, lines in ((old, fd.removed_lines()), (new, fd.added_lines())):
            defs = definitions(text)
            for n in lines:
                hit = entity_at(defs, n)
                if hit is not None:
                    entities.add(f"{fd.path}:{hit[0]}")
                    if hit[1]:  # a class body: the class is touched too
                        classes.add(f"{fd.path}:{hit[0]}")
    return Locations.of(files, entities, classes)


# --- what an agent names --------------------------------------------------------------------

def parse_answer(text: str) -> Locations:
    """Locations from CodeScout's answer format (see the module doc): a line ending in `.py`
    opens a file; `class: C` sets the class for the lines after it until a blank line or
    the next file; `function: f` / `method: f` (or `C.f`) names an entity of the current
    file. Anything else is ignored, as are functions named before any file and a class
    named with no function under it (CodeScout's parser keeps only named functions)."""
    files: set[str] = set()
    entities: set[str] = set()
    current_file: str | None = None
    current_class: str | None = None
    for raw in text.strip("` \n").splitlines():
        line = raw.strip()
        if not line:
            current_class = None
        elif line.endswith(".py"):
            current_file, current_class = line, None
            files.add(line)
        elif line.startswith("class:"):
            current_class = line[len("class:"):].strip() or None
        elif line.startswith(("function:", "method:")) and current_file:
            words = line.split(":", 1)[1].split()
            if not words:
                continue
            name = words[0].strip("() ")
            if "." in name:
                entities.add(f"{current_file}:{name}")
            else:
                entities.add(f"{current_file}:{current_class}.{name}" if current_class
                             else f"{current_file}:{name}")
    return Locations.of(files, entities)


# --- scores ---------------------------------------------------------------------------------

def prf(pred: frozenset[str], gold: frozenset[str]) -> tuple[float, float, float]:
    """(precision, recall, F1); see the module doc for the empty cases."""
    if not pred and not gold:
        return 1.0, 1.0, 1.0
    if not pred or not gold:
        return 0.0, 0.0, 0.0
    tp = len(pred & gold)
    p, r = tp / len(pred), tp / len(gold)
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def score(pred: Locations, gold: Locations,
          weights: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> dict[str, float]:
    """Per level `<level>_precision`, `_recall`, `_f1`, and `reward`: the weighted mean of
    the F1s (weights for file, module, entity)."""
    out: dict[str, float] = {}
    for level in LEVELS:
        p, r, f = prf(pred.level(level), gold.level(level))
        out |= {f"{level}_precision": p, f"{level}_recall": r, f"{level}_f1": f}
    out["reward"] = sum(w * out[f"{lv}_f1"] for w, lv in zip(weights, LEVELS, strict=True)) \
        / sum(weights)
    return out


__all__ = ["LEVELS", "Locations", "definitions", "entity_at", "parse_answer",
           "patch_locations", "prf", "score"]
