"""A package's import graph as Python would run it, imports inside functions included.

    graph = import_graph(Path("trainer"), "skyhub.trainer")
    graph["skyhub.trainer.loop"]      # {"skyhub.trainer.config", "torch", "skyhub", ...}
    cycles(graph)                     # [] when no module of the package imports itself back

A cycle can hide from `python -c "import ..."` by putting one of its imports inside a function
(it then runs later, when both modules exist): the modules still depend on each other, so a
reader has to hold both in mind. So every `import` and `from ... import` in a module counts,
wherever it sits (function, class, `try`), except under `if TYPE_CHECKING:` (annotations
only: it never runs). Relative imports (`from . import x`, `from ..pkg import y`) are
resolved against the module's package. Not counted: the implicit import of a module's parent
packages, and `importlib.import_module` with a computed name (neither is a line of the
module that names what it depends on).

Names are dotted module names: `package_name` plus the path under `package_dir`
(`__init__.py` is its package's name). An imported name inside the package becomes the module
it names (`from skyhub.trainer import dist` -> `skyhub.trainer.dist`; `from skyhub.trainer.
config import TrainConfig` -> `skyhub.trainer.config`); a name outside is kept as written
(`from skyhub.errors import UsageError` -> `skyhub.errors`, `import torch.distributed` ->
`torch.distributed`), so a layering test can check what a package reaches outside itself.
"""

from __future__ import annotations

import ast
from pathlib import Path


def import_graph(package_dir: Path | str, package_name: str) -> dict[str, set[str]]:
    """Every module of the package (directories with an `__init__.py` all the way down from
    `package_dir`) -> the modules it imports (see the module docstring). A module that imports
    nothing maps to an empty set; a module never maps to itself."""
    root = Path(package_dir)
    files = _modules(root, package_name)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in _runtime_nodes(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    targets.add(_resolve(alias.name, files))
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, name, is_package)
                for alias in node.names:
                    sub = f"{base}.{alias.name}" if base else alias.name
                    targets.add(sub if sub in files else _resolve(base, files))
        targets.discard(name)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle for every group of modules that import each other (a strongly connected
    component of the graph, counting only edges between its keys), as the path from the
    group's first module (by name) back to it: `["a", "b", "c"]` is a -> b -> c -> a; a
    module that imports itself is `["a"]`. Sorted; empty when there is none."""
    found = []
    for component in _components(graph):
        start = min(component)
        if len(component) == 1 and start not in graph[start]:
            continue
        found.append(_path_back(graph, start, component))
    return sorted(found)


# ------------------------------------------------------------------------------ parsing
def _modules(root: Path, package_name: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    if not (root / "__init__.py").is_file():
        return out
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts:
            continue
        if any(not (root.joinpath(*rel.parts[:i]) / "__init__.py").is_file()
               for i in range(1, len(rel.parts))):
            continue  # a directory that is not a package (templates, data)
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join([package_name, *parts])] = path
    return out


def _runtime_nodes(tree: ast.AST):
    """Every import node that can run: all of them, less those under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a `from X import ...` reads from (relative levels resolved)."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    package = parts if is_package else parts[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _resolve(name: str, files: dict[str, Path]) -> str:
    """`name` if it is a module of the package or outside it; else the longest prefix of it
    that is a module of the package (`import pkg.mod.attr` cannot happen, but `pkg.sub`
    missing from a listing can)."""
    if name in files:
        return name
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:i]) in files:
            return ".".join(parts[:i])
    return name


# ------------------------------------------------------------------------------ cycles
def _components(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(t for t in graph[root] if t in graph)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(t for t in graph[child] if t in graph))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                out.append(component)
    return out


def _path_back(graph: dict[str, set[str]], start: str, component: set[str]) -> list[str]:
    """The shortest path start -> ... -> start inside `component` (breadth first)."""
    if start in graph[start]:
        return [start]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return path[::-1]
                if child not in came_from:
                    came_from[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"{start} has no path back in its own component")
