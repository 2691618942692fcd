"""register / make / spec / list_envs, and envs from other installed distributions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

import skyhub
from skyhub import Task, TaskSet, TextEnv
from skyhub.errors import EnvNotFound, MissingDependency, RegistrationError, SkyhubError
from skyhub.registry import unregister


class KwargsEnv(TextEnv):
    """Remembers the kwargs it was made with."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.kwargs = kwargs
        self.tasks = TaskSet([Task(id="only", prompt="p", answer="a")])

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.task = self.select_task(options)
        return self.task.prompt, self.make_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "", 0.0, True, False, self.make_info("failure", reward_breakdown={})


# ----------------------------------------------------------------------------- register / make
def test_registered_env_is_made_spec_d_and_listed(tmp_env_id: str) -> None:
    returned = skyhub.register(tmp_env_id, KwargsEnv, description="demo env",
                               tags=("test", "demo"))
    env = skyhub.make(tmp_env_id)
    assert isinstance(env, KwargsEnv)
    s = skyhub.spec(tmp_env_id)
    assert s is returned
    assert (s.id, s.description, s.tags) == (tmp_env_id, "demo env", ("test", "demo"))
    assert s.source == __name__
    listed = {x.id: x for x in skyhub.list_envs()}
    assert listed[tmp_env_id] is s


def test_list_envs_is_sorted_and_includes_builtin_toy_envs() -> None:
    ids = [s.id for s in skyhub.list_envs()]
    assert ids == sorted(ids)
    assert {"toy-arith", "toy-lookup"} <= set(ids)
    toy = skyhub.spec("toy-lookup")
    assert toy.entry_point == "skyhub.envs.toy.env:LookupEnv"
    assert "multi-turn" in toy.tags and toy.description
    assert toy.family == "toy"


def test_string_entry_point_is_imported_when_made(tmp_env_id: str) -> None:
    skyhub.register(tmp_env_id, "skyhub.envs.toy.env:ArithEnv", kwargs={"n_tasks": 3})
    env = skyhub.make(tmp_env_id)
    assert type(env).__name__ == "ArithEnv"
    assert len(env.tasks) == 3


def test_make_merges_registered_kwargs_with_make_kwargs(tmp_env_id: str) -> None:
    skyhub.register(tmp_env_id, KwargsEnv, kwargs={"a": 1, "b": 2})
    env = skyhub.make(tmp_env_id, b=3, c=4)
    assert env.kwargs == {"a": 1, "b": 3, "c": 4}
    assert env.spec.kwargs == {"a": 1, "b": 3, "c": 4}
    assert skyhub.spec(tmp_env_id).kwargs == {"a": 1, "b": 2}
    assert skyhub.make(tmp_env_id).kwargs == {"a": 1, "b": 2}


def test_registered_kwargs_are_copied(tmp_env_id: str) -> None:
    defaults = {"a": 1}
    skyhub.register(tmp_env_id, KwargsEnv, kwargs=defaults)
    defaults["a"] = 99
    assert skyhub.make(tmp_env_id).kwargs == {"a": 1}


def test_spec_make_creates_env_with_overrides(tmp_env_id: str) -> None:
    s = skyhub.register(tmp_env_id, KwargsEnv, kwargs={"a": 1})
    env = s.make(a=2)
    assert env.kwargs == {"a": 2}
    assert env.spec.id == tmp_env_id


def test_registering_an_existing_id_raises_unless_override(tmp_env_id: str) -> None:
    skyhub.register(tmp_env_id, KwargsEnv, kwargs={"v": 1})
    with pytest.raises(RegistrationError, match="already registered") as e:
        skyhub.register(tmp_env_id, KwargsEnv, kwargs={"v": 2})
    assert "override=True" in str(e.value)
    assert skyhub.make(tmp_env_id).kwargs == {"v": 1}
    skyhub.register(tmp_env_id, KwargsEnv, kwargs={"v": 2}, override=True)
    assert skyhub.make(tmp_env_id).kwargs == {"v": 2}


def test_builtin_env_cannot_be_silently_replaced() -> None:
    with pytest.raises(RegistrationError, match="toy-arith"):
        skyhub.register("toy-arith", KwargsEnv)
    assert skyhub.spec("toy-arith").entry_point == "skyhub.envs.toy.env:ArithEnv"


def test_unregister_removes_env_and_ignores_unknown_ids(tmp_env_id: str) -> None:
    skyhub.register(tmp_env_id, KwargsEnv)
    unregister(tmp_env_id)
    unregister(tmp_env_id)
    assert tmp_env_id not in {s.id for s in skyhub.list_envs()}
    with pytest.raises(EnvNotFound):
        skyhub.make(tmp_env_id)


@pytest.mark.parametrize("bad_id", ["", "has space", "-leading-dash", "tab\tid", "a/b/c",
                                    "semi;colon", None, 42])
