"""Install env packages (`skyhub install NAME`) from a hub that `skyhub publish` wrote to (a
directory hub, read through `pip --find-links`) or from a PyPI-compatible index, and register
their envs in this process. The install is `python -m pip` of the current interpreter, first
built as a command (`pip_install_command`) so that what runs can be shown and tested.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from skyhub.errors import DataNotFound, UsageError
from skyhub.share.publish import dist_project, is_url, normalize

_REQ_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*((?:[=!<>~]=?|===)\s*\S.*)?$")


def parse_requirement(spec: str) -> tuple[str, str]:
    """`demo-env==1.2` -> (`demo-env`, `==1.2`); `UsageError` for anything else."""
    m = _REQ_RE.match(spec)
    if m is None:
        raise UsageError(f"cannot read {spec!r} as NAME or NAME==VERSION (e.g. 'demo-env' or "
                         "'demo-env==0.1.0')")
    return m.group(1), (m.group(2) or "").replace(" ", "")


def distribution_candidates(name: str) -> list[str]:
    """The distributions `skyhub install NAME` may mean: `skyhub-NAME` (what `skyhub new`
    makes) first, then NAME itself (a package with another naming scheme)."""
    n = normalize(name)
    return [n] if n.startswith("skyhub-") else [f"skyhub-{n}", n]


def hub_projects(hub: str | Path) -> dict[str, list[str]]:
    """project -> file names in a directory hub (its files, not its possibly stale index)."""
    out: dict[str, list[str]] = {}
    for p in sorted(Path(hub).iterdir()):
        if p.is_file() and (proj := dist_project(p.name)):
            out.setdefault(proj[0], []).append(p.name)
    return out


def pip_install_command(requirement: str, source: str | Path | None = None, *,
                        no_index: bool = False, upgrade: bool = True,
                        python: str | None = None) -> list[str]:
    """`python -m pip install REQ` reading from a directory hub (`--find-links`) or an index
    (`--index-url`). `upgrade` makes an unpinned install take the newest version."""
    cmd = [python or sys.executable, "-m", "pip", "install", "--disable-pip-version-check"]
    if upgrade:
        cmd += ["--upgrade", "--upgrade-strategy", "only-if-needed"]
    if source is not None:
        src = str(source)
        if is_url(src):
            cmd += ["--index-url", src]
        else:
            cmd += ["--find-links", str(Path(src.removeprefix("file://")).resolve())]
    if no_index:
        cmd.append("--no-index")
    return [*cmd, requirement]


@dataclass
class InstallResult:
    distribution: str
    version: str
    env_ids: list[str]


def install(spec: str, source: str | Path | None = None, *,
            no_index: bool = False) -> InstallResult:
    """Install an env package into this interpreter and register its envs in this process.

    `spec` is `NAME` or `NAME==VERSION` (any pip specifier), NAME the env package's name
    (`demo-env` or `skyhub-demo-env`). `source` is a directory hub or an index URL; without it
    pip's configured index is used. Unpinned installs upgrade to the newest version.
    """
    name, specifier = parse_requirement(spec)
    candidates = distribution_candidates(name)
    if source is not None and not is_url(str(source)):
        hub = Path(str(source).removeprefix("file://"))
        if not hub.is_dir():
            raise DataNotFound(f"hub directory {hub} does not exist; pass the directory given "
                               "to `skyhub publish --to`, or an index URL")
        projects = hub_projects(hub)
        found = [c for c in candidates if c in projects]
        if not found:
            have = ", ".join(sorted(projects)) or "nothing"
            raise DataNotFound(f"{name!r} is not in the hub {hub} (looked for "
                               f"{' or '.join(candidates)}; it has {have}). Publish it there "
                               "with `skyhub publish PATH --to DIR`, or check the name")
        candidates = found[:1]
    last: subprocess.CompletedProcess[str] | None = None
    for dist in candidates:
        cmd = pip_install_command(dist + specifier, source, no_index=no_index)
        last = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if last.returncode == 0:
            break
        if "No matching distribution" not in last.stderr:
            break  # another failure: trying another name would hide it
    assert last is not None
    if last.returncode != 0:
        tail = "\n".join((last.stderr or last.stdout).strip().splitlines()[-8:])
        where = f" from {source}" if source is not None else ""
        if "No matching distribution" in last.stderr:
            raise DataNotFound(f"no distribution {' or '.join(candidates)}{specifier}{where}:\n"
                               f"{tail}\nCheck the name and version (a directory hub lists its "
                               "files in index.html), or publish it first")
        raise UsageError(f"pip could not install {dist}{specifier}{where} (exit "
                         f"{last.returncode}):\n{tail}\nFix what pip reports above and retry")
    return InstallResult(dist, _installed_version(dist), _register_installed(dist))


def _installed_version(dist: str) -> str:
    import importlib
    import importlib.metadata

    importlib.invalidate_caches()
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _register_installed(dist: str) -> list[str]:
    """Reload the registry's plugins and return the env ids the distribution registered."""
    import importlib
    import importlib.metadata
    import warnings

    from skyhub.registry import ENTRY_POINT_GROUP, list_envs, load_plugins

    importlib.invalidate_caches()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load_plugins(reload=True)
    try:
        eps = [ep for ep in importlib.metadata.distribution(dist).entry_points
               if ep.group == ENTRY_POINT_GROUP]
    except importlib.metadata.PackageNotFoundError:
        return []
    roots = {ep.value.split(":")[0] for ep in eps}
    return sorted(s.id for s in list_envs()
                  if any(s.source == r or s.source.startswith(r + ".") for r in roots)) \
        or sorted(ep.name for ep in eps)


__all__ = ["InstallResult", "distribution_candidates", "hub_projects", "install",
           "parse_requirement", "pip_install_command"]
