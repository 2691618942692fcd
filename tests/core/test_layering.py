"""The house's walls, checked by reading the source (nothing is imported, so optional
dependencies do not matter):

- core (`hub/`, the package `skyhub`) imports no env family (`skyhub.envs.*`) and not the
  trainer (`skyhub.trainer`): those plug in through entry points (`skyhub.envs`,
  `skyhub.cli`, `skyhub.agents` in pyproject.toml), so dependencies point one way only;
- every public exception class is defined in an errors module: core's and the base classes in
  `skyhub.errors`, a family's in `skyhub.envs.FAMILY.errors`, the trainer's in
  `skyhub.trainer.errors` and the Tinker server's in `skyhub.trainer.tinker.exceptions` (so a
  new family never edits core), with the exemptions below and their reasons; that each is a
  `SkyhubError` is tests/core/test_errors.py's (it imports them);
- the floors inside: the contract (hub/*.py) imports no layer folder (so the registry
  imports no `remote/`, and `check_env` sits in `eval/`, above what it runs); no family
  imports another (what they share is core's, e.g. `skyhub.shell`); `vector/` takes from
  `skyhub.sandbox` only the names of its `__all__`; and no import cycle in core and the
  families, imports inside functions included.
"""

from __future__ import annotations

import ast
import builtins
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "support"))
from import_graph import cycles, import_graph  # noqa: E402

CORE = ROOT / "hub"
PACKAGES = (ROOT / "hub", ROOT / "envs", ROOT / "trainer")  # skyhub, skyhub.envs, .trainer
ERRORS = ROOT / "hub" / "errors.py"
#: The modules that define public exceptions (paths under the repository).
ERROR_MODULES = re.compile(r"^(hub/errors|envs/[a-z_]+/errors|trainer/errors"
                           r"|trainer/tinker/exceptions)\.py$")

#: Code that runs inside a sandbox, on the sandbox's own python3, where skyhub is not
#: installed: it cannot import `skyhub.errors`, so its exceptions stay where they are.
IN_SANDBOX = {
    "envs/python/sandbox_runner.py": "python-code's test runner, run as `python3 -I "
                                     "sandbox_runner.py` in the sandbox (standard library "
                                     "only)",
    "envs/python/sandbox_program.py": "the program side of that runner and its wire, run by "
                                      "it as `python3 -I -c SOURCE` (standard library only)",
    "envs/python/image/kernel_bridge.py": "the Python family's kernel bridge, copied into "
                                          "its image (standard library and ipykernel only)",
    **{f"hub/sandbox/guest/{m}.py": "the in-container daemon, shipped as a zipapp into "
                                   "every Docker sandbox (standard library only)"
       for m in ("__init__", "__main__", "harden", "procs", "server", "tars", "trees")},
}

#: Private exceptions (a leading `_`) may stay in their module when they are control flow
#: within it: raised and caught (or turned into a reply) by the same module, so no user ever
#: sees one, and a class in `skyhub.errors` would advertise something nobody can catch. The
#: test checks that the module itself catches each one. Today these are: the vector
#: executors' `_Terminated` (SIGTERM unwinding a worker), the OpenAI agent's `_Transient` (an
#: attempt worth retrying), the remote server's `_ProtocolError`/`_OpTimeout`
#: (turned into error replies or a closed session), SQL synth's `_NotApplicable` (draw another
#: template), the Python family's `_SandboxFailed`/`_Unparseable`/`_BadReply` (graded as an
#: infra error, compared as a string, a broken kernel), and the Tinker server's
#: `_Refused`/`_TooLarge` (answered 401/413).
PRIVATE = re.compile(r"^_")

_EXCEPTION_NAME = re.compile(r"(Error|Exception|Warning|Exit|Interrupt)$")
_BUILTIN_EXCEPTIONS = {name for name, obj in vars(builtins).items()
                       if isinstance(obj, type) and issubclass(obj, BaseException)}


def _sources(*dirs: Path) -> dict[str, ast.Module]:
    return {str(p.relative_to(ROOT)): ast.parse(p.read_text(encoding="utf-8"), str(p))
            for d in dirs for p in sorted(d.rglob("*.py")) if "__pycache__" not in p.parts}


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _base_name(node.value)
    return ""


