"""The repository of an episode, on the host: where it comes from, its files at the task's
start, and what the agent changed in them.

An instance's repository is found under the env's `repos` directory as SWE-bench names
repository folders (`<owner>__<name>`), by its bare name, or as an archive of either
(`.tar`, `.tar.gz`, `.tgz`, `.zip`); `repos` may also be the one repository itself. A git
repository is read at the instance's `base_commit` (`git archive`), anything else as it is.
The episode's `/testbed` gets those files plus the task's bug (`extra["bug_patch"]`, for
generated tasks) as one fresh commit: no history, so `git log` cannot show the fix (the
leak SWE-bench images had), and `git diff` shows the agent its own changes.

What the agent changed is read from a copy of its `/testbed` taken out of the sandbox (no
code of the agent's runs to produce it), compared file by file with the start. Changes to
test and test-configuration files, and to files Python runs at start-up, are set aside: the
grader restores the tests, so a fix that lives there is no fix.

The sandbox side is one factory, `testbed_sandbox`: a sandbox whose workdir is /testbed.
"""

from __future__ import annotations

import io
import posixpath
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

from skyhub.errors import DataNotFound, UsageError

from .diffs import apply_patch, parse_patch, unified_diff

TESTBED = "/testbed"
ARCHIVES = (".tar", ".tar.gz", ".tgz", ".zip")
#: files a test run reads besides the tests: its configuration and Python's start-up hooks
TEST_CONFIG = {"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml",
               "sitecustomize.py", "usercustomize.py", ".coveragerc", "noxfile.py"}
TEST_DIRS = {"tests", "test", "testing"}


def find_repository(repos: Path, repo: str) -> Path:
    """The folder or archive holding `repo` (`owner/name`) under `repos`."""
    owner_name = repo.replace("/", "__")
    name = repo.rsplit("/", 1)[-1]
    for stem in (owner_name, name):
        if (repos / stem).is_dir():
            return repos / stem
        for suffix in ARCHIVES:
            if (repos / f"{stem}{suffix}").is_file():
                return repos / f"{stem}{suffix}"
    if repos.is_dir() and ((repos / ".git").exists() or repos.name in (owner_name, name)):
        return repos
    if repos.is_file() and repos.name.endswith(ARCHIVES):
        return repos
    raise DataNotFound(f"no repository for {repo} under {repos}: put it there as "
                       f"{owner_name}/ (a git clone or the source tree) or {owner_name}.tar.gz")


def export(source: Path, commit: str | None, dest: Path) -> None:
    """The repository's files at `commit` (git) or as they are, into the empty dir `dest`."""
    if source.is_file():
        _extract(source, dest)
        inner = [p for p in dest.iterdir()]
        if len(inner) == 1 and inner[0].is_dir():  # an archive of one top folder
            for p in list(inner[0].iterdir()):
                p.rename(dest / p.name)
            inner[0].rmdir()
        if (dest / ".git").exists() and commit:
            _git_export(dest, commit, dest)
        return
    if (source / ".git").exists() and commit:
        _git_export(source, commit, dest)
        return
    shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".git"))


def _git_export(repo: Path, commit: str, dest: Path) -> None:
    r = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit],
                       capture_output=True, timeout=600)
    if r.returncode != 0:
        raise DataNotFound(f"{repo}: cannot read commit {commit}: "
                           f"{r.stderr.decode(errors='replace').strip()[:300]}")
    if repo == dest:
        for p in list(dest.iterdir()):
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tar:
        tar.extractall(dest, filter="data")


def _extract(archive: Path, dest: Path) -> None:
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            for member in z.namelist():
                if member.startswith("/") or ".." in PurePosixPath(member).parts:
                    raise UsageError(f"{archive}: unsafe path {member!r} in the archive")
            z.extractall(dest)
        return
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")


#: what the verdict reads of the agent's tree: a file over the first, or any file once the
#: second is used up, is set aside (not applied), so a tree filled on purpose costs the host
#: no more memory than this
MAX_FILE_BYTES = 8 << 20
MAX_TREE_BYTES = 256 << 20


def read_tree(root: Path, *, max_file: int | None = None, max_total: int | None = None,
              too_big: list[str] | None = None) -> dict[str, bytes]:
    """Every regular file under `root` (relative posix path -> bytes), `.git` left out;
    links are not followed (nor kept: they cannot carry a fix). Files over `max_file`
    bytes, or past `max_total` in all, are left out and their paths added to `too_big`."""
    out: dict[str, bytes] = {}
    total = 0
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel == ".git" or rel.startswith(".git/") or path.is_symlink() or not path.is_file():
            continue
        size = path.stat().st_size
        if (max_file is not None and size > max_file) or \
                (max_total is not None and total + size > max_total):
            if too_big is not None:
                too_big.append(rel)
            continue
        total += size
        out[rel] = path.read_bytes()
    return out


