"""The swe-synth dataset on disk: the projects' sources from PyPI, and the tasks made from them.

    skyhub swe data get swe-synth            # or get(root), from Python

For each project in `PROJECTS` (pure Python, no dependencies, a pytest suite that ships in
its sdist and passes offline in about a second or three) the pinned sdist is downloaded,
checked against the SHA-256 in PyPI's index, and unpacked to `<root>/swe-synth/repos/<name>/`.
Then `synth.generate` plants bugs in its source files and keeps those its tests catch, the
tests running in a sandbox of the `swe` image (or the local backend) with the project at
/testbed: the same place and interpreter the env grades in, so a test's verdict is the same
both times. The tasks go to `<root>/swe-synth/instances.jsonl`, one SWE-bench record each,
with the test command and the bug patch in it.

The three projects need nothing beyond Python and pytest, so one image (`swe`: Debian's
Python and pytest) serves all of them; a project with dependencies would get its own image.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from skyhub.errors import ChecksumMismatch, DownloadError, UsageError

from .instances import Instance
from .synth import PYTEST, Project, generate, sandbox_runner
from .workspace import testbed_sandbox

_FILES = "https://files.pythonhosted.org/packages"


@dataclass(frozen=True)
class SynthProject:
    """A project tasks are made from: its pinned sdist (`url`, `sha256` as PyPI's index lists
    it), `license`, the source files bugs are planted in (`sources`, globs under the project
    root) and the command that runs its tests from there (`tests`)."""

    name: str
    version: str
    url: str
    sha256: str
    license: str
    sources: tuple[str, ...]
    tests: str

    @property
    def test_command(self) -> str:
        return f"{PYTEST} {self.tests}"


PROJECTS: dict[str, SynthProject] = {p.name: p for p in (
    SynthProject("toolz", "1.2.0",
                 f"{_FILES}/31/6f/ae20c212a07aa2d156c787383d8088a5e045ee39628661edb190c97e1659/"
                 "toolz-1.2.0.tar.gz",
                 "9667a038e9d6ecba37995e26cb2f59ec6420b6ad8dd9677de59db9b956b08490",
                 "BSD-3-Clause", ("toolz/*.py", "toolz/sandbox/*.py"), "toolz"),
    SynthProject("inflection", "0.5.1",
                 f"{_FILES}/e1/7e/691d061b7329bc8d54edbf0ec22fbfb2afe61facb681f9aaa9bff7a27d04/"
                 "inflection-0.5.1.tar.gz",
                 "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417",
                 "MIT", ("inflection/__init__.py",), "test_inflection.py"),
    SynthProject("boltons", "26.2.0",
                 f"{_FILES}/71/56/14c4a4931910a81ddeccfbe227925ea738e3c445d3e2af960f0bcbba1616/"
                 "boltons-26.2.0.tar.gz",
                 "d39cfd15c1a1c3bd4d705c82252fa9edb8e4f5e8cc039f8e39afac7b1b47e92c",
                 "BSD-3-Clause", ("boltons/*.py",), "tests"),
)}


def dataset_dir(root: str | Path | None = None) -> Path:
    """`<root>/swe-synth` (root: `$SKYHUB_DATA` by default)."""
    if root is None:
        root = os.environ.get("SKYHUB_DATA")
        if not root:
            raise UsageError("no data root: pass --root DIR (root=...) or set SKYHUB_DATA; "
                             "swe-synth lives in $SKYHUB_DATA/swe-synth")
    return Path(root).expanduser() / "swe-synth"


def fetch(project: SynthProject, dest: Path, *, url: str | None = None) -> Path:
    """The project's sdist, verified, unpacked to `dest/<name>/` (kept if already there)."""
    target, stamp = dest / project.name, dest / f".{project.name}.sha256"
    if target.is_dir() and stamp.is_file() and stamp.read_text().strip() == project.sha256:
        return target
    source = url or project.url
    request = urllib.request.Request(source, headers={"User-Agent": "skyhub-data"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            data = r.read()
    except (urllib.error.URLError, OSError) as e:
        raise DownloadError(f"could not download {source}: {e}. Check the network, or "
                            f"download {project.url} by hand and pass its path") from None
    got = hashlib.sha256(data).hexdigest()
    if got != project.sha256:
        raise ChecksumMismatch(f"{source} has sha256 {got}, but PyPI lists {project.sha256} "
                               f"for {project.name} {project.version}; nothing was unpacked")
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".staging-", dir=dest) as tmp:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tmp, filter="data")
        (top,) = Path(tmp).iterdir()  # an sdist holds one folder, name-version/
        if target.exists():
            shutil.rmtree(target)
        top.rename(target)
    stamp.write_text(project.sha256 + "\n")
    return target