def _exception_classes(trees: dict[str, ast.Module]) -> dict[str, list[str]]:
    """Each file's exception classes: those whose base is a builtin exception, one named like
    an exception (`...Error`, `...Exception`: third-party ones), or another such class found
    here (to a fixpoint, across files, by name)."""
    classes = [(path, node) for path, tree in trees.items() for node in ast.walk(tree)
               if isinstance(node, ast.ClassDef)]
    known = set(_BUILTIN_EXCEPTIONS)
    found: dict[str, list[str]] = {}
    changed = True
    while changed:
        changed = False
        for path, node in classes:
            if node.name in found.get(path, ()):
                continue
            bases = {_base_name(b) for b in node.bases}
            if bases & known or any(_EXCEPTION_NAME.search(b) for b in bases):
                found.setdefault(path, []).append(node.name)
                known.add(node.name)
                changed = True
    return found


def _ancestors(tree: ast.Module, name: str) -> set[str]:
    """`name` and its base classes' names, following the classes this module defines and the
    builtin exceptions' own bases (so `except Exception` catches a `_X(ValueError)`)."""
    bases = {n.name: {_base_name(b) for b in n.bases} for n in ast.walk(tree)
             if isinstance(n, ast.ClassDef)}
    seen, todo = set(), [name]
    while todo:
        one = todo.pop()
        if one not in seen:
            seen.add(one)
            todo += bases.get(one, ())
    return seen | {c.__name__ for one in seen & _BUILTIN_EXCEPTIONS
                   for c in getattr(builtins, one).__mro__}


