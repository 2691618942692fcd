"""skyhub's exceptions: every one is a `SkyhubError` (one `except` catches them all), each keeps
the builtin base callers may catch, a missing package is a `MissingDependency` wherever it is
found missing, and misuse of the API is a `UsageError` (still a `ValueError`).

Where each is defined (core's in `skyhub.errors`, a family's or the trainer's in its own
package) is tests/core/test_layering.py's: it reads the source. This file imports the errors
modules and drives real code paths, with the missing package simulated at its import."""

from __future__ import annotations

import ast
import builtins
import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

import skyhub
from skyhub.errors import (
    DataNotFound,
    EnvNotFound,
    MissingDependency,
    SandboxSDKMissing,
    SandboxUnavailable,
    SkyhubError,
    UsageError,
)

ROOT = Path(__file__).resolve().parents[2]

#: Every module that defines public exceptions: core's, then the families' and the trainer's.
ERROR_MODULES = ["skyhub.errors", "skyhub.envs.sql.errors", "skyhub.envs.harbor.errors",
                 "skyhub.envs.swe.errors", "skyhub.trainer.errors",
                 "skyhub.trainer.tinker.exceptions"]

#: Files that run where skyhub is not installed (a sandbox's own python3): their exceptions
#: cannot derive from skyhub's.
IN_SANDBOX_DIRS = ("envs/python/sandbox_runner.py", "envs/python/sandbox_program.py",
                   "envs/python/image/", "hub/sandbox/guest/")

#: Exception classes that are not skyhub errors, on purpose.
NOT_SKYHUB = {
    # SIGTERM unwinding a vector worker: a BaseException so that no `except Exception` in
    # the env's code can swallow it
    ("hub/vector/executors.py", "_Terminated"),
    # the answer parser of python-math, kept standard-library only (it runs in the comparison
    # worker); raised and caught inside the module
    ("envs/python/math_grade.py", "_Unparseable"),
}


def _exported(module: str) -> list[tuple[str, Any]]:
    mod = importlib.import_module(module)
    return [(name, getattr(mod, name)) for name in mod.__all__]


@pytest.mark.parametrize("module", ERROR_MODULES)
def test_every_exported_exception_is_a_skyhub_error_with_a_docstring(module: str) -> None:
    exported = _exported(module)
    assert exported, f"{module} exports nothing"
    for name, obj in exported:
        assert isinstance(obj, type) and issubclass(obj, SkyhubError), f"{module}.{name}"
        assert obj.__module__ == module, f"{module}.{name} is defined in {obj.__module__}"
        assert obj.__doc__ and len(obj.__doc__.split()) >= 5, f"{module}.{name}: no docstring"


def test_every_errors_module_of_a_family_is_checked_here() -> None:
    on_disk = {f"skyhub.envs.{p.parent.name}.errors" for p in (ROOT / "envs").glob("*/errors.py")}
    assert on_disk and on_disk <= set(ERROR_MODULES), sorted(on_disk - set(ERROR_MODULES))


def test_the_builtin_bases_callers_catch_are_kept() -> None:
    from skyhub.envs.harbor.errors import BadReward, Tampered
    from skyhub.envs.sql.errors import UnverifiedDownload, WorkerLost
    from skyhub.errors import ChannelBroken, CheckFailed, ChecksumMismatch, DownloadError
    from skyhub.trainer.errors import WeightSyncError
    from skyhub.trainer.tinker.exceptions import BodyTooLarge, Unsupported

    assert issubclass(UsageError, ValueError) and issubclass(MissingDependency, ImportError)
    assert issubclass(EnvNotFound, KeyError) and issubclass(DataNotFound, FileNotFoundError)
    assert issubclass(DownloadError, RuntimeError) and issubclass(ChecksumMismatch,
                                                                  DownloadError)
    assert issubclass(UnverifiedDownload, DownloadError)
    assert issubclass(Unsupported, ValueError) and issubclass(BodyTooLarge, ValueError)
    assert issubclass(WeightSyncError, skyhub.errors.InfraError)
    assert issubclass(SandboxSDKMissing, MissingDependency)
    assert issubclass(SandboxSDKMissing, SandboxUnavailable)  # envs mask it as infra, as before
    for cls in (ChannelBroken, CheckFailed, WorkerLost, Tampered, BadReward):
        assert not issubclass(cls, (ValueError, RuntimeError)), cls  # no new builtin base


