"""Install env packages (`skyhub install NAME`) from a hub that `skyhub publish` wrote to (a
directory hub) or from a PyPI-compatible index, and register their envs in this process.

`--from HUB` means *only* HUB (against dependency confusion). pip merges every
source it is configured with (`pip.conf`'s `index-url`/`extra-index-url`/`find-links`,
`PIP_EXTRA_INDEX_URL`, `PIP_FIND_LINKS`...) and takes the highest version it finds anywhere, so
`--find-links HUB` alone let a same-named package of a higher version on another index win,
and its code ran at import. So an install from a hub:

- reads the hub's *listing* (a directory hub's `index.html`, written by `skyhub publish` with
  each file's sha256; an index's PEP 503 page for the project) and picks the version there;
- verifies a directory hub's files against that listing before pip sees them (a file changed
  after publishing is refused: `ChecksumMismatch`);
- runs pip with every other source cut off: `--isolated` (no `PIP_*` variables, no user
  config), `PIP_CONFIG_FILE=/dev/null` (no config file at all: `--isolated` still reads the
  global and site ones), the `PIP_*` variables removed from its environment, `--no-index
  --find-links HUB` (or `--index-url URL`), and a requirements file that pins the version by
  hash, which puts pip in `--require-hashes` mode.

Dependencies therefore come from the hub or are already installed; pip is never asked to find
one elsewhere (a dependency's name is as open to confusion as the package's). Without
`--from`, pip's own configuration is used, as `pip install` would.

Over ~400 lines, for a reason: one job, an install that pip cannot redirect: reading the
listing, choosing and verifying the files and pinning pip are one chain, each step relying on
the one before.
"""

from __future__ import annotations

import hashlib
import html.parser
import os
import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyhub.errors import ChecksumMismatch, DataNotFound, UsageError
from skyhub.share.publish import dist_project, is_url, normalize

_REQ_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*((?:[=!<>~]=?|===)\s*\S.*)?$")
#: How long reading an index's project page may take.
INDEX_TIMEOUT_S = 60.0


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


# ----------------------------------------------------------------------------- listings
@dataclass(frozen=True)
class HubFile:
    """One published file as the hub lists it: the listing's hash is what gets pinned."""

    filename: str
    project: str
    version: str
    sha256: str
    #: where it is: a path for a directory hub, a URL for an index
    location: str


class _Links(html.parser.HTMLParser):
    """The `href`s of a PEP 503 page (or a directory hub's `index.html`)."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _parse_listing(page: str, base: str, *, local: Path | None = None) -> list[HubFile]:
    """The files a listing page links to with a sha256 (links without one cannot be pinned
    and are left out). `local`: a directory hub, whose links name files in it."""
    parser = _Links()
    parser.feed(page)
    out = []
    for href in parser.hrefs:
        url, _, fragment = href.partition("#")
        algo, _, digest = fragment.partition("=")
        filename = urllib.parse.unquote(url.rsplit("/", 1)[-1])
        proj = dist_project(filename)
        if algo != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", digest) or proj is None:
            continue
        if local is not None:
            if "/" in url or filename in ("", ".", ".."):
                continue  # a directory hub's index names files beside it, nothing else
            location = str(local / filename)
        else:
            location = urllib.parse.urljoin(base, url)
        out.append(HubFile(filename, proj[0], proj[1], digest, location))
    return out


def read_listing(hub: str | Path) -> dict[str, list[HubFile]]:
    """project -> its files, from a directory hub's `index.html` (the hashes `skyhub publish`
    wrote: the hub's lock). Files in the folder that the listing does not name are not
    offered: nobody published them."""
    root = Path(str(hub).removeprefix("file://"))
    index = root / "index.html"
    if not index.is_file():
        raise DataNotFound(
            f"{root} has no index.html, the listing with each file's sha256 that `skyhub "
            "publish --to DIR` writes; without it nothing can be pinned. Publish there with "
            "`skyhub publish`, or write the listing of a folder of wheels you trust with "
            "`python -c \"from skyhub.share.publish import write_index; "
            f"write_index('{root}')\"`")
    out: dict[str, list[HubFile]] = {}
    for f in _parse_listing(index.read_text(encoding="utf-8"), "", local=root):
        out.setdefault(f.project, []).append(f)
    return out


def hub_projects(hub: str | Path) -> dict[str, list[str]]:
    """project -> file names, as a directory hub's listing names them."""
    return {p: [f.filename for f in files] for p, files in read_listing(hub).items()}


def index_listing(index_url: str, project: str) -> list[HubFile]:
    """A project's files on a PEP 503 index (`URL/PROJECT/`), with the sha256 of each."""
    url = f"{index_url.rstrip('/')}/{normalize(project)}/"
    req = urllib.request.Request(url, headers={"Accept": "text/html"})
    try:
        with urllib.request.urlopen(req, timeout=INDEX_TIMEOUT_S) as r:
            page = r.read(32 << 20).decode("utf-8", "replace")
            base = r.geturl()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return []
        raise DataNotFound(f"the index answered {e.code} for {url}; check --from") from None
    except (urllib.error.URLError, OSError) as e:
        raise DataNotFound(f"cannot read the index page {url} ({e}); check --from and the "
                           "network") from None
    return [f for f in _parse_listing(page, base) if f.project == normalize(project)]


