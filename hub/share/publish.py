"""Publish env packages (`skyhub publish`); `skyhub.share.install` installs them.

A *hub* is where env packages are shared; skyhub reads two kinds:
- a **directory hub** (a local or shared folder, or anything served from one): the wheels and
  sdists side by side, an `index.html` listing them (what `pip --find-links DIR` reads; pip
  also reads the bare directory), and a PEP 503 "simple" index under `simple/` so that
  `pip install --index-url file:///DIR/simple` works too;
- a **PyPI-compatible index** (`https://...`): uploads go through `twine`, installs through
  `pip --index-url`.

An env's sandbox image (its `Dockerfile`) is pushed to an OCI registry when one is given.
Everything that runs a tool is first a list of commands (`PublishPlan`, `pip_install_command`),
so what would run can be shown and tested without an index or a registry. Heavy tools
(`build`, `twine`, `docker`) run as subprocesses of the current interpreter; nothing
here is imported by `import skyhub`.
"""

from __future__ import annotations

import hashlib
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyhub.errors import DataNotFound, InfraError, UsageError

#: Environment variable naming the OCI registry env images are pushed to.
REGISTRY_ENV = "SKYHUB_REGISTRY"
DIST_SUFFIXES = (".whl", ".tar.gz", ".zip")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def normalize(name: str) -> str:
    """PEP 503 normalized project name: `Skyhub_Demo.Env` -> `skyhub-demo-env`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def is_url(dest: str | Path) -> bool:
    return isinstance(dest, str) and re.match(r"^[a-z][a-z0-9+.-]*://", dest) is not None \
        and not dest.startswith("file://")


# ----------------------------------------------------------------------------- the package
@dataclass(frozen=True)
class Package:
    """What `publish` needs to know about a package directory (read from its pyproject)."""

    path: Path
    name: str
    version: str
    env_entry_points: dict[str, str]

    @property
    def dockerfile(self) -> Path | None:
        p = self.path / "Dockerfile"
        return p if p.is_file() else None


def read_package(path: str | Path) -> Package:
    """Read `path/pyproject.toml`; `DataNotFound`/`UsageError` say what is missing."""
    root = Path(path)
    pyproject = root / "pyproject.toml" if root.is_dir() else root
    if not pyproject.is_file():
        raise DataNotFound(f"no pyproject.toml in {root}: pass the directory of an env package "
                           "(`skyhub new NAME` makes one)")
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{pyproject} is not valid TOML ({e}); fix it and retry") from None
    project = data.get("project") or {}
    name, version = project.get("name"), project.get("version")
    if not name or not version:
        raise UsageError(f"{pyproject} lacks [project] name or version (a static version is "
                         "needed to name the published files and the image)")
    eps = (project.get("entry-points") or {}).get("skyhub.envs") or {}
    return Package(pyproject.parent, str(name), str(version), {str(k): str(v)
                                                               for k, v in eps.items()})


# ----------------------------------------------------------------------------- building
def build_command(path: Path, outdir: Path, *, isolation: bool | None = None) -> list[str]:
    """`python -m build --sdist --wheel`. Without isolation (the default when this interpreter
    has setuptools) the build needs no network and takes a second instead of several."""
    if isolation is None:
        isolation = not _has_setuptools()
    return [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(outdir),
            *([] if isolation else ["--no-isolation"]), str(path)]


def _has_setuptools() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("setuptools", "wheel"))


def build(path: str | Path, outdir: str | Path, *, isolation: bool | None = None) -> list[Path]:
    """Build the package's wheel and sdist into `outdir`; returns their paths."""
    pkg = read_package(path)
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.iterdir())
    _run(build_command(pkg.path, out, isolation=isolation), what=f"building {pkg.path}",
         hint="`pip install 'skyhub[publish]'` provides `build`; the output above names the "
              "problem in the package")
    dists = sorted(p for p in out.iterdir() if p not in before and p.name.endswith(DIST_SUFFIXES))
    if not dists:
        raise InfraError(f"`python -m build` made no wheel or sdist in {out}")
    return dists