def test_invalid_env_ids_are_rejected(bad_id: Any) -> None:
    with pytest.raises(RegistrationError, match="invalid env id"):
        skyhub.register(bad_id, KwargsEnv)
    assert bad_id not in {s.id for s in skyhub.list_envs()}


@pytest.mark.parametrize("bad_entry_point", ["no_colon_here", "a:b:c", ":Attr", "module:", 42,
                                             None])
def test_invalid_entry_points_are_rejected(tmp_env_id: str, bad_entry_point: Any) -> None:
    with pytest.raises(RegistrationError, match="entry point"):
        skyhub.register(tmp_env_id, bad_entry_point)
    assert tmp_env_id not in {s.id for s in skyhub.list_envs()}


# ----------------------------------------------------------------------------- errors on make
def test_unknown_id_suggests_closest_ids() -> None:
    with pytest.raises(EnvNotFound) as e:
        skyhub.make("toy-arth")
    assert e.value.suggestions[0] == "toy-arith"
    assert e.value.env_id == "toy-arth"
    assert "'toy-arith'" in str(e.value)
    assert "Did you mean" in str(e.value)


def test_unknown_id_in_known_family_suggests_family_members() -> None:
    with pytest.raises(EnvNotFound) as e:
        skyhub.spec("toy-qqqqqqqqqqqq")
    assert set(e.value.suggestions) >= {"toy-arith", "toy-lookup"}


def test_unknown_id_without_neighbours_has_no_suggestions_but_says_what_to_do() -> None:
    with pytest.raises(EnvNotFound) as e:
        skyhub.make("zzzzzzzzzzzzzzzz")
    assert e.value.suggestions == ()
    assert "skyhub list" in str(e.value)


def test_env_not_found_is_a_key_error_and_skyhub_error_with_readable_message() -> None:
    with pytest.raises(KeyError) as e:
        skyhub.make("toy-arth")
    assert isinstance(e.value, SkyhubError)
    assert str(e.value).startswith("no env registered as 'toy-arth'")


@pytest.mark.parametrize("factory", [lambda **kw: OrderedDict(), "collections:OrderedDict"])
def test_entry_point_returning_non_textenv_raises(tmp_env_id: str, factory: Any) -> None:
    skyhub.register(tmp_env_id, factory)
    with pytest.raises(RegistrationError, match=r"not a skyhub\.TextEnv") as e:
        skyhub.make(tmp_env_id)
    assert "OrderedDict" in str(e.value)