# ----------------------------------------------------------------------------- pinning
def _version_tools() -> tuple[Any, Any, Any]:
    """`packaging`'s Version, InvalidVersion and SpecifierSet (pip's copy when `packaging`
    itself is not installed: pip is there, since it does the install)."""
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover - packaging ships with nearly every Python
        from pip._vendor.packaging.specifiers import SpecifierSet  # type: ignore[no-redef]
        from pip._vendor.packaging.version import (  # type: ignore[no-redef]
            InvalidVersion,
            Version,
        )
    return Version, InvalidVersion, SpecifierSet


def choose_version(files: list[HubFile], specifier: str) -> tuple[str, list[HubFile]]:
    """The newest listed version that `specifier` admits (pre-releases only when asked for
    or when nothing else matches, as pip does) and its files; `DataNotFound` if none."""
    Version, InvalidVersion, SpecifierSet = _version_tools()
    try:
        spec = SpecifierSet(specifier)
    except Exception:
        raise UsageError(f"cannot read the version specifier {specifier!r}; e.g. ==0.1.0 or "
                         ">=0.2") from None
    by_version: dict[Any, list[HubFile]] = {}
    for f in files:
        try:
            by_version.setdefault(Version(f.version), []).append(f)
        except InvalidVersion:
            continue
    admitted = list(spec.filter(by_version))
    if not admitted:
        have = ", ".join(str(v) for v in sorted(by_version)) or "none"
        raise DataNotFound(f"no version of {files[0].project if files else 'it'}"
                           f"{specifier} is listed (versions there: {have})")
    best = max(admitted)
    return str(best), by_version[best]


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_local(files: list[HubFile]) -> None:
    """Each file of a directory hub hashes to what its listing says (`ChecksumMismatch`)."""
    for f in files:
        try:
            got = sha256_file(f.location)
        except FileNotFoundError:
            raise DataNotFound(f"the hub lists {f.filename} but the file is gone; publish it "
                               "again") from None
        if got != f.sha256:
            raise ChecksumMismatch(
                f"{f.location} hashes to sha256 {got}, but the hub's listing was published "
                f"with {f.sha256}: the file changed after it was published. Refusing to "
                "install it; publish the package again (`skyhub publish PATH --to HUB "
                "--overwrite`) if the change is yours")


def pinned_requirement(dist: str, version: str, files: list[HubFile]) -> str:
    """One requirements-file line: `dist==version` and the hash of each of its files (a
    wheel and an sdist); any `--hash` puts pip in require-hashes mode."""
    hashes = " ".join(f"--hash=sha256:{h}" for h in sorted({f.sha256 for f in files}))
    return f"{dist}=={version} {hashes}\n"


def pip_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment pip runs in for a hub install: no `PIP_*` variable (an extra index or
    find-links among them) and no configuration file (`PIP_CONFIG_FILE=/dev/null` makes pip
    skip every one, global and site included)."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.upper().startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def pip_install_command(requirement: str | Path, source: str | Path | None = None, *,
                        python: str | None = None) -> list[str]:
    """The pip command of an install.

    With a `source` (a directory hub or an index URL), `requirement` is a requirements file
    (from `pinned_requirement`) and pip reads that source only: `--isolated`, `--no-index
    --find-links DIR` or `--index-url URL`. Run it with `pip_environment()`. Without a source
    it is `pip install --upgrade REQ` with pip's own configuration.
    """
    cmd = [python or sys.executable, "-m", "pip", "install", "--disable-pip-version-check"]
    if source is None:
        return [*cmd, "--upgrade", "--upgrade-strategy", "only-if-needed", str(requirement)]
    src = str(source)
    cmd.append("--isolated")
    if is_url(src):
        cmd += ["--index-url", src, *_transport_options()]
    else:
        cmd += ["--no-index", "--find-links", str(Path(src.removeprefix("file://")).resolve())]
    return [*cmd, "--prefer-binary", "--require-hashes", "-r", str(requirement)]


#: `PIP_*` variables that say how to reach an index, never where to look: kept (as options)
#: for an install from an index URL, which may need a proxy or a private CA.
_TRANSPORT = {"PIP_CERT": "--cert", "PIP_CLIENT_CERT": "--client-cert", "PIP_PROXY": "--proxy",
              "PIP_DEFAULT_TIMEOUT": "--timeout", "PIP_TIMEOUT": "--timeout",
              "PIP_RETRIES": "--retries"}


def _transport_options() -> list[str]:
    out: list[str] = []
    for var, option in _TRANSPORT.items():
        if os.environ.get(var) and option not in out:
            out += [option, os.environ[var]]
    return out


# ----------------------------------------------------------------------------- install
@dataclass
class InstallResult:
    distribution: str
    version: str
    env_ids: list[str]


