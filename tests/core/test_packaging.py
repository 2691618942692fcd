"""The distribution: every package directory ships, the wheel works, `import skyhub` stays light."""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
PACKAGES: list[str] = SETUPTOOLS["packages"]
PACKAGE_DIR: dict[str, str] = SETUPTOOLS.get("package-dir", {})
PACKAGE_DATA: dict[str, list[str]] = SETUPTOOLS.get("package-data", {})

#: Modules `import skyhub` must not pull in: heavy dependencies, env families and the trainer
#: (found through the registry or imported on demand), and the registry itself.
HEAVY_MODULES = ("torch", "transformers", "docker", "duckdb", "gymnasium", "numpy",
                 "skyhub.envs", "skyhub.envs.toy", "skyhub.trainer", "skyhub.registry")

IMPORT_TIME_LIMIT_S = 0.5


def package_path(package: str) -> Path:
    """The source directory setuptools builds `package` from (package-dir mapping applied)."""
    parts = package.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in PACKAGE_DIR:
            return ROOT / PACKAGE_DIR[prefix] / Path(*parts[i:])
    return ROOT / Path(*parts)


def package_name(directory: Path) -> str | None:
    """The package a source directory installs as, via the longest package-dir prefix."""
    best: tuple[int, str] | None = None
    for pkg, src in PACKAGE_DIR.items():
        base = (ROOT / src).resolve()
        if directory == base or base in directory.parents:
            depth = len(base.parts)
            if best is None or depth > best[0]:
                rel = directory.relative_to(base).parts
                best = (depth, ".".join((pkg, *rel)))
    return best[1] if best else None


def source_package_dirs() -> list[Path]:
    """Every directory with an `__init__.py` under the mapped source roots."""
    dirs = []
    for src in sorted(set(PACKAGE_DIR.values())):
        for init in (ROOT / src).resolve().rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                dirs.append(init.parent)
    return dirs


def owning_package(path: Path) -> str | None:
    """The deepest listed package whose directory contains `path`."""
    for d in path.resolve().parents:
        name = package_name(d)
        if name is None:
            return None
        if name in PACKAGES:
            return name
    return None


def data_files(package: str) -> list[Path]:
    """Non-Python files that belong to `package` (not to a listed subpackage): they only reach
    the wheel if package-data matches them."""
    base = package_path(package)
    if not base.is_dir():
        return []
    return [f for f in sorted(base.rglob("*"))
            if f.is_file() and "__pycache__" not in f.parts and f.suffix not in (".py", ".pyc")
            and owning_package(f) == package]


def matches_package_data(package: str, path: Path) -> bool:
    rel = path.relative_to(package_path(package)).as_posix()
    patterns = [p for key in (package, "*", "") for p in PACKAGE_DATA.get(key, [])]
    return any(fnmatch.fnmatch(rel, pat) for pat in patterns)


# ----------------------------------------------------------------------------- layout
def test_every_source_package_dir_is_listed_in_pyproject_packages() -> None:
    dirs = source_package_dirs()
    assert dirs, "found no package directories: the package-dir mapping is wrong"
    missing = sorted({str(d.relative_to(ROOT)): package_name(d) for d in dirs
                      if package_name(d) not in PACKAGES}.items())
    assert not missing, (
        "package directories missing from [tool.setuptools] packages in pyproject.toml "
        f"(they would be left out of the wheel): {missing}")


def test_every_listed_package_has_a_source_directory() -> None:
    missing = [p for p in PACKAGES if not package_path(p).is_dir()]
    assert not missing, f"packages listed in pyproject.toml without a directory: {missing}"


def test_core_env_and_trainer_roots_map_to_skyhub_packages() -> None:
    assert package_name((ROOT / "hub").resolve()) == "skyhub"
    assert package_name((ROOT / "envs" / "toy").resolve()) == "skyhub.envs.toy"
    assert package_name((ROOT / "trainer").resolve()) == "skyhub.trainer"