def test_every_exception_class_in_the_packages_derives_from_a_skyhub_error() -> None:
    """Private ones too (control flow inside one module): read from the source, resolved by
    name through the classes of the errors modules and the scanned files."""
    skyhub_names = {name for module in ERROR_MODULES for name, _ in _exported(module)}
    builtin_exc = {n for n, o in vars(builtins).items()
                   if isinstance(o, type) and issubclass(o, BaseException)}
    classes: list[tuple[str, str, set[str]]] = []
    for d in ("hub", "envs", "trainer"):
        for path in sorted((ROOT / d).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "__pycache__" in rel or rel.startswith(IN_SANDBOX_DIRS):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                             for b in node.bases}
                    classes.append((rel, node.name, bases))
    good = set(skyhub_names)
    changed = True
    while changed:  # a class whose base is a skyhub error is one (across files, by name)
        changed = False
        for _, name, bases in classes:
            if name not in good and bases & good:
                good.add(name)
                changed = True
    wrong = [f"{rel}: {name}({', '.join(sorted(bases))})" for rel, name, bases in classes
             if name not in good and (rel, name) not in NOT_SKYHUB
             and bases & (builtin_exc | {"Exception"})]
    assert len(classes) > 100 and "WorkerLost" in good and "_SandboxFailed" in good
    assert not wrong, "derive these from a skyhub error:\n" + "\n".join(wrong)


# --------------------------------------------------------------------- a missing package
def _without(monkeypatch: pytest.MonkeyPatch, *packages: str) -> None:
    """`import PACKAGE` fails from here on, as when it is not installed (None in
    sys.modules makes the import system raise ImportError)."""
    for name in packages:
        monkeypatch.setitem(sys.modules, name, None)


def test_search_without_bm25s_is_a_missing_dependency(monkeypatch: pytest.MonkeyPatch) -> None:
    from skyhub.envs.search.index import BM25Index

    _without(monkeypatch, "bm25s")
    with pytest.raises(MissingDependency, match=r"bm25s.*skyhub\[search\]"):
        BM25Index.build([{"id": "a", "contents": "a passage"}])


def test_harbor_compose_without_pyyaml_is_a_missing_dependency(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from skyhub.envs.harbor import compose

    path = tmp_path / "docker-compose.yaml"
    path.write_text("services: {}\n")
    _without(monkeypatch, "yaml")
    with pytest.raises(MissingDependency, match=r"PyYAML.*skyhub\[harbor\]"):
        compose._load_yaml(path)


def test_e2b_without_its_sdk_is_a_missing_dependency_and_still_unavailable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from skyhub.sandbox import e2b

    _without(monkeypatch, "e2b")
    with pytest.raises(MissingDependency, match=r"skyhub\[e2b\]") as e:
        e2b._create_sdk_sandbox("base", "e2b_key", False, {}, 60.0)
    assert isinstance(e.value, SandboxUnavailable)


def test_skyhub_tinker_serve_without_peft_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from skyhub.cli.main import app
    from skyhub.trainer.tinker.cli import serve_cmd

    _without(monkeypatch, "peft")
    with pytest.raises(MissingDependency, match=r"peft is missing.*skyhub\[tinker\]"):
        serve_cmd(base_model="tiny")
    result = CliRunner().invoke(app, ["tinker", "serve", "--base-model", "tiny"])
    assert result.exit_code == 2 and "skyhub[tinker]" in result.output


# ------------------------------------------------------------------------------- misuse
def test_vector_env_misuse_is_a_usage_error_that_says_what_to_do() -> None:
    with pytest.raises(UsageError, match="num_envs must be >= 1"):
        skyhub.make_vec("toy-arith", 0)
    with skyhub.make_vec("toy-arith", 2) as vec:
        vec.reset(seed=0)
        with pytest.raises(UsageError, match=r"one action per env \(2\)"):
            vec.step(["1"])
        with pytest.raises(UsageError, match="duplicate env ids"):
            vec.send(["1", "2"], env_ids=[0, 0])
        vec.send(["1"], env_ids=[0])
        with pytest.raises(UsageError, match="already has a step in flight"):
            vec.send(["1"], env_ids=[0])
        vec.recv()
    with pytest.raises(UsageError, match="autoreset_mode must be one of"):
        skyhub.make_vec("toy-arith", 1, autoreset_mode="sometimes")


def test_sandbox_and_env_misuse_is_a_usage_error() -> None:
    from skyhub import sandbox

    with pytest.raises(UsageError, match=r"unknown sandbox backend 'nope'.*'auto'"):
        sandbox.create(backend="nope")
    with pytest.raises(UsageError, match="toy-lookup needs max_turns >= 2"):
        skyhub.make("toy-lookup", max_turns=1)
    with pytest.raises(UsageError, match="command_timeout_s must be > 0"):  # the shell envs'
        skyhub.make("terminal", backend="local", command_timeout_s=0)
    with pytest.raises(UsageError, match=r"synth=True .* or data_dir=DIR, not both"):
        skyhub.make("terminal", synth=True, data_dir=".")


def test_a_task_file_it_cannot_read_is_a_usage_error_naming_the_line(tmp_path: Path) -> None:
    from skyhub.task import Task, TaskSet, load_jsonl

    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "a", "prompt": "p", "answer": "x"}\n{"id": \n')
    with pytest.raises(UsageError, match=r"tasks\.jsonl:2: not valid JSON"):
        load_jsonl(path)
    with pytest.raises(UsageError, match="duplicate task id 'a'"):
        TaskSet([Task(id="a", prompt="p"), Task(id="a", prompt="q")])