def _resolve(name: str, specifier: str, source: str) -> tuple[str, str, list[HubFile]]:
    """(distribution, version, its files) from the hub's listing."""
    candidates = distribution_candidates(name)
    if is_url(source):
        listed = {c: files for c in candidates if (files := index_listing(source, c))}
        where = f"the index {source}"
    else:
        hub = Path(source.removeprefix("file://"))
        if not hub.is_dir():
            raise DataNotFound(f"hub directory {hub} does not exist; pass the directory given "
                               "to `skyhub publish --to`, or an index URL")
        listed = read_listing(hub)
        where = f"the hub {hub}"
    found = [c for c in candidates if c in listed]
    if not found:
        have = (", ".join(sorted(listed)) or "nothing") if not is_url(source) else "neither"
        raise DataNotFound(f"{name!r} is not in {where} (looked for "
                           f"{' or '.join(candidates)}, with a sha256 in its listing; it has "
                           f"{have}). Publish it there with `skyhub publish PATH --to DIR`, "
                           "or check the name")
    dist = found[0]
    version, files = choose_version(listed[dist], specifier)
    return dist, version, files


def install(spec: str, source: str | Path | None = None, *,
            no_index: bool = False) -> InstallResult:
    """Install an env package into this interpreter and register its envs in this process.

    `spec` is `NAME` or `NAME==VERSION` (any pip specifier), NAME the env package's name
    (`demo-env` or `skyhub-demo-env`). `source` is a directory hub or an index URL: the
    package then comes from there only, at the version its listing pins by hash, and its
    dependencies from there or from what is installed (see the module docstring). Without a
    source pip's configured index is used and unpinned installs upgrade to the newest
    version. `no_index` is implied by a source and refused without one.
    """
    name, specifier = parse_requirement(spec)
    if source is None:
        if no_index:
            raise UsageError("--no-index needs --from HUB: with neither, there is nowhere to "
                             "install from")
        return _install_from_pip_config(name, specifier)
    src = str(source)
    dist, version, files = _resolve(name, specifier, src)
    if not is_url(src):
        verify_local(files)
    with tempfile.TemporaryDirectory(prefix="skyhub-install-") as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(pinned_requirement(dist, version, files), encoding="utf-8")
        r = subprocess.run(pip_install_command(req, src), capture_output=True, text=True,
                           check=False, env=pip_environment())
    if r.returncode != 0:
        raise _pip_failure(r, f"{dist}=={version}", src, hub_install=True)
    return InstallResult(dist, _installed_version(dist), _register_installed(dist))


def _install_from_pip_config(name: str, specifier: str) -> InstallResult:
    last: subprocess.CompletedProcess[str] | None = None
    candidates = distribution_candidates(name)
    dist = candidates[0]
    for dist in candidates:
        last = subprocess.run(pip_install_command(dist + specifier), capture_output=True,
                              text=True, check=False)
        if last.returncode == 0:
            return InstallResult(dist, _installed_version(dist), _register_installed(dist))
        if "No matching distribution" not in last.stderr:
            break  # another failure: trying another name would hide it
    assert last is not None
    if "No matching distribution" in last.stderr:
        tail = "\n".join((last.stderr or last.stdout).strip().splitlines()[-8:])
        raise DataNotFound(f"no distribution {' or '.join(candidates)}{specifier}:\n{tail}\n"
                           "Check the name and version, or publish it first")
    raise _pip_failure(last, dist + specifier, None, hub_install=False)


def _pip_failure(r: subprocess.CompletedProcess[str], what: str, source: str | None, *,
                 hub_install: bool) -> Exception:
    text = (r.stderr or r.stdout).strip()
    tail = "\n".join(text.splitlines()[-8:])
    where = f" from {source}" if source is not None else ""
    if "DO NOT MATCH THE HASHES" in text:
        return ChecksumMismatch(f"pip refused {what}{where}: a file does not hash to what the "
                                f"hub's listing pins:\n{tail}\nThe hub's file changed after "
                                "it was published; publish the package again if the change "
                                "is yours")
    missing = re.search(r"No matching distribution found for ([A-Za-z0-9._-]+)", text)
    if hub_install and (missing or "Hashes are required in --require-hashes mode" in text):
        dep = missing.group(1) if missing else "a dependency"
        return DataNotFound(
            f"pip could not install {what}{where}: {dep} is neither installed here nor "
            f"pinned in the hub:\n{tail}\nAn install from a hub reads nothing else (another "
            f"index could serve a look-alike). Install the dependencies first (`pip install "
            f"{dep if missing else 'DEPENDENCY'}`), then rerun")
    return UsageError(f"pip could not install {what}{where} (exit {r.returncode}):\n{tail}\n"
                      "Fix what pip reports above and retry")


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


__all__ = ["HubFile", "InstallResult", "choose_version", "distribution_candidates",
           "hub_projects", "index_listing", "install", "parse_requirement", "pinned_requirement",
           "pip_environment", "pip_install_command", "read_listing", "verify_local"]
