"""Terminal tasks from plain directories, one directory per task.

A task directory holds:
- `instruction.md` (required): what the agent is asked to do, shown as the prompt;
- `verify.sh` (required): run in the sandbox after the episode; exit status 0 means solved;
- `setup.sh` (optional): run in the sandbox (cwd /work) before the episode;
- `solution.sh` (optional): a reference solution, kept as `Task.answer` so tests can check
  that the verifier accepts a real solution;
- `task.toml` (optional): `[agent] timeout_sec` (the agent's time budget in seconds) and
  `[metadata]`, whose keys are copied into `Task.meta`.

The task id is the directory's name, so it stays stable when a suite is moved or copied.
`load_tasks` takes one task directory or a directory of them (sorted by name, entries without
`instruction.md` skipped). Three small tasks written for skyhub ship in `data/tasks/`
(`BUNDLED_DIR`, CC0, see `data/LICENSE-data.md`).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from skyhub.errors import DataNotFound, UsageError
from skyhub.task import Task, TaskSet

BUNDLED_DIR = Path(__file__).parent / "data" / "tasks"
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_FAMILY = "dir"
LAYOUT = ("a task directory holds instruction.md and verify.sh, and optionally setup.sh, "
          "solution.sh and task.toml")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: not UTF-8 text ({e}); task files are UTF-8") from None


def _config(task_dir: Path) -> tuple[float, dict[str, Any]]:
    """(timeout in seconds, metadata) from task.toml, defaults when it is absent."""
    path = task_dir / "task.toml"
    if not path.is_file():
        return DEFAULT_TIMEOUT_S, {}
    try:
        cfg = tomllib.loads(_read(path))
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: not valid TOML ({e})") from None
    agent, metadata = cfg.get("agent", {}), cfg.get("metadata", {})
    if not isinstance(agent, dict) or not isinstance(metadata, dict):
        raise UsageError(f"{path}: [agent] and [metadata] must be tables")
    timeout = agent.get("timeout_sec", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise UsageError(f"{path}: [agent] timeout_sec must be a positive number of seconds, "
                         f"got {timeout!r}")
    return float(timeout), dict(metadata)


def load_task_dir(path: str | Path) -> Task:
    """The task in one directory (see the module docstring for its layout).

    A missing directory is `DataNotFound`; a directory without `instruction.md` or
    `verify.sh`, or with a malformed task.toml, is a `ValueError` naming the directory and file.
    """
    d = Path(path)
    if not d.is_dir():
        raise DataNotFound(f"task directory {d} does not exist; {LAYOUT}")
    for required in ("instruction.md", "verify.sh"):
        if not (d / required).is_file():
            raise UsageError(f"task directory {d} has no {required}; {LAYOUT}")
    timeout, metadata = _config(d)
    setup, solution = d / "setup.sh", d / "solution.sh"
    meta = {"family": DEFAULT_FAMILY, **metadata,
            "setup": _read(setup) if setup.is_file() else "",
            "verify": _read(d / "verify.sh"), "timeout_s": timeout, "source": str(d)}
    return Task(id=d.name, prompt=_read(d / "instruction.md").strip() + "\n",
                answer=_read(solution) if solution.is_file() else None, meta=meta)


def load_tasks(path: str | Path = BUNDLED_DIR, *, name: str = "") -> TaskSet:
    """All tasks under `path`: a task directory, or a directory of task directories.

    Entries without `instruction.md` are skipped (notes, shared assets); finding no task at
    all is `DataNotFound`, since an empty suite would silently evaluate nothing.
    """
    root = Path(path)
    if not root.is_dir():
        raise DataNotFound(f"task directory {root} does not exist. Pass a task directory or a "
                           f"directory of them; {LAYOUT}.")
    if (root / "instruction.md").is_file():
        return TaskSet([load_task_dir(root)], name=name or root.name)
    dirs = sorted(p for p in root.iterdir() if p.is_dir() and (p / "instruction.md").is_file())
    if not dirs:
        raise DataNotFound(f"no tasks under {root}: {LAYOUT}, and {root} is neither one nor a "
                           "directory of them. Check the path.")
    return TaskSet([load_task_dir(p) for p in dirs], name=name or root.name)


__all__ = ["BUNDLED_DIR", "load_task_dir", "load_tasks"]