def test_data_files_in_packages_are_matched_by_package_data() -> None:
    unmatched = [str(f.relative_to(ROOT)) for p in PACKAGES for f in data_files(p)
                 if not matches_package_data(p, f)]
    assert not unmatched, ("non-Python files that [tool.setuptools.package-data] does not "
                           f"match (the wheel would lack them): {unmatched}")


def test_toy_data_dir_is_declared_as_package_data() -> None:
    assert (ROOT / "envs" / "toy" / "data").is_dir()
    assert matches_package_data("skyhub.envs.toy",
                                package_path("skyhub.envs.toy") / "data" / "tasks.jsonl")


def test_builtin_families_are_declared_as_entry_points() -> None:
    eps = PYPROJECT["project"]["entry-points"]["skyhub.envs"]
    assert eps["toy"] == "skyhub.envs.toy"
    for target in eps.values():
        module = target.split(":")[0]
        assert module in PACKAGES or module.rsplit(".", 1)[0] in PACKAGES, target


# ----------------------------------------------------------------------------- wheel
def _copy_source_tree(dest: Path) -> None:
    """The files a build reads, without the developer's build outputs or virtualenv."""
    dest.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    for f in ROOT.iterdir():
        if f.is_file() and f.name.split(".")[0] in ("README", "LICENSE", "NOTICE"):
            shutil.copy2(f, dest / f.name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for top in sorted({Path(src).parts[0] for src in PACKAGE_DIR.values()}):
        shutil.copytree(ROOT / top, dest / top, ignore=ignore)


def _build_wheel(src: Path, outdir: Path) -> Path:
    cmd = [sys.executable, "-m", "build", "--wheel", "--outdir", str(outdir), str(src)]
    # Without isolation when this environment already satisfies the build requirements (fast,
    # offline); otherwise let `build` fetch them into an isolated environment.
    try:
        setuptools_ok = int(version("setuptools").split(".")[0]) >= 68
        version("wheel")
    except Exception:
        setuptools_ok = False
    if setuptools_ok:
        cmd.insert(4, "--no-isolation")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    wheels = list(outdir.glob("skyhub-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    _copy_source_tree(tmp / "src")
    return _build_wheel(tmp / "src", tmp / "dist")


@pytest.mark.slow
def test_wheel_contains_core_envs_trainer_and_entry_points(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        ep_file = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = z.read(ep_file).decode()
    for required in ("skyhub/__init__.py", "skyhub/envs/toy/env.py", "skyhub/trainer/__init__.py"):
        assert required in names
    for pkg in PACKAGES:
        base = package_path(pkg)
        prefix = pkg.replace(".", "/")
        for f in sorted(base.glob("*.py")):
            assert f"{prefix}/{f.name}" in names, f"{f.relative_to(ROOT)} is not in the wheel"
        for f in data_files(pkg):
            rel = f.relative_to(base).as_posix()
            assert f"{prefix}/{rel}" in names, f"{f.relative_to(ROOT)} is not in the wheel"
    assert "[skyhub.envs]" in entry_points
    assert "toy = skyhub.envs.toy" in entry_points
    # sources only: no tests, benchmarks or caches shipped
    assert not any(n.startswith(("tests/", "benchmarks/")) or "__pycache__" in n for n in names)


@pytest.mark.slow
def test_unpacked_wheel_makes_toy_envs_through_its_entry_point(wheel: Path,
                                                                tmp_path: Path) -> None:
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    code = (
        "import json, skyhub\n"
        "env = skyhub.make('toy-arith')\n"
        "obs, info = env.reset(seed=0)\n"
        "_, reward, *_ = env.step(env.reference_action())\n"
        "print(json.dumps({'file': skyhub.__file__, 'env': type(env).__module__,\n"
        "                  'reward': reward, 'ids': [s.id for s in skyhub.list_envs()]}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, env=_env_with_pythonpath(site), timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(out["file"]).resolve().is_relative_to(site.resolve())
    assert out["env"] == "skyhub.envs.toy.env"
    assert out["reward"] == 1.0
    assert {"toy-arith", "toy-lookup"} <= set(out["ids"])


def _env_with_pythonpath(path: Path) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(path)
    return env


# ----------------------------------------------------------------------------- import cost
_IMPORT_PROBE = """
import json, sys, time
t0 = time.perf_counter()
import skyhub
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "modules": sorted(sys.modules), "file": skyhub.__file__}))
"""


def _neutral_cwd(tmp_path: Path) -> Path:
    """A working directory that cannot shadow the installed package: an empty folder of its
    own. (The clone's parent would not do: `git clone` names the clone `skyhub/`, and with
    `python -c` the working directory comes first on sys.path, so `import skyhub` would find
    the clone's root as a namespace package instead of the installed one.)"""
    cwd = tmp_path / "cwd"
    cwd.mkdir(parents=True)
    return cwd


def _probe_import(cwd: Path) -> tuple[float, set[str], str]:
    proc = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], capture_output=True, text=True,
                          timeout=60, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["seconds"], set(out["modules"]), out["file"]


def test_import_skyhub_is_fast_and_imports_nothing_heavy(tmp_path: Path) -> None:
    runs = [_probe_import(_neutral_cwd(tmp_path / str(i))) for i in range(3)]
    # the installed package, never a folder that happens to be called skyhub (which would
    # import as a namespace package, without a __file__)
    assert runs[0][2] and Path(runs[0][2]).name == "__init__.py", runs[0][2]
    fastest = min(seconds for seconds, _, _ in runs)
    # The one timed assertion of the suite: a light `import skyhub` is part of the spec.
    assert fastest < IMPORT_TIME_LIMIT_S, f"import skyhub took {fastest:.3f} s (best of 3)"
    modules = runs[0][1]
    assert "skyhub" in modules
    loaded = [m for m in HEAVY_MODULES if m in modules]
    assert not loaded, f"import skyhub imported {loaded}"


def test_public_names_resolve_lazily_after_import(tmp_path: Path) -> None:
    code = ("import sys, skyhub\n"
            "assert 'skyhub.registry' not in sys.modules\n"
            "assert skyhub.spec.__module__ == 'skyhub.registry'\n"
            "assert issubclass(skyhub.TextEnv, __import__('gymnasium').Env)\n"
            "assert skyhub.tags.extract('<a>1</a>', 'a') == '1'\n"
            "names = set(dir(skyhub))\n"
            "missing = [n for n in skyhub.__all__ if n not in names]\n"
            "assert not missing, missing\n"
            "try:\n    skyhub.no_such_name\nexcept AttributeError as e:\n"
            "    assert 'no_such_name' in str(e)\nelse:\n    raise SystemExit('no error')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=_neutral_cwd(tmp_path))
    assert proc.returncode == 0, proc.stderr


def test_all_extra_has_every_other_extra_and_no_gpu_only_package() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    (all_spec,) = extras["all"]
    named = set(all_spec.split("[", 1)[1].rstrip("]").split(","))
    # adapters whose frameworks' declared dependencies cannot be resolved beside the others
    # (verifiers: connectrpc against e2b's; openenv-core: gradio's pillow; tinker-cookbook:
    # tml-renderers, missing from the index here): installed apart (scripts/setup.sh)
    apart = {"verifiers", "openenv", "tinker-cookbook"}
    assert named == set(extras) - {"all"} - apart, "a new extra must be added to 'all' too"
    everything = " ".join(dep for deps in extras.values() for dep in deps).lower()
    for gpu_only in ("vllm", "openrlhf", "flash-attn", "deepspeed"):
        assert gpu_only not in everything
    torch = [d for deps in extras.values() for d in deps if d.startswith("torch")]
    assert torch and all("==" in d for d in torch), "torch must be pinned to the CPU wheel"
