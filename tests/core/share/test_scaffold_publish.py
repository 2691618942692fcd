"""`skyhub new` / `check PATH` / `publish` / `install`: from a scaffold to `skyhub.make` elsewhere.

Fast tests cover the scaffold's names and files, the directory hub's indexes, the commands
that would upload or push, and install's errors. The slow test is the whole journey a user
takes: scaffold, check, publish two versions to a directory hub, install into a fresh
virtualenv, `skyhub.make` there, and pin the older version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyhub.cli.main import app
from skyhub.cli.publish_cmds import resolve_check_target
from skyhub.errors import DataNotFound, UsageError
from skyhub.eval.checks import check_env
from skyhub.registry import list_envs, unregister
from skyhub.share.install import (
    distribution_candidates,
    hub_projects,
    install,
    parse_requirement,
    pip_install_command,
)
from skyhub.share.publish import plan_publish, publish, publish_to_dir, twine_command
from skyhub.share.scaffold import env_names, scaffold

REPO_ROOT = Path(__file__).resolve().parents[3]
PY = sys.executable
RUFF = Path(PY).parent / "ruff"

runner = CliRunner()


def run_check(path: Path) -> subprocess.CompletedProcess[str]:
    """`skyhub check PATH`, in a fresh process (the registry and sys.modules of this one stay
    clean)."""
    return subprocess.run([str(Path(PY).parent / "skyhub"), "check", str(path)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "150"})


@pytest.fixture
def loaded_from_disk() -> Iterator[list[str]]:
    """Modules imported by `resolve_check_target` in this process: removed afterwards."""
    modules: list[str] = []
    path = list(sys.path)
    yield modules
    sys.path[:] = path
    for name in [m for m in sys.modules if any(m == t or m.startswith(t + ".") for t in modules)]:
        del sys.modules[name]
    for s in list_envs():
        if any(s.source == t or s.source.startswith(t + ".") for t in modules):
            unregister(s.id)


# ----------------------------------------------------------------------------- scaffold
@pytest.mark.parametrize(("name", "dist", "module", "cls"), [
    ("demo-env", "skyhub-demo-env", "skyhub_demo_env", "DemoEnv"),
    ("my_env", "skyhub-my-env", "skyhub_my_env", "MyEnv"),
    ("MyEnv2", "skyhub-myenv2", "skyhub_myenv2", "MyEnv2Env"),
    ("sql.v2", "skyhub-sql-v2", "skyhub_sql_v2", "SqlV2Env"),
    ("2048", "skyhub-2048", "skyhub_2048", "Env2048Env"),
    ("skyhub-foo", "skyhub-foo", "skyhub_foo", "FooEnv"),
])
def test_env_names_give_valid_distribution_module_and_class(name: str, dist: str, module: str,
                                                            cls: str) -> None:
    names = env_names(name)
    assert (names.env_id, names.dist_name, names.module, names.class_name) == (name, dist,
                                                                               module, cls)
    assert names.module.isidentifier() and names.class_name.isidentifier()


@pytest.mark.parametrize("name", ["", "my env", "ns/env", "a:b", "-x", "_x", "é-env", "x\n"])
def test_invalid_env_names_are_rejected_with_the_rule(name: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"invalid env name.*letters, digits"):
        scaffold(name, tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["my_env", "MyEnv2"])
def test_scaffolded_package_registers_its_id_and_passes_ruff(name: str, tmp_path: Path) -> None:
    path = scaffold(name, tmp_path)
    names = env_names(name)
    assert path == tmp_path / names.dist_name
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    assert files == ["README.md", "pyproject.toml", f"{names.module}/__init__.py",
                     f"{names.module}/env.py", f"{names.module}/tasks.jsonl",
                     "tests/test_env.py"]
    pyproject = (path / "pyproject.toml").read_text()
    assert f'"{name}" = "{names.module}"' in pyproject
    assert f'register("{name}", "{names.module}.env:{names.class_name}"' in (
        path / names.module / "__init__.py").read_text()
    rows = [json.loads(line) for line in (path / names.module / "tasks.jsonl").read_text()
            .splitlines()]
    assert len(rows) >= 3 and all({"id", "prompt", "answer"} <= row.keys() for row in rows)
    ruff = subprocess.run([str(RUFF), "check", "--no-cache", "."], cwd=path,
                          capture_output=True, text=True)
    assert ruff.returncode == 0, ruff.stdout + ruff.stderr


def test_scaffolded_env_passes_skyhub_check_from_its_folder(tmp_path: Path) -> None:
    path = scaffold("demo-env", tmp_path)
    r = run_check(path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skyhub check demo-env" in r.stdout and "all checks passed" in r.stdout
    assert "reference_action() solved" in r.stdout


def test_scaffolded_sandbox_env_has_a_dockerfile_and_passes_check(tmp_path: Path) -> None:
    path = scaffold("code-env", tmp_path, sandbox=True)
    assert (path / "Dockerfile").read_text().startswith("# The sandbox image of code-env")
    assert "skyhub.sandbox.create" in (path / "skyhub_code_env" / "env.py").read_text()
    r = run_check(path)
    assert r.returncode == 0, r.stdout + r.stderr
    ruff = subprocess.run([str(RUFF), "check", "--no-cache", "."], cwd=path,
                          capture_output=True, text=True)
    assert ruff.returncode == 0, ruff.stdout + ruff.stderr


def test_scaffolded_package_tests_pass(tmp_path: Path) -> None:
    path = scaffold("demo-env", tmp_path)
    r = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 passed" in r.stdout


def test_new_refuses_a_non_empty_directory_but_fills_an_empty_one(tmp_path: Path) -> None:
    target = tmp_path / "skyhub-demo-env"
    target.mkdir()
    scaffold("demo-env", tmp_path)  # empty: fine
    before = (target / "pyproject.toml").read_text()
    (target / "pyproject.toml").write_text(before + "# my edits\n")
    with pytest.raises(UsageError, match="already exists and is not empty"):
        scaffold("demo-env", tmp_path)
    assert (target / "pyproject.toml").read_text().endswith("# my edits\n")


def test_new_command_prints_the_path_and_next_steps(tmp_path: Path) -> None:
    result = runner.invoke(app, ["new", "demo-env", "--dir", str(tmp_path)],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "created" in result.output and "skyhub check" in result.output
    assert (tmp_path / "skyhub-demo-env" / "skyhub_demo_env" / "env.py").is_file()


# ----------------------------------------------------------------------------- check PATH
def test_check_target_passes_env_ids_through() -> None:
    assert resolve_check_target("toy-arith") == ["toy-arith"]


def test_check_target_imports_the_package_from_disk_and_returns_its_ids(
        tmp_path: Path, loaded_from_disk: list[str]) -> None:
    path = scaffold("disk-env", tmp_path)
    loaded_from_disk.append("skyhub_disk_env")
    assert resolve_check_target(str(path)) == ["disk-env"]
    assert resolve_check_target(str(path / "pyproject.toml")) == ["disk-env"]  # again: no clash
    assert check_env("disk-env").ok


def test_check_target_without_entry_point_says_what_to_add(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1"\n')
    with pytest.raises(UsageError, match=r'entry-points\."skyhub.envs"'):
        resolve_check_target(str(tmp_path))
    with pytest.raises(DataNotFound, match=r"no pyproject\.toml"):
        (tmp_path / "empty").mkdir()
        resolve_check_target(str(tmp_path / "empty"))


# ----------------------------------------------------------------------------- directory hub
def fake_dists(where: Path, name: str, version: str, content: bytes = b"x") -> list[Path]:
    where.mkdir(parents=True, exist_ok=True)
    files = [where / f"{name.replace('-', '_')}-{version}-py3-none-any.whl",
             where / f"{name.replace('-', '_')}-{version}.tar.gz"]
    for f in files:
        f.write_bytes(content)
    return files


def test_directory_hub_indexes_list_every_file_with_its_hash(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    publish_to_dir(fake_dists(tmp_path / "a", "skyhub-demo-env", "0.1.0"), hub)
    publish_to_dir(fake_dists(tmp_path / "b", "skyhub-demo-env", "0.2.0"), hub)
    publish_to_dir(fake_dists(tmp_path / "c", "Other.Pkg", "1.0"), hub)
    index = (hub / "index.html").read_text()
    names = sorted(p.name for p in hub.iterdir() if p.is_file() and p.name != "index.html")
    assert len(names) == 6 and all(f'>{n}</a>' in index for n in names)
    assert "#sha256=" in index
    assert hub_projects(hub).keys() == {"skyhub-demo-env", "other-pkg"}
    simple = (hub / "simple" / "index.html").read_text()
    assert 'href="skyhub-demo-env/"' in simple and 'href="other-pkg/"' in simple
    page = (hub / "simple" / "skyhub-demo-env" / "index.html").read_text()
    assert 'href="../../skyhub_demo_env-0.2.0.tar.gz#sha256=' in page
    assert "other" not in page.lower().replace("other-pkg", "")


def test_republishing_a_version_with_other_content_is_refused(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    publish_to_dir(fake_dists(tmp_path / "a", "skyhub-demo-env", "0.1.0"), hub)
    publish_to_dir(fake_dists(tmp_path / "a", "skyhub-demo-env", "0.1.0"), hub)  # same: no-op
    changed = fake_dists(tmp_path / "b", "skyhub-demo-env", "0.1.0", b"changed")
    with pytest.raises(UsageError, match=r"Bump the version.*--overwrite"):
        publish_to_dir(changed, hub)
    publish_to_dir(changed, hub, overwrite=True)
    assert (hub / changed[0].name).read_bytes() == b"changed"


def test_publish_builds_wheel_and_sdist_into_a_directory_hub(tmp_path: Path) -> None:
    path = scaffold("demo-env", tmp_path)
    result = publish(path, tmp_path / "hub")
    assert sorted(f.name for f in result.files) == ["skyhub_demo_env-0.1.0-py3-none-any.whl",
                                                    "skyhub_demo_env-0.1.0.tar.gz"]
    assert result.plan.skipped_image == "no Dockerfile"
    assert hub_projects(tmp_path / "hub") == {"skyhub-demo-env": [f.name for f in
                                                                  sorted(result.files)]}


def test_publish_to_an_index_runs_twine_and_explains_credentials(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    for var in ("TWINE_USERNAME", "TWINE_PASSWORD"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.pypirc
    path = scaffold("demo-env", tmp_path)
    with pytest.raises(UsageError, match=r"(?s)uploading to http://127\.0\.0\.1:9/legacy/ failed"
                                         r".*TWINE_USERNAME and TWINE_PASSWORD"):
        publish(path, "http://127.0.0.1:9/legacy/")


def test_twine_command_uploads_every_file_non_interactively() -> None:
    cmd = twine_command("https://test.pypi.org/legacy/", ["a.whl", "a.tar.gz"])
    assert cmd[1:] == ["-m", "twine", "upload", "--non-interactive", "--repository-url",
                       "https://test.pypi.org/legacy/", "a.whl", "a.tar.gz"]


def test_image_is_pushed_only_with_a_dockerfile_and_a_registry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYHUB_REGISTRY", raising=False)
    plain = scaffold("demo-env", tmp_path)
    code = scaffold("code-env", tmp_path, sandbox=True)
    assert plan_publish(plain, "hub", registry="reg.io/me").skipped_image == "no Dockerfile"
    no_registry = plan_publish(code, "hub")
    assert no_registry.commands == [] and "no registry" in no_registry.skipped_image
    plan = plan_publish(code, "hub", registry="reg.io/me/")
    assert plan.image == "reg.io/me/skyhub-code-env:0.1.0"
    assert plan.commands == [["docker", "build", "-t", plan.image, str(code)],
                             ["docker", "push", plan.image]]
    monkeypatch.setenv("SKYHUB_REGISTRY", "localhost:5000")
    assert plan_publish(code, "hub").image == "localhost:5000/skyhub-code-env:0.1.0"


def test_publish_dry_run_shows_the_commands_and_builds_nothing(tmp_path: Path) -> None:
    code = scaffold("code-env", tmp_path, sandbox=True)
    result = runner.invoke(app, ["publish", str(code), "--to", "https://example.org/legacy/",
                                 "--registry", "reg.io/me", "--dry-run"],
                           env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "twine upload --non-interactive --repository-url https://example.org/legacy/" \
        in result.output
    assert "docker push reg.io/me/skyhub-code-env:0.1.0" in result.output
    assert not (code / "dist").exists()


# ----------------------------------------------------------------------------- install
def test_install_requirements_and_pip_commands() -> None:
    assert parse_requirement("demo-env==0.1.0") == ("demo-env", "==0.1.0")
    assert parse_requirement("demo-env >= 1.2") == ("demo-env", ">=1.2")
    with pytest.raises(UsageError, match="NAME==VERSION"):
        parse_requirement("demo env")
    assert distribution_candidates("demo_env") == ["skyhub-demo-env", "demo-env"]
    assert distribution_candidates("skyhub-demo-env") == ["skyhub-demo-env"]
    cmd = pip_install_command("req.txt", "hub")
    assert cmd[-7:] == ["--no-index", "--find-links", str(Path("hub").resolve()),
                        "--prefer-binary", "--require-hashes", "-r", "req.txt"]
    cmd = pip_install_command("req.txt", "https://pypi.example.org/simple")
    assert cmd[cmd.index("--index-url") + 1] == "https://pypi.example.org/simple"


def test_install_of_a_name_the_hub_lacks_lists_what_it_has(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    publish_to_dir(fake_dists(tmp_path / "a", "skyhub-demo-env", "0.1.0"), hub)
    with pytest.raises(DataNotFound, match=r"'nope' is not in the hub.*it has skyhub-demo-env"):
        install("nope", hub)
    with pytest.raises(DataNotFound, match="does not exist"):
        install("demo-env", tmp_path / "missing")


# ----------------------------------------------------------------------------- the journey
def venv_run(venv: Path, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VIRTUAL_ENV": str(venv),
           "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTHONPATH", None)
    r = subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=600,
                       **kwargs)  # type: ignore[call-overload]
    assert r.returncode == 0, f"{args} failed:\n{r.stdout}\n{r.stderr}"
    return r


@pytest.mark.slow
def test_scaffold_check_publish_install_and_make_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    # scaffold and check, as the author
    result = runner.invoke(app, ["new", "demo-env", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    pkg = tmp_path / "skyhub-demo-env"
    r = run_check(pkg)
    assert r.returncode == 0, r.stdout + r.stderr

    # publish 0.1.0 and 0.2.0 to a directory hub
    hub = tmp_path / "hub"
    assert runner.invoke(app, ["publish", str(pkg), "--to", str(hub)]).exit_code == 0
    pyproject = pkg / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.1.0"', 'version = "0.2.0"'))
    result = runner.invoke(app, ["publish", str(pkg), "--to", str(hub)])
    assert result.exit_code == 0, result.output
    assert len(hub_projects(hub)["skyhub-demo-env"]) == 4

    # a user elsewhere: a fresh virtualenv with skyhub, then the env from the hub
    venv = tmp_path / "venv"
    subprocess.run([PY, "-m", "venv", str(venv)], check=True)
    vpy = str(venv / "bin" / "python")
    venv_run(venv, vpy, "-m", "pip", "install", "-q", str(REPO_ROOT))
    out = venv_run(venv, str(venv / "bin" / "skyhub"), "install", "demo-env", "--from",
                   str(hub)).stdout
    assert "installed skyhub-demo-env 0.2.0" in out and "demo-env" in out
    assert "demo-env" in venv_run(venv, str(venv / "bin" / "skyhub"), "list").stdout
    play = textwrap.dedent("""
        import importlib.metadata
        import skyhub
        env = skyhub.make("demo-env")
        obs, info = env.reset(seed=0)
        _, reward, terminated, _, info = env.step(env.reference_action())
        print(importlib.metadata.version("skyhub-demo-env"), reward, terminated,
              info["outcome"], skyhub.make.__module__)
        env.close()
    """)
    assert venv_run(venv, vpy, "-c", play, cwd=tmp_path).stdout.split()[:4] == [
        "0.2.0", "1.0", "True", "success"]

    # pin the older version
    out = venv_run(venv, str(venv / "bin" / "skyhub"), "install", "demo-env==0.1.0", "--from",
                   str(hub)).stdout
    assert "installed skyhub-demo-env 0.1.0" in out
    assert venv_run(venv, vpy, "-c", play, cwd=tmp_path).stdout.split()[:4] == [
        "0.1.0", "1.0", "True", "success"]