def test_entry_point_module_importing_missing_package_raises_missing_dependency(
        tmp_env_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = "skyhub_test_needs_missing_pkg"
    (tmp_path / f"{mod}.py").write_text(
        "import skyhub_no_such_package_xyz\n"
        "from skyhub import TextEnv\n"
        "class Env(TextEnv):\n    pass\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, mod, raising=False)
    skyhub.register(tmp_env_id, f"{mod}:Env")
    with pytest.raises(MissingDependency, match="'skyhub_no_such_package_xyz'") as e:
        skyhub.make(tmp_env_id)
    assert isinstance(e.value, ImportError)
    assert isinstance(e.value.__cause__, ModuleNotFoundError)
    assert "pip install" in str(e.value)
    assert tmp_env_id in str(e.value)


def test_lazy_import_of_missing_package_inside_env_init_raises_missing_dependency(
        tmp_env_id: str) -> None:
    def factory(**kwargs: Any) -> TextEnv:
        import skyhub_another_missing_package  # noqa: F401

        raise AssertionError("unreachable")

    skyhub.register(tmp_env_id, factory)
    with pytest.raises(MissingDependency, match="'skyhub_another_missing_package'"):
        skyhub.make(tmp_env_id)


def test_errors_raised_by_env_constructor_propagate_unchanged(tmp_env_id: str) -> None:
    skyhub.register(tmp_env_id, "skyhub.envs.toy.env:ArithEnv")
    with pytest.raises(ValueError, match="max_turns must be >= 1"):
        skyhub.make(tmp_env_id, max_turns=0)


def test_listing_envs_imports_no_env_module() -> None:
    code = ("import json, sys, skyhub\n"
            "ids = [s.id for s in skyhub.list_envs()]\n"
            "print(json.dumps({'ids': ids, 'env_loaded': 'skyhub.envs.toy.env' in sys.modules,\n"
            "                  'family_loaded': 'skyhub.envs.toy' in sys.modules}))\n")
    out = _run_python(code)
    assert "toy-arith" in out["ids"]
    assert out["family_loaded"] is True
    assert out["env_loaded"] is False


# ----------------------------------------------------------------------------- plugins
DEMO_PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "skyhub-demo-plugin"
version = "0.1.0"

[project.entry-points."skyhub.envs"]
demo = "skyhub_demo_plugin"
demo-fn = "skyhub_demo_plugin.extra:register_envs"

[tool.setuptools]
packages = ["skyhub_demo_plugin"]
"""

DEMO_INIT = """
import skyhub

skyhub.register("demo-echo", "skyhub_demo_plugin.env:EchoEnv", kwargs={"greeting": "hi"},
                description="Echo the prompt.", tags=("demo",))
"""

DEMO_EXTRA = """
import skyhub


def register_envs():
    skyhub.register("demo-echo-loud", "skyhub_demo_plugin.env:EchoEnv",
                    kwargs={"greeting": "HI"})
"""

DEMO_ENV = """
import skyhub


class EchoEnv(skyhub.TextEnv):
    def __init__(self, greeting="hello"):
        super().__init__()
        self.tasks = skyhub.TaskSet([skyhub.Task(id="e0", prompt=greeting, answer=greeting)])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.task = self.select_task(options)
        return self.task.prompt, self.make_info()

    def step(self, action):
        self.turn += 1
        ok = action == self.task.answer
        return "", float(ok), True, False, self.make_info(
            "success" if ok else "failure", reward_breakdown={"match": float(ok)})
"""

BROKEN_PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "skyhub-broken-plugin"
version = "0.1.0"

[project.entry-points."skyhub.envs"]
broken = "skyhub_broken_plugin"

[tool.setuptools]
packages = ["skyhub_broken_plugin"]
"""

BROKEN_INIT = """
import skyhub

skyhub.register("broken-never", "skyhub_broken_plugin:Nope")
raise RuntimeError("the broken plugin cannot start")
"""


def _write_dist(root: Path, pyproject: str, package: str, files: dict[str, str]) -> Path:
    (root / package).mkdir(parents=True)
    (root / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    for name, text in files.items():
        (root / package / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both plugin distributions, installed by pip into a directory for PYTHONPATH."""
    tmp = tmp_path_factory.mktemp("plugins")
    demo = _write_dist(tmp / "demo", DEMO_PYPROJECT, "skyhub_demo_plugin",
                       {"__init__.py": DEMO_INIT, "env.py": DEMO_ENV, "extra.py": DEMO_EXTRA})
    broken = _write_dist(tmp / "broken", BROKEN_PYPROJECT, "skyhub_broken_plugin",
                         {"__init__.py": BROKEN_INIT})
    site = tmp / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", "-q", "--target", str(site),
         str(demo), str(broken)],
        capture_output=True, text=True, timeout=300, cwd=tmp)
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout}\n{proc.stderr}"
    return site


def _run_python(code: str, pythonpath: Path | None = None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tempfile.gettempdir())
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


PLUGIN_PROBE = """
import json, sys, warnings
import skyhub
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ids = [s.id for s in skyhub.list_envs()]
env_module_after_list = "skyhub_demo_plugin.env" in sys.modules
from skyhub.registry import plugin_errors
env = skyhub.make("demo-echo")
obs, info = env.reset(seed=0)
_, reward, terminated, _, info = env.step(obs)
loud = skyhub.make("demo-echo-loud").reset()[0]
print(json.dumps({
    "ids": ids, "obs": obs, "reward": reward, "terminated": terminated,
    "outcome": info["outcome"], "loud": loud, "source": skyhub.spec("demo-echo").source,
    "errors": plugin_errors(), "warnings": [str(w.message) for w in caught],
    "env_module_after_list": env_module_after_list,
}))
"""


def test_installed_plugin_envs_are_listed_and_made_without_importing_it(
        plugin_site: Path) -> None:
    out = _run_python(PLUGIN_PROBE, plugin_site)
    assert {"demo-echo", "demo-echo-loud", "toy-arith", "toy-lookup"} <= set(out["ids"])
    assert out["obs"] == "hi"
    assert out["loud"] == "HI"
    assert (out["reward"], out["terminated"], out["outcome"]) == (1.0, True, "success")
    assert out["source"] == "skyhub_demo_plugin"
    assert out["env_module_after_list"] is False  # listing imports no env module


def test_plugin_that_raises_on_import_is_reported_and_others_still_load(
        plugin_site: Path) -> None:
    out = _run_python(PLUGIN_PROBE, plugin_site)
    assert {"demo-echo", "toy-arith"} <= set(out["ids"])
    [key] = out["errors"]
    assert "broken" in key and "skyhub-broken-plugin" in key
    assert "RuntimeError: the broken plugin cannot start" in out["errors"][key]
    [warning] = [w for w in out["warnings"] if "broken" in w]
    assert "'broken'" in warning and "skyhub-broken-plugin" in warning
    assert "the broken plugin cannot start" in warning


def test_unknown_id_error_mentions_failed_plugins(plugin_site: Path) -> None:
    code = ("import json, warnings, skyhub\n"
            "warnings.simplefilter('ignore')\n"
            "try:\n    skyhub.make('broken-never-registered')\n"
            "except skyhub.errors.EnvNotFound as e:\n    print(json.dumps({'msg': str(e)}))\n")
    out = _run_python(code, plugin_site)
    assert "Some plugins failed to load" in out["msg"]
    assert "the broken plugin cannot start" in out["msg"]