def _caught_names(tree: ast.Module) -> set[str]:
    """Names in the module's `except` clauses, and passed to an `exception_handler(...)`."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler):
            types = ([] if node.type is None else node.type.elts
                     if isinstance(node.type, ast.Tuple) else [node.type])
            names |= {_base_name(t) for t in types} if types else {"BaseException"}
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "exception_handler"):
            names |= {_base_name(a) for a in node.args}
    return names


# ------------------------------------------------------------------------------------ layers
def _imported_modules(tree: ast.Module) -> list[tuple[int, str]]:
    """Every absolute module an import statement (anywhere: in functions, under
    TYPE_CHECKING) or `importlib.import_module("...")` names, with its line."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            if node.module == "skyhub":  # from skyhub import envs / trainer
                out += [(node.lineno, f"skyhub.{a.name}") for a in node.names]
        elif (isinstance(node, ast.Call) and _base_name(node.func) in ("import_module",
                                                                       "__import__")
              and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            out.append((node.lineno, node.args[0].value))
    return out


def test_core_imports_no_family_and_no_trainer() -> None:
    trees = _sources(CORE)
    assert "hub/cli/main.py" in trees and "hub/registry.py" in trees  # the scan sees core
    wrong = [f"{path}:{line} imports {module}"
             for path, tree in trees.items() for line, module in _imported_modules(tree)
             if re.match(r"skyhub\.(envs|trainer)(\.|$)", module)]
    assert not wrong, ("core must not import env families or the trainer; reach them "
                       "through an entry point (pyproject.toml):\n" + "\n".join(wrong))


def test_the_scan_sees_such_an_import() -> None:
    tree = ast.parse("def f():\n    from skyhub.envs.sql import cli\n"
                     "import skyhub.trainer.loop\nfrom skyhub import trainer\n"
                     "importlib.import_module('skyhub.envs.search')\n")
    assert sorted(m for _, m in _imported_modules(tree)) == [
        "skyhub", "skyhub.envs.search", "skyhub.envs.sql", "skyhub.trainer",
        "skyhub.trainer.loop"]


# ------------------------------------------------------------------------- floors and cycles
def _graph() -> dict[str, set[str]]:
    """Core's and the families' modules -> what each imports, imports inside functions
    included (tests/support/import_graph.py)."""
    graph = import_graph(CORE, "skyhub")
    graph.update(import_graph(ROOT / "envs", "skyhub.envs"))
    return graph


#: The contract an env author reads: core's top-level modules (hub/*.py, but the package's
#: `__init__`, the facade above everything: `skyhub.make` reaches `skyhub.remote`).
def _contract(graph: dict[str, set[str]]) -> set[str]:
    return {m for m in graph if m.count(".") == 1 and (CORE / f"{m.split('.')[1]}.py").is_file()}


def test_the_contract_imports_no_layer_above_it() -> None:
    """env, task, registry, spaces, tags, chat, errors and the kwargs check import only each
    other: not `eval/` (check_env, which replays episodes, is `skyhub.eval.checks`), not
    `remote/` (the registry knows nothing of served envs), not `vector/`, `sandbox/`,
    `shell/`, ... ."""
    graph = _graph()
    contract = _contract(graph)
    assert {"skyhub.registry", "skyhub.env", "skyhub.env_kwargs", "skyhub.task"} <= contract
    assert "skyhub.checks" not in graph, "check_env lives in skyhub.eval.checks, above eval/"
    wrong = [f"{m} imports {t}" for m in sorted(contract) for t in sorted(graph[m])
             if t.startswith("skyhub.") and t not in contract]
    assert not wrong, ("the contract modules (hub/*.py) import only each other; move what "
                       "needs a layer above into that layer:\n" + "\n".join(wrong))


def test_the_registry_does_not_import_remote_and_stays_small() -> None:
    graph = _graph()
    assert not {t for t in graph["skyhub.registry"] if t.startswith("skyhub.remote")}
    lines = len((CORE / "registry.py").read_text(encoding="utf-8").splitlines())
    assert lines < 300, f"hub/registry.py has {lines} lines: its kwargs check is env_kwargs.py"


def _family(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["skyhub", "envs"] else None


def test_no_family_imports_another_family() -> None:
    """What two families share lives in core (the shell families' session, protocol, judge
    and episode flow are `skyhub.shell`), so each family can be read, moved or removed
    alone."""
    graph = _graph()
    assert _family("skyhub.envs.harbor.env") == "harbor" and "skyhub.envs.harbor.env" in graph
    wrong = [f"{m} imports {t}" for m in sorted(graph) if _family(m)
             for t in sorted(graph[m]) if _family(t) not in (None, _family(m))]
    assert not wrong, ("a family imports another; move what they share into core:\n"
                       + "\n".join(wrong))


def _sandbox_reaches(tree: ast.Module, public: set[str]) -> list[str]:
    """What a module takes from `skyhub.sandbox` beyond its public names: a submodule
    imported, a name not in the package's `__all__`, or a submodule named in a string
    (`sys.modules.get("skyhub.sandbox.base")`)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("skyhub.sandbox.")]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("skyhub.sandbox."):
                out.append(node.module)
            elif node.module == "skyhub.sandbox":
                out += [f"skyhub.sandbox.{a.name}" for a in node.names if a.name not in public]
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and node.value.startswith("skyhub.sandbox.")):
            out.append(node.value)
    return out


def test_vector_uses_only_the_sandbox_public_names() -> None:
    init = ast.parse((CORE / "sandbox" / "__init__.py").read_text(encoding="utf-8"))
    public = set(next(ast.literal_eval(n.value) for n in init.body if isinstance(n, ast.Assign)
                      and any(getattr(t, "id", "") == "__all__" for t in n.targets)))
    assert {"create", "reap_owner", "owner_start_time"} <= public
    wrong = [f"{path}: {name}" for path, tree in _sources(CORE / "vector").items()
             for name in _sandbox_reaches(tree, public)]
    assert not wrong, ("skyhub.vector reaches into the sandbox's internals; use (or add) a "
                       "name of skyhub.sandbox.__all__:\n" + "\n".join(wrong))


def test_the_sandbox_scan_sees_internals() -> None:
    tree = ast.parse("from skyhub.sandbox.local_scratch import start_time\n"
                     "def f():\n    from skyhub.sandbox import create, _private\n"
                     "    return sys.modules.get('skyhub.sandbox.base')\n")
    assert sorted(_sandbox_reaches(tree, {"create"})) == [
        "skyhub.sandbox._private", "skyhub.sandbox.base", "skyhub.sandbox.local_scratch"]


def test_no_import_cycle_in_core_and_the_families() -> None:
    """Counting imports inside functions: a cycle hidden in a function still makes a reader
    hold both modules at once (the trainer's own check is tests/trainer/
    test_no_import_cycles.py)."""
    graph = _graph()
    assert {"skyhub.vector.executors", "skyhub.sandbox.pool", "skyhub.envs.search.index"} \
        <= set(graph)
    found = cycles(graph)
    assert found == [], "import cycles (a -> b -> ... -> a):\n" + "\n".join(
        " -> ".join([*c, c[0]]) for c in found)


# -------------------------------------------------------------------------------- exceptions
def test_every_public_exception_is_defined_in_an_errors_module() -> None:
    trees = _sources(*PACKAGES)
    for path in IN_SANDBOX:
        assert path in trees, f"{path} is exempted as in-sandbox code but no longer exists"
    found = _exception_classes(trees)
    assert {"SkyhubError", "ChannelBroken"} <= set(found[str(ERRORS.relative_to(ROOT))])
    assert "WorkerLost" in found["envs/sql/errors.py"]
    assert "Unsupported" in found["trainer/tinker/exceptions.py"]
    wrong, uncaught = [], []
    for path, names in sorted(found.items()):
        if ERROR_MODULES.match(path) or path in IN_SANDBOX:
            continue
        caught = _caught_names(trees[path])
        for name in names:
            if not PRIVATE.match(name):
                wrong.append(f"{path}: {name}")
            elif not _ancestors(trees[path], name) & caught:
                uncaught.append(f"{path}: {name}")
    assert not wrong, ("define these in an errors module (hub/errors.py for core, the "
                       "family's errors.py, trainer/errors.py) as subclasses of a skyhub "
                       "error, with a docstring: when it is raised, how to fix it:\n"
                       + "\n".join(wrong))
    assert not uncaught, ("private exceptions must be caught in their own module (else they "
                          "reach users: make them public, in an errors module):\n"
                          + "\n".join(uncaught))


def test_the_scan_finds_exceptions_by_their_bases() -> None:
    trees = {"a.py": ast.parse("class A(ValueError): pass\nclass B(A): pass\n"
                               "class C(typer.Exit): pass\nclass D: pass\n"),
             "b.py": ast.parse("class E(B): pass\nclass F(SomeLibError): pass\n")}
    assert _exception_classes(trees) == {"a.py": ["A", "B", "C"], "b.py": ["E", "F"]}


def test_each_errors_module_exports_every_exception_it_defines() -> None:
    modules = [path for path in _sources(*PACKAGES) if ERROR_MODULES.match(path)]
    assert {"hub/errors.py", "envs/sql/errors.py", "envs/harbor/errors.py", "trainer/errors.py",
            "trainer/tinker/exceptions.py"} <= set(modules)
    for path in modules:
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        defined = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        exported = next(ast.literal_eval(n.value) for n in tree.body
                        if isinstance(n, ast.Assign)
                        and any(getattr(t, "id", "") == "__all__" for t in n.targets))
        assert sorted(defined) == sorted(exported), path


# ------------------------------------------------------------- commands through entry points
def test_family_and_trainer_commands_come_through_entry_points() -> None:
    import subprocess
    import sys
    from importlib.metadata import entry_points

    from typer.testing import CliRunner

    from skyhub.cli.main import app

    assert {"sql", "search", "harbor", "train", "tinker"} <= {
        ep.name for ep in entry_points(group="skyhub.cli")}
    code = ("import sys; from skyhub.cli.main import app; "
            "print(sorted(m for m in sys.modules if m.startswith(('skyhub.envs', "
            "'skyhub.trainer'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr  # loaded when used only
    listed = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    for name in ("sql", "search", "harbor", "train", "tinker"):
        assert f" {name} " in listed


def test_an_entry_point_may_be_a_command_function_and_a_broken_one_is_skipped(
        monkeypatch: Any) -> None:
    from typer.testing import CliRunner

    import skyhub.cli.main as main
    from skyhub.errors import UsageError

    def hello(name: str) -> None:
        """Say hello."""
        if name == "nobody":
            raise UsageError("nobody is not a name")
        print(f"hello {name}")

    class EP:
        def __init__(self, name: str, obj: Any) -> None:
            self.name, self.value, self._obj = name, f"tests:{name}", obj

        def load(self) -> Any:
            if isinstance(self._obj, Exception):
                raise self._obj
            return self._obj

    eps = {"hello-test": EP("hello-test", hello),
           "broken-test": EP("broken-test", ImportError("no module named nowhere"))}
    monkeypatch.setattr(main, "_plugin_entry_points", lambda: eps)
    monkeypatch.setattr(main, "_plugin_commands", {})
    runner = CliRunner()
    assert runner.invoke(main.app, ["hello-test", "you"]).output == "hello you\n"
    failed = runner.invoke(main.app, ["hello-test", "nobody"])
    assert failed.exit_code == 2 and "nobody is not a name" in failed.output
    listed = runner.invoke(main.app, ["--help"])
    assert "│ hello-test " in listed.output and "│ broken-test " not in listed.output
    assert "the 'broken-test' commands could not be loaded" in listed.output
