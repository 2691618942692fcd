"""No shims, aliases or renamed kwargs: every name has one spelling.

skyhub is 0.1.0 and no user depends on an old name, so a module that moved is not re-exported
from where it was, a renamed class, function or constant has no second name, and a renamed
kwarg is refused like any unknown one (`test_env_kwargs.py` checks the message). These tests
read the source (`hub/`, `envs/`, `trainer/`) with `ast`, so they catch a re-added shim without
importing the trainer, and render both `skyhub new` templates to check that a new env author
starts on current names only.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from skyhub.share.scaffold import env_names, render

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("hub", "envs", "trainer")

#: The modules that only re-exported moved code, and the in-sandbox daemon's and the Tinker
#: errors' old homes.
GONE_MODULES = ["skyhub.agents", "skyhub.compare", "skyhub.evaluate", "skyhub.openai_agent",
                "skyhub.suites", "skyhub.scaffold", "skyhub.protocol", "skyhub.report",
                "skyhub.publish", "skyhub.deprecation", "skyhub.sandbox.agent"]
GONE_FILES = [f"hub/{m.split('.')[-1]}.py" for m in GONE_MODULES if m.count(".") == 1]
GONE_FILES += ["hub/sandbox/agent.py"]

#: The issue's check: old names that must not appear anywhere in the source. (`.` as in grep.)
OLD_NAMES = re.compile(r"skyhub.protocol|renamed_kwargs|from_agent|AGENT_FILE")

#: How a shim or alias introduces itself (in a docstring or comment).
KEPT_FOR_OLD = re.compile(r"kept so old|old imports (keep )?work|its old home|(the|its) old name"
                          r"|re-exported here, so", re.IGNORECASE)

#: Old names of renamed things, per module that held them: none may be defined or assigned
#: there again, nor listed in its `__all__`. (The module may import a current name that happens to
#: be spelled the same, as the rollout imports `skyhub.chat.Episode`.)
OLD_ALIASES = {
    "trainer/rollout.py": {"Episode"},  # Trajectory
    "trainer/learner.py": {"token_logprobs"},  # skyhub.trainer.policy.token_logprobs
    "envs/toy/env.py": {"RecallEnv"},  # skyhub.envs.toy.recall.RecallEnv
    "hub/sandbox/images.py": {"AGENT_FILE"},
    "hub/sandbox/docker_channel.py": {"AgentChannel", "AGENT_PATH", "agent_setup_tar"},
    "hub/sandbox/base.py": {"from_agent"},  # ExecResult.from_guest
}


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")
                  if "__pycache__" not in p.parts)


def bound_names(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """The names a module or class body binds (def, class, assignment, import), by name."""
    names: dict[str, ast.stmt] = {}
    for st in body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[st.name] = st
        elif isinstance(st, (ast.Assign, ast.AnnAssign)):
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            names.update({t.id: st for t in targets if isinstance(t, ast.Name)})
        elif isinstance(st, (ast.Import, ast.ImportFrom)):
            names.update({(a.asname or a.name).split(".")[0]: st for a in st.names})
    return names


def aliases(body: list[ast.stmt]) -> list[str]:
    """`new = old` in a module or class body, where `old` is defined in that same body: a second
    name for one thing (`Episode = Trajectory`, `from_agent = from_guest`)."""
    own = {n for n, st in bound_names(body).items() if not isinstance(st, (ast.Import,
                                                                           ast.ImportFrom))}
    found = [ast.unparse(st) for st in body
             if isinstance(st, ast.Assign) and isinstance(st.value, ast.Name)
             and st.value.id in own]
    for st in body:
        if isinstance(st, ast.ClassDef):
            found += [f"{st.name}: {a}" for a in aliases(st.body)]
    return found


def is_reexport(tree: ast.Module) -> bool:
    """A module whose body is only imports (and `__all__`): a shim of code that moved."""
    body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
    if not any(isinstance(st, (ast.Import, ast.ImportFrom)) for st in body):
        return False
    return all(isinstance(st, (ast.Import, ast.ImportFrom))
               or (isinstance(st, ast.Assign)
                   and [ast.unparse(t) for t in st.targets] == ["__all__"])
               for st in body)


def test_the_old_names_are_nowhere_in_the_source() -> None:
    """`grep -rn "skyhub.protocol\\|renamed_kwargs\\|from_agent\\|AGENT_FILE" hub envs trainer`
    finds nothing (templates and data files included)."""
    hits = []
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*"):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue  # binary data (a SQLite file, an image)
            hits += [f"{path.relative_to(REPO)}:{i}: {line.strip()}"
                     for i, line in enumerate(text.splitlines(), 1) if OLD_NAMES.search(line)]
    assert not hits, "\n".join(hits)


def test_no_source_keeps_an_old_name_working() -> None:
    hits = [f"{path.relative_to(REPO)}:{i}: {line.strip()}" for path in sources()
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if KEPT_FOR_OLD.search(line)]
    assert not hits, "\n".join(hits)


@pytest.mark.parametrize("module", GONE_MODULES)
def test_the_shim_modules_are_gone(module: str) -> None:
    assert importlib.util.find_spec(module) is None, f"{module} is back"


def test_the_shim_files_are_gone() -> None:
    assert len(GONE_FILES) == 11
    back = [f for f in GONE_FILES if (REPO / f).exists()]
    assert not back, back


def test_trainer_tinker_errors_is_no_reexport() -> None:
    """`skyhub.trainer.tinker.errors` re-exported `skyhub.errors.Unsupported`. The Tinker
    errors may live in the Tinker package, but as definitions, not as a second path."""
    path = REPO / "trainer" / "tinker" / "errors.py"
    if path.exists():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert any(isinstance(st, ast.ClassDef) for st in tree.body), "a re-export is back"


def test_no_module_is_a_reexport_and_no_name_has_an_alias() -> None:
    """Across hub/, envs/ and trainer/: no module (but a package's `__init__`, which gathers
    its package's names) only re-exports, no `new = old` alias, no `import x as x`."""
    found = []
    for path in sources():
        rel = path.relative_to(REPO)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if path.name not in ("__init__.py", "__main__.py"):
            if is_reexport(tree):
                found.append(f"{rel}: only re-exports")
            found += [f"{rel}:{st.lineno}: {ast.unparse(st)}" for st in tree.body
                      if isinstance(st, ast.ImportFrom)
                      and any(a.asname == a.name for a in st.names)]
        found += [f"{rel}: {a}" for a in aliases(tree.body)]
    assert not found, "\n".join(found)


def test_the_old_aliases_are_not_bound() -> None:
    back = []
    for rel, old in OLD_ALIASES.items():
        path = REPO / rel
        if not path.exists():
            continue  # the module itself moved: its old names went with it
        tree = ast.parse(path.read_text(encoding="utf-8"))
        scopes = [tree.body] + [st.body for st in ast.walk(tree) if isinstance(st, ast.ClassDef)]
        back += [f"{rel}: {n}" for body in scopes for n, st in bound_names(body).items()
                 if n in old and not isinstance(st, (ast.Import, ast.ImportFrom))]
        exported = [st.value for st in tree.body if isinstance(st, ast.Assign)
                    and [ast.unparse(t) for t in st.targets] == ["__all__"]]
        back += [f"{rel}: {n} in __all__" for value in exported
                 for n in ast.literal_eval(value) if n in old]
    assert not back, back


@pytest.mark.parametrize("sandbox", [False, True], ids=["text", "sandbox"])
def test_skyhub_new_templates_import_only_current_names(sandbox: bool) -> None:
    """Every `from skyhub... import name` and `import skyhub...` in the files `skyhub new`
    writes resolves now, and none names a removed module."""
    files = render(env_names("demo-env"), sandbox=sandbox)
    imports: list[tuple[str, str | None]] = []

    def ours(module: str) -> bool:  # skyhub's, not the package being written (skyhub_demo_env)
        return module == "skyhub" or module.startswith("skyhub.")

    for name, text in files.items():
        if not name.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(text, filename=name)):
            if isinstance(node, ast.ImportFrom) and ours(node.module or ""):
                imports += [(node.module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                imports += [(a.name, None) for a in node.names if ours(a.name)]
    modules = {m for m, _ in imports}
    assert {"skyhub.env", "skyhub.tags", "skyhub.registry"} <= modules  # what they build on
    assert not modules & set(GONE_MODULES), modules & set(GONE_MODULES)
    for module, name in imports:
        loaded = importlib.import_module(module)
        if name is not None:
            assert hasattr(loaded, name) or importlib.util.find_spec(f"{module}.{name}"), \
                f"from {module} import {name}"
