"""Harbor tasks, read natively (the `harbor` package needs Python 3.12; we only need files).

A task directory holds `task.toml` (schema 1.x), `instruction.md`, `environment/` (a
Dockerfile and its context, unless `[environment] docker_image` names an image), `tests/`
(`test.sh` and what it needs; uploaded to /tests only when the verifier runs) and, optionally,
`solution/solve.sh`. A dataset is a directory of task directories (`dataset.toml` beside them
is read for its name when present).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from skyhub.errors import DataNotFound
from skyhub.task import Task, TaskSet

DEFAULTS = {"agent_timeout_s": 600.0, "verifier_timeout_s": 600.0, "build_timeout_s": 600.0,
            "cpus": 1.0, "memory_mb": 2048, "network": False, "docker_image": None}


def is_task_dir(path: Path) -> bool:
    return (path / "instruction.md").is_file() and (path / "task.toml").is_file()


def _config(doc: dict[str, Any], where: Path) -> dict[str, Any]:
    """The settings skyhub uses, from task.toml's [agent], [verifier] and [environment]."""
    cfg: dict[str, Any] = dict(DEFAULTS)
    agent, verifier = doc.get("agent") or {}, doc.get("verifier") or {}
    env = doc.get("environment") or {}
    try:
        for key, section, name in (("agent_timeout_s", agent, "timeout_sec"),
                                   ("verifier_timeout_s", verifier, "timeout_sec"),
                                   ("build_timeout_s", env, "build_timeout_sec"),
                                   ("cpus", env, "cpus")):
            if name in section:
                cfg[key] = float(section[name])
        if "memory_mb" in env:
            cfg["memory_mb"] = int(env["memory_mb"])
        elif "memory" in env:  # older tasks: "2G" / "512M"
            text = str(env["memory"]).strip().upper()
            scale = {"G": 1024, "M": 1}.get(text[-1:], 1)
            cfg["memory_mb"] = int(float(text.rstrip("GMB") or 0) * scale)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: a timeout, cpus or memory value is not a number "
                         f"({e})") from None
    network = env.get("network_mode", env.get("network"))
    if isinstance(network, str):
        cfg["network"] = network not in ("none", "")
    elif "allow_internet" in env:
        cfg["network"] = bool(env["allow_internet"])
    elif isinstance(network, bool):
        cfg["network"] = network
    cfg["docker_image"] = env.get("docker_image") or None
    cfg["verifier_env"] = {str(k): str(v) for k, v in (verifier.get("env") or {}).items()}
    return cfg


def load_task(path: str | Path) -> Task:
    """One Harbor task directory as a `Task` (id = the directory's name)."""
    d = Path(path).expanduser().resolve()
    if not d.is_dir():
        raise DataNotFound(f"no Harbor task directory at {d}")
    for name in ("instruction.md", "task.toml"):
        if not (d / name).is_file():
            raise ValueError(f"{d} is not a Harbor task: {name} is missing (a task has "
                             "task.toml, instruction.md, environment/Dockerfile and "
                             "tests/test.sh)")
    if not (d / "tests" / "test.sh").is_file():
        raise ValueError(f"Harbor task {d.name}: tests/test.sh is missing")
    try:
        doc = tomllib.loads((d / "task.toml").read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{d / 'task.toml'}: not valid TOML ({e})") from None
    cfg = _config(doc, d / "task.toml")
    if cfg["docker_image"] is None and not (d / "environment" / "Dockerfile").is_file():
        raise ValueError(f"Harbor task {d.name}: neither environment/Dockerfile nor "
                         "[environment] docker_image in task.toml")
    solve = d / "solution" / "solve.sh"
    return Task(id=d.name, prompt=(d / "instruction.md").read_text(encoding="utf-8").strip(),
                answer=solve.read_text(encoding="utf-8") if solve.is_file() else None,
                meta={"path": str(d), "config": cfg, "metadata": dict(doc.get("metadata") or {}),
                      "timeout_s": cfg["agent_timeout_s"], "source": "harbor"})


def load_tasks(path: str | Path) -> TaskSet:
    """A task directory, or a dataset (a directory of task directories), as a `TaskSet`."""
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise DataNotFound(f"no Harbor task or dataset at {root}; pass path= a task directory "
                           "(task.toml, instruction.md, environment/, tests/) or a directory "
                           "of them")
    if is_task_dir(root):
        return TaskSet([load_task(root)], name=root.name)
    tasks = [load_task(d) for d in sorted(root.iterdir()) if d.is_dir() and is_task_dir(d)]
    if not tasks:
        raise DataNotFound(f"{root} holds no Harbor task: a task directory has task.toml and "
                           "instruction.md")
    name = root.name
    if (root / "dataset.toml").is_file():
        try:
            meta = tomllib.loads((root / "dataset.toml").read_text(encoding="utf-8"))
            name = str((meta.get("dataset") or meta).get("name") or name)
        except tomllib.TOMLDecodeError:
            pass
    return TaskSet(tasks, name=name)


__all__ = ["DEFAULTS", "is_task_dir", "load_task", "load_tasks"]