def sources(project: SynthProject, tree: Path) -> dict[str, str]:
    """The files bugs may be planted in (tests and `__init__` re-exports left out)."""
    out: dict[str, str] = {}
    for pattern in project.sources:
        for path in sorted(tree.glob(pattern)):
            rel = path.relative_to(tree).as_posix()
            if "/tests/" in f"/{rel}" or path.name.startswith("test_"):
                continue
            out[rel] = path.read_text(encoding="utf-8")
    return out


def make_tasks(project: SynthProject, tree: Path, *, n: int, seed: int = 0,
               backend: str = "auto", image: str | None = None,
               on_try: Any = None) -> Iterator[Instance]:
    """Up to `n` tasks from the unpacked project at `tree`, its tests run in a sandbox."""
    with testbed_sandbox(backend, image, memory_mb=2048, pool="swe-synth") as sb:
        sb.upload(tree, "/testbed")
        run = sandbox_runner(sb, command=project.test_command, timeout=300)
        proj = Project(project.name, project.version, sources(project, tree))
        for inst in generate(proj, run, n=n, seed=seed, on_try=on_try):
            record = {**inst.extra, "test_cmd": project.test_command,
                      "license": project.license}
            yield replace(inst, extra=record)


def get(root: str | Path | None = None, *, n: int = 40, seed: int = 0,
        projects: list[str] | None = None, backend: str = "auto",
        console: Any = None) -> Path:
    """Fetch the projects and write `n` tasks per project to `instances.jsonl` (replacing
    it); returns the dataset folder."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    console = console or Console(stderr=True, highlight=False)
    names = projects or list(PROJECTS)
    unknown = [p for p in names if p not in PROJECTS]
    if unknown:
        raise UsageError(f"unknown project(s) {unknown}; swe-synth has {', '.join(PROJECTS)}")
    out = dataset_dir(root)
    records: list[dict[str, Any]] = []
    for name in names:
        project = PROJECTS[name]
        tree = fetch(project, out / "repos")
        console.print(f"{name} {project.version} ({project.license}): planting bugs, keeping "
                      f"those its tests catch")
        with Progress(TextColumn(name), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[tried]} tried"), console=console,
                      transient=True) as bar:
            task = bar.add_task(name, total=n, tried=0)

            def tried(_m: Any, kept: bool, task: Any = task, bar: Any = bar) -> None:
                bar.update(task, advance=int(kept), tried=bar.tasks[task].fields["tried"] + 1)

            made = list(make_tasks(project, tree, n=n, seed=seed, backend=backend,
                                   on_try=tried))
        console.print(f"  {len(made)} tasks")
        records += [to_record(i) for i in made]
    out.mkdir(parents=True, exist_ok=True)
    part = out / "instances.jsonl.part"
    part.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    part.replace(out / "instances.jsonl")
    return out


def to_record(inst: Instance) -> dict[str, Any]:
    """An instance as a SWE-bench record (test lists as JSON lists)."""
    return {"instance_id": inst.instance_id, "repo": inst.repo,
            "base_commit": inst.base_commit, "patch": inst.patch,
            "test_patch": inst.test_patch, "problem_statement": inst.problem_statement,
            "FAIL_TO_PASS": list(inst.fail_to_pass), "PASS_TO_PASS": list(inst.pass_to_pass),
            "version": inst.version, "log_parser": inst.log_parser, **inst.extra}


__all__ = ["PROJECTS", "SynthProject", "dataset_dir", "fetch", "get", "make_tasks",
           "sources", "to_record"]