def is_protected(path: str, test_files: frozenset[str] = frozenset()) -> bool:
    """Whether a change to `path` is set aside by the grader: a file of the test patch, a
    test file by pytest's naming (`test_*.py`, `*_test.py`, or under `tests/`, `test/`,
    `testing/`), a test configuration file, or a Python start-up hook (`*.pth`)."""
    p = PurePosixPath(path)
    return (path in test_files or p.name in TEST_CONFIG or p.suffix == ".pth"
            or (p.suffix == ".py" and (p.name.startswith("test_") or p.stem.endswith("_test")))
            or any(part in TEST_DIRS for part in p.parts[:-1]))


class Workspace:
    """One task's files: `base` (the repository at its commit), `bug` (what the task's bug
    patch changes in it: path -> new bytes, None: deleted), `start` (the two together: what
    the agent gets), and the grader's view of what an agent did to them."""

    def __init__(self, base: dict[str, bytes], bug_patch: str = "",
                 test_patch: str = "") -> None:
        self.base, self.test_patch = base, test_patch
        self.bug = _patched(base, bug_patch)
        self.start = {p: b for p, b in base.items() if p not in self.bug}
        self.start |= {p: b for p, b in self.bug.items() if b is not None}
        self.test_files = frozenset(fd.path for fd in parse_patch(test_patch)) \
            if test_patch.strip() else frozenset()

    def write(self, dest: Path) -> None:
        """The starting files, into the host directory `dest`."""
        for rel, data in self.start.items():
            path = dest / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    def changes(self, final: dict[str, bytes], too_big: list[str] = ()
                ) -> tuple[dict[str, bytes | None], list[str]]:
        """The agent's changes (path -> new bytes, None: deleted) that the grader applies,
        and the paths of those it set aside (`is_protected`, or `too_big` to be read)."""
        kept: dict[str, bytes | None] = {}
        set_aside: list[str] = []
        big = set(too_big)
        for path in sorted(set(self.start) | set(final) | big):
            new = final.get(path)
            if path not in big and new == self.start.get(path):
                continue
            if path in big or is_protected(path, self.test_files):
                set_aside.append(path)
            else:
                kept[path] = new
        return kept, set_aside

    def diff(self, changes: dict[str, bytes | None]) -> str:
        """The changes as one git-style patch (the agent's `model_patch`)."""
        def text(b: bytes | None) -> str:
            return "" if b is None else b.decode("utf-8", "replace")

        return "".join(unified_diff(p, text(self.start.get(p)), text(new))
                       for p, new in sorted(changes.items()))

    def test_files_after_patch(self) -> dict[str, bytes | None]:
        """The test patch applied to the starting files: what the grader writes over the
        agent's versions."""
        return _patched(self.start, self.test_patch)

    def read_old(self, path: str) -> str | None:
        """A starting file's text (None if it did not exist): for `localization`."""
        data = self.start.get(posixpath.normpath(path))
        return None if data is None else data.decode("utf-8", "replace")


def _patched(files: dict[str, bytes], patch: str) -> dict[str, bytes | None]:
    """The files `patch` changes in `files`, with their new bytes (None: deleted)."""
    if not patch.strip():
        return {}
    texts = {p: b.decode("utf-8", "replace") for p, b in files.items()}
    return {p: None if t is None else t.encode() for p, t in apply_patch(texts, patch).items()}



def testbed_sandbox(backend: str = "auto", image: str | None = None, **kwargs: Any) -> Any:
    """A sandbox whose workdir is /testbed; on Docker the `swe` image unless `image`."""
    import skyhub.sandbox
    from skyhub.sandbox import images

    if backend == "auto":
        backend = "docker" if skyhub.sandbox.docker_available() else "local"
    if image is None and backend == "docker":
        image = images.image_tag("swe")
    return skyhub.sandbox.create(image=image, backend=backend, workdir=TESTBED, **kwargs)


__all__ = ["MAX_FILE_BYTES", "MAX_TREE_BYTES", "TESTBED", "Workspace", "export",
           "find_repository", "is_protected", "read_tree", "testbed_sandbox"]