# ----------------------------------------------------------------------------- directory hub
def dist_project(filename: str) -> tuple[str, str] | None:
    """(normalized project, version) of a wheel or sdist file name; None for other files."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        return (normalize(parts[0]), parts[1]) if len(parts) >= 5 else None
    for suffix in (".tar.gz", ".zip"):
        if filename.endswith(suffix):
            stem = filename[: -len(suffix)]
            if "-" in stem:
                name, version = stem.rsplit("-", 1)
                return normalize(name), version
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _page(title: str, links: list[tuple[str, str]]) -> str:
    body = "\n".join(f'    <a href="{html.escape(href)}">{html.escape(text)}</a><br/>'
                     for href, text in links)
    return ("<!DOCTYPE html>\n<html>\n  <head>\n"
            '    <meta name="pypi:repository-version" content="1.0">\n'
            f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n"
            f"    <h1>{html.escape(title)}</h1>\n{body}\n  </body>\n</html>\n")


def write_index(hub: str | Path) -> dict[str, list[str]]:
    """(Re)write the hub's `index.html` and `simple/` pages from the files it holds.

    Returns project -> its file names. Links carry `#sha256=` so pip verifies downloads.
    """
    root = Path(hub)
    files = sorted(p for p in root.iterdir() if p.is_file() and dist_project(p.name))
    projects: dict[str, list[Path]] = {}
    for p in files:
        projects.setdefault(dist_project(p.name)[0], []).append(p)  # type: ignore[index]
    hashes = {p: _sha256(p) for p in files}
    (root / "index.html").write_text(
        _page("skyhub hub", [(f"{p.name}#sha256={hashes[p]}", p.name) for p in files]),
        encoding="utf-8")
    simple = root / "simple"
    if simple.is_dir():  # projects whose files were removed disappear from the index
        for d in simple.iterdir():
            if d.is_dir() and d.name not in projects:
                shutil.rmtree(d)
    simple.mkdir(exist_ok=True)
    (simple / "index.html").write_text(
        _page("Simple index", [(f"{name}/", name) for name in sorted(projects)]),
        encoding="utf-8")
    for name, pfiles in projects.items():
        (simple / name).mkdir(exist_ok=True)
        (simple / name / "index.html").write_text(
            _page(f"Links for {name}", [(f"../../{p.name}#sha256={hashes[p]}", p.name)
                                        for p in pfiles]), encoding="utf-8")
    return {name: [p.name for p in pfiles] for name, pfiles in sorted(projects.items())}


def publish_to_dir(dists: Sequence[str | Path], hub: str | Path, *,
                   overwrite: bool = False) -> list[Path]:
    """Copy wheels and sdists into a directory hub and rewrite its indexes.

    Like PyPI, a published file is never silently replaced: the same name with other content
    is a `UsageError` (bump the version) unless `overwrite`; the identical file is a no-op.
    """
    root = Path(hub)
    root.mkdir(parents=True, exist_ok=True)
    copied = []
    for d in map(Path, dists):
        dest = root / d.name
        if dest.exists() and not overwrite and _sha256(dest) != _sha256(d):
            project = dist_project(d.name)
            raise UsageError(
                f"{dest} is already published with other content; a version is published once."
                f" Bump the version in pyproject.toml (now {project[1] if project else '?'}), "
                "or pass --overwrite to replace it")
        shutil.copy2(d, dest)
        copied.append(dest)
    write_index(root)
    return copied


# ----------------------------------------------------------------------------- index upload
def twine_command(url: str, dists: Sequence[str | Path]) -> list[str]:
    """`python -m twine upload` to a PyPI-compatible index. Credentials come from
    `TWINE_USERNAME`/`TWINE_PASSWORD` (or `~/.pypirc`); `--non-interactive` makes a missing
    one an error instead of a prompt that would hang a script."""
    return [sys.executable, "-m", "twine", "upload", "--non-interactive",
            "--repository-url", url, *map(str, dists)]


TWINE_HINT = ("set TWINE_USERNAME and TWINE_PASSWORD (for PyPI and TestPyPI: `__token__` and an "
              "API token), check that the URL is the index's upload endpoint (PyPI: "
              "https://upload.pypi.org/legacy/), and that this version is not already there")


# ----------------------------------------------------------------------------- image
def image_commands(pkg: Package, registry: str) -> list[list[str]]:
    """`docker build` and `docker push` of the package's Dockerfile as
    `REGISTRY/<name>:<version>`."""
    tag = image_ref(pkg, registry)
    return [["docker", "build", "-t", tag, str(pkg.path)], ["docker", "push", tag]]


def image_ref(pkg: Package, registry: str) -> str:
    return f"{registry.rstrip('/')}/{normalize(pkg.name)}:{pkg.version}"


# ----------------------------------------------------------------------------- publish
@dataclass
class PublishPlan:
    """What `publish` will do: where the files go, and the commands it runs after building."""

    package: Package
    destination: str
    to_url: bool
    image: str | None = None
    skipped_image: str = ""
    commands: list[list[str]] = field(default_factory=list)


def plan_publish(path: str | Path, to: str | Path, *, registry: str | None = None) -> PublishPlan:
    """Decide what `publish(path, to, registry=...)` does, without running anything.

    The image is built and pushed only when the package has a Dockerfile and a registry is
    given (`registry`, else `$SKYHUB_REGISTRY`); `skipped_image` says why not otherwise.
    """
    pkg = read_package(path)
    if not pkg.env_entry_points:
        raise UsageError(f"{pkg.path / 'pyproject.toml'} declares no [project.entry-points."
                         "\"skyhub.envs\"]: installing it would register no env. Add one "
                         "(`skyhub new NAME` shows how)")
    to_url = is_url(str(to))
    dest = str(to).removeprefix("file://") if not to_url else str(to)
    plan = PublishPlan(pkg, dest, to_url)
    registry = registry or os.environ.get(REGISTRY_ENV) or None
    if pkg.dockerfile is None:
        plan.skipped_image = "no Dockerfile"
    elif registry is None:
        plan.skipped_image = f"no registry (pass --registry or set {REGISTRY_ENV})"
    else:
        plan.image = image_ref(pkg, registry)
        plan.commands += image_commands(pkg, registry)
    return plan


@dataclass
class PublishResult:
    plan: PublishPlan
    files: list[Path]


def publish(path: str | Path, to: str | Path, *, registry: str | None = None,
            overwrite: bool = False, isolation: bool | None = None) -> PublishResult:
    """Build the package at `path` and publish it to `to` (a directory hub or an index URL);
    push its image when `registry` (or `$SKYHUB_REGISTRY`) is set and it has a Dockerfile."""
    plan = plan_publish(path, to, registry=registry)
    with tempfile.TemporaryDirectory(prefix="skyhub-build-") as tmp:
        dists = build(plan.package.path, tmp, isolation=isolation)
        if plan.to_url:
            _run(twine_command(plan.destination, dists),
                 what=f"uploading to {plan.destination}", hint=TWINE_HINT, error=UsageError)
            files = [Path(plan.destination.rstrip("/")) / d.name for d in dists]
        else:
            files = publish_to_dir(dists, plan.destination, overwrite=overwrite)
    for cmd in plan.commands:
        _run(cmd, what=f"`{' '.join(cmd[:2])}` of {plan.image}",
             hint="check that Docker runs (`docker info`) and that you are logged in to the "
                  "registry (`docker login REGISTRY`)")
    return PublishResult(plan, files)


# ----------------------------------------------------------------------------- helpers
def _run(cmd: list[str], *, what: str, hint: str,
         error: type[Exception] = InfraError, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a tool; on failure raise `error` with the end of its output and `hint`."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    except FileNotFoundError:
        raise error(f"{what}: `{cmd[0]}` is not installed or not on the PATH; {hint}") from None
    if r.returncode != 0:
        text = _ANSI.sub("", r.stderr.strip() or r.stdout.strip())  # twine colours its errors
        tail = "\n".join(text.splitlines()[-12:])
        raise error(f"{what} failed (exit {r.returncode}):\n{tail}\nTo fix: {hint}")
    return r


__all__ = ["REGISTRY_ENV", "Package", "PublishPlan", "PublishResult", "build", "build_command",
           "dist_project", "image_commands", "is_url", "normalize", "plan_publish", "publish",
           "publish_to_dir", "read_package", "twine_command", "write_index"]
