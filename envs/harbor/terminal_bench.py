"""The original Terminal-Bench task format, converted to a Harbor task as Harbor converts it.

A Terminal-Bench task is `task.yaml` (the instruction and timeouts), a `docker-compose.yaml`
and `Dockerfile` at the task root (the root is the build context), `solution.sh`,
`run-tests.sh` and `tests/`. Harbor's converter (`harbor tasks migrate`, its
`mappers/terminal_bench.py`) turns one into a Harbor task, and so does `convert_task`:

- instruction.md from task.yaml's `instruction`; task.toml with [agent] timeout_sec =
  `max_agent_timeout_sec` (360), [verifier] timeout_sec = `max_test_timeout_sec` (60) and
  the author, difficulty, category, tags and time estimates as [metadata];
- the main compose service ("client", else the first) gives the build context: "." means
  the root's Dockerfile goes to environment/, another folder is copied into environment/;
  the service's environment, working_dir, expose, entrypoint and platform become Dockerfile
  lines, after `ENV TEST_DIR=/tests`; `tests/` and `solution.sh` are copied into the build
  context only when the Dockerfile COPYs/ADDs them;
- a compose file that is more than one service with those fields is rewritten as Harbor's
  (`main` service built from ${CONTEXT_DIR}, `sleep infinity`, TEST_DIR, CPU/memory
  limits from ${CPUS}/${MEMORY}; other services and top-level keys kept, their build
  contexts copied, ${T_BENCH_TASK_DOCKER_NAME_PREFIX} becomes "hb");
- solution.sh becomes solution/solve.sh; tests/ stays tests/; run-tests.sh becomes
  tests/test.sh with `$TEST_DIR` written as /tests and a tail that writes reward 1 to
  /logs/verifier/reward.txt when the script's last command succeeded, else 0 (Terminal-Bench
  parsed pytest's output instead; Harbor uses the exit status, and so do we);
- every other file at the root goes into environment/ (the old build context).

Where we differ from Harbor's converter (each a case it fails or gets wrong): `solution.yaml`
(which Harbor refuses) is converted when it is plain commands (each `append_enter: true`),
run one after another in one shell; an older task.yaml with `descriptions` (key "base")
instead of `instruction` is read; compose's `build.dockerfile` is honoured; a build context
written "./app" is treated as "app"; a task with a Dockerfile and no compose file is read as
Terminal-Bench's default single service; a compose environment entry without a value is
skipped (Harbor writes "ENV KEY" or "KEY=None"); an unknown `difficulty` is kept as
written; a root file never overwrites one the build context already put in environment/.

Over ~400 lines, for a reason: one converter that follows Harbor's Terminal-Bench mapper
step by step, so the two can be read side by side.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from skyhub.errors import DataNotFound, MissingDependency, UsageError
from skyhub.task import Task

CONVERTER_VERSION = "1"  # part of the cache key: bump when the output changes
MAIN_SERVICE = {
    "build": {"context": "${CONTEXT_DIR}"},
    "image": "${MAIN_IMAGE_NAME}",
    "command": ["sh", "-c", "sleep infinity"],
    "environment": ["TEST_DIR=${TEST_DIR}"],
    "deploy": {"resources": {"limits": {"cpus": "${CPUS}", "memory": "${MEMORY}"}}},
}
# Terminal-Bench's harness mounted these and set TEST_DIR itself; Harbor does it its own way
TB_VOLUMES = {"${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}",
              "${T_BENCH_TASK_AGENT_LOGS_PATH}:${T_BENCH_CONTAINER_AGENT_LOGS_PATH}"}
TB_ENV = {"TEST_DIR=${T_BENCH_TEST_DIR}"}
# a single service with only these keys folds into the Dockerfile (no compose file kept)
FOLDABLE = {"build", "image", "container_name", "command", "volumes", "environment",
            "working_dir", "expose", "entrypoint", "platform"}
REPLACED = {"build", "image", "container_name", "command", "environment", "volumes", "deploy"}
REWARD_TAIL = """
# added by the Terminal-Bench conversion: the exit status of the tests is the reward
_tb_status=$?
if [ "$_tb_status" -eq 0 ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt
fi
exit "$_tb_status"
"""


def is_terminal_bench_task(path: str | Path) -> bool:
    p = Path(path)
    return (p / "task.yaml").is_file() and not (p / "task.toml").is_file()


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:  # pragma: no cover - pyyaml ships with the harbor extra's deps
        raise MissingDependency("reading Terminal-Bench tasks needs PyYAML: pip install "
                                "'skyhub[harbor]' (or pyyaml)") from None
    return yaml


def _load_yaml(path: Path) -> Any:
    yaml = _yaml()
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise UsageError(f"{path}: not valid YAML ({e})") from None


def _task_yaml(src: Path) -> dict[str, Any]:
    """task.yaml's fields Harbor keeps, with its defaults; the rest is ignored."""
    doc = _load_yaml(src / "task.yaml")
    where = src / "task.yaml"
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: must be a mapping (instruction: ..., ...)")
    instruction = doc.get("instruction")
    if instruction is None and isinstance(doc.get("descriptions"), list):
        instruction = next((x.get("description") for x in doc["descriptions"]
                            if isinstance(x, dict) and x.get("key") == "base"), None)
    if not isinstance(instruction, str) or not instruction.strip():
        raise UsageError(f"{where}: instruction is missing (the text the agent is given)")
    out: dict[str, Any] = {"instruction": instruction}
    for key, default in (("max_agent_timeout_sec", 360.0), ("max_test_timeout_sec", 60.0),
                         ("estimated_duration_sec", None), ("expert_time_estimate_min", None),
                         ("junior_time_estimate_min", None)):
        v = doc.get(key, default)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise UsageError(f"{where}: {key} must be a number, not {v!r}")
        out[key] = None if v is None else float(v)
    tags = doc.get("tags") or []
    if not isinstance(tags, list):
        raise UsageError(f"{where}: tags must be a list")
    out["metadata"] = {
        "author_name": str(doc.get("author_name") or "unknown"),
        "author_email": str(doc.get("author_email") or "unknown"),
        "difficulty": str(doc.get("difficulty") or "unknown"),
        "category": str(doc.get("category") or "software_engineering"),
        "tags": [str(t) for t in tags],
        **{k: out[k] for k in ("estimated_duration_sec", "expert_time_estimate_min",
                               "junior_time_estimate_min") if out[k] is not None}}
    return out


def _toml_str(s: str) -> str:
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(float(v)) if isinstance(v, float) else str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return _toml_str(str(v))


def _task_toml(name: str, tb: dict[str, Any]) -> str:
    lines = [f"# Converted from the Terminal-Bench task {name} (task.yaml) as Harbor's "
             "converter does it.", 'schema_version = "1.4"', "", "[metadata]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in tb["metadata"].items()]
    lines += ["", "[verifier]", f"timeout_sec = {tb['max_test_timeout_sec']!r}", "",
              "[agent]", f"timeout_sec = {tb['max_agent_timeout_sec']!r}", "",
              "[environment]", "build_timeout_sec = 600.0", ""]
    return "\n".join(lines)


def _main_service(compose: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    services = compose["services"]
    name = "client" if "client" in services else next(iter(services))
    service = services[name]
    return name, service if isinstance(service, dict) else {}


def _build(service: dict[str, Any]) -> tuple[str, str]:
    """(context, dockerfile) of a compose service, "./app" read as "app"."""
    build = service.get("build", {})
    context, dockerfile = ".", "Dockerfile"
    if isinstance(build, str):
        context = build
    elif isinstance(build, dict):
        context = str(build.get("context") or ".")
        dockerfile = str(build.get("dockerfile") or "Dockerfile")
    return PurePosixPath(context).as_posix(), dockerfile


def _foldable(compose: dict[str, Any]) -> bool:
    """Harbor keeps no compose file for one service with only Dockerfile-expressible keys
    and Terminal-Bench's default volumes."""
    services = compose.get("services") or {}
    if len(services) != 1 or set(compose) - {"services", "version"}:
        return False
    service = next(iter(services.values())) or {}
    if not isinstance(service, dict):
        return False
    return all(k in FOLDABLE for k in service) and all(
        isinstance(v, str) and v in TB_VOLUMES for v in service.get("volumes") or [])


def _dockerfile_lines(service: dict[str, Any]) -> list[str]:
    lines = ["ENV TEST_DIR=/tests"]
    env = service.get("environment")
    if isinstance(env, list):
        lines += [f"ENV {e}" for e in map(str, env) if "=" in e and e not in TB_ENV]
    elif isinstance(env, dict):
        lines += [f"ENV {k}={v}" for k, v in env.items()
                  if v is not None and f"{k}={v}" not in TB_ENV]
    workdir = service.get("working_dir")
    if isinstance(workdir, str) and "${" not in workdir:
        lines.append(f"WORKDIR {workdir}")
    expose = service.get("expose")
    if expose is not None:
        lines += [f"EXPOSE {p}" for p in (expose if isinstance(expose, list) else [expose])]
    entry = service.get("entrypoint")
    if entry is not None:
        lines.append(f"ENTRYPOINT {json.dumps(entry if isinstance(entry, list) else [entry])}")
    return lines


def _amend_dockerfile(dockerfile: Path, service: dict[str, Any], notes: list[str]) -> None:
    text = dockerfile.read_text(encoding="utf-8")
    platform = service.get("platform")
    if platform:
        text, n = re.subn(r"^(FROM\s+)--platform=\S+\s+(.+)$", rf"\1--platform={platform} \2",
                          text, flags=re.MULTILINE)
        if n == 0:
            text, n = re.subn(r"^FROM\s+(?!--platform)(.+)$",
                              lambda m: f"FROM --platform={platform} {m.group(1)}", text,
                              flags=re.MULTILINE)
        if n:
            notes.append(f"FROM lines set to --platform={platform}")
    lines = _dockerfile_lines(service)
    if not text.endswith("\n"):
        text += "\n"
    text += "\n# from docker-compose.yaml (Terminal-Bench conversion)\n" + "\n".join(lines) + "\n"
    if len(lines) > 1:
        notes.append(f"moved into the Dockerfile: {lines[1:]}")
    dockerfile.write_text(text, encoding="utf-8")


def _copy_tree_files(src: Path, dest: Path) -> None:
    for item in sorted(src.rglob("*")):
        if item.is_file():
            target = dest / item.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(item, target)


def _environment(src: Path, env_dir: Path, notes: list[str]) -> set[str]:
    """Build the Harbor environment/ from the compose file and the root's build context;
    the names at the root it consumed."""
    if (src / "docker-compose.yaml").is_file():
        compose = _load_yaml(src / "docker-compose.yaml") or {}
        if not isinstance(compose, dict):
            raise UsageError(f"{src / 'docker-compose.yaml'}: must be a mapping")
    elif (src / "Dockerfile").is_file():
        compose = {"services": {"client": {"build": {"context": "."}}}}
        notes.append("no docker-compose.yaml: the root's Dockerfile is the one service")
    else:
        raise UsageError(f"Terminal-Bench task {src.name}: neither docker-compose.yaml nor "
                         "Dockerfile at its root, so it has no environment to build")
    handled = {"docker-compose.yaml"}
    services = compose.get("services") or {}
    if not isinstance(services, dict) or not services:
        return handled
    main_name, main = _main_service(compose)
    context, dockerfile_name = _build(main)
    dockerfile = None
    if context == ".":
        handled.add(dockerfile_name)
        if (src / dockerfile_name).is_file():
            dockerfile = env_dir / "Dockerfile"
            shutil.copy(src / dockerfile_name, dockerfile)
    else:
        handled.add(PurePosixPath(context).parts[0])
        if (src / context).is_dir():
            _copy_tree_files(src / context, env_dir)
            if (src / context / dockerfile_name).is_file():
                dockerfile = env_dir / "Dockerfile"
                shutil.copy(src / context / dockerfile_name, dockerfile)
    if dockerfile is not None:
        text = dockerfile.read_text(encoding="utf-8")
        # Harbor's test: the Dockerfile's text names them after COPY or ADD
        if any(f"{op} {p}tests" in text for op in ("COPY", "ADD") for p in ("", "./")) \
                and (src / "tests").is_dir() and not (env_dir / "tests").exists():
            shutil.copytree(src / "tests", env_dir / "tests")
        if any(f"{op} {p}solution.sh" in text for op in ("COPY", "ADD") for p in ("", "./")) \
                and (src / "solution.sh").is_file():
            shutil.copy(src / "solution.sh", env_dir / "solution.sh")
        _amend_dockerfile(dockerfile, main, notes)
    if not _foldable(compose):
        for name, svc in services.items():
            if name == main_name or not isinstance(svc, dict):
                continue
            ctx, _ = _build(svc)
            if ctx != "." and (src / ctx).is_dir():
                if not (env_dir / ctx).exists():
                    shutil.copytree(src / ctx, env_dir / ctx)
                handled.add(PurePosixPath(ctx).parts[0])
        out: dict[str, Any] = {k: v for k, v in compose.items() if k not in ("services",
                                                                              "version")}
        harbor_main = copy.deepcopy(MAIN_SERVICE)
        harbor_main.update({k: v for k, v in main.items() if k not in REPLACED})
        out = {"services": {"main": harbor_main, **{n: s for n, s in services.items()
                                                    if n != main_name}}, **out}
        text = _yaml().safe_dump(out, sort_keys=False)
        (env_dir / "docker-compose.yaml").write_text(
            text.replace("${T_BENCH_TASK_DOCKER_NAME_PREFIX}", "hb"), encoding="utf-8")
        notes.append("kept a docker-compose.yaml (more than one service, or fields a "
                     "Dockerfile cannot hold)")
    return handled


def _solution_from_yaml(src: Path) -> str:
    """solution.yaml's commands as one script, when each is a whole command line (keystrokes
    typed into an interactive program cannot be replayed by a script)."""
    steps = _load_yaml(src / "solution.yaml")
    where = src / "solution.yaml"
    if not isinstance(steps, list) or not steps:
        raise UsageError(f"{where}: must be a list of {{command: ..., append_enter: true}}")
    lines = ["#!/bin/bash", "# converted from solution.yaml: its commands, in order, in one "
                            "shell"]
    for i, step in enumerate(steps, 1):
        if not isinstance(step, dict) or not isinstance(step.get("command"), str):
            raise UsageError(f"{where}: entry {i} has no command")
        if step.get("append_enter") is not True:
            raise UsageError(f"{where}: entry {i} ({step['command']!r}) is typed without Enter "
                             "(keystrokes for an interactive program), which a script cannot "
                             "replay; write the solution as solution.sh")
        lines.append(step["command"])
    return "\n".join(lines) + "\n"


def convert_task(src: str | Path, dest: str | Path) -> tuple[Path, list[str]]:
    """Write the Harbor task for the Terminal-Bench task `src` at `dest` (which must not
    exist); returns (dest, notes on what was moved where)."""
    src, dest = Path(src).expanduser().resolve(), Path(dest).expanduser().resolve()
    if not (src / "task.yaml").is_file():
        raise DataNotFound(f"{src} is not a Terminal-Bench task (no task.yaml)")
    if dest.exists():
        raise UsageError(f"{dest} already exists; remove it or pick another destination")
    tb = _task_yaml(src)
    if not (src / "run-tests.sh").is_file():
        raise UsageError(f"Terminal-Bench task {src.name}: run-tests.sh is missing (the script "
                         "that becomes tests/test.sh)")
    solve = None
    if (src / "solution.sh").is_file():
        solve = (src / "solution.sh").read_text(encoding="utf-8")
    elif (src / "solution.yaml").is_file():
        solve = _solution_from_yaml(src)
    notes: list[str] = []
    dest.mkdir(parents=True)
    try:
        (dest / "environment").mkdir()
        (dest / "tests").mkdir()
        handled = _environment(src, dest / "environment", notes)
        handled |= {"task.yaml", "solution.sh", "solution.yaml", "run-tests.sh", "tests"}
        if solve is not None:
            (dest / "solution").mkdir()
            (dest / "solution" / "solve.sh").write_text(solve, encoding="utf-8")
            (dest / "solution" / "solve.sh").chmod(0o755)
        if (src / "tests").is_dir():
            shutil.copytree(src / "tests", dest / "tests", dirs_exist_ok=True)
        test = (src / "run-tests.sh").read_text(encoding="utf-8")
        test = (test if test.endswith("\n") else test + "\n") + REWARD_TAIL
        (dest / "tests" / "test.sh").write_text(test.replace("$TEST_DIR", "/tests"),
                                                encoding="utf-8")
        (dest / "tests" / "test.sh").chmod(0o755)
        for item in sorted(src.rglob("*")):
            rel = item.relative_to(src)
            if rel.parts[0] in handled or not item.is_file():
                continue
            target = dest / "environment" / rel
            if target.exists():  # the build context's file wins (Harbor overwrites it)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(item, target)
        instruction = tb["instruction"]
        (dest / "instruction.md").write_text(
            instruction if instruction.endswith("\n") else instruction + "\n", encoding="utf-8")
        (dest / "task.toml").write_text(_task_toml(src.name, tb), encoding="utf-8")
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest, notes


def convert_dataset(src: str | Path, dest: str | Path
                    ) -> tuple[list[Path], list[tuple[str, str]]]:
    """Convert every Terminal-Bench task directly under `src` into `dest`/<name>; returns
    (converted task dirs, [(task name, why it failed)]) - one bad task does not stop the
    others, as in Harbor."""
    src, dest = Path(src).expanduser().resolve(), Path(dest).expanduser().resolve()
    if not src.is_dir():
        raise DataNotFound(f"no Terminal-Bench dataset at {src}")
    dest.mkdir(parents=True, exist_ok=True)
    done, failed = [], []
    for d in sorted(src.iterdir()):
        if d.is_dir() and (d / "task.yaml").is_file():
            try:
                done.append(convert_task(d, dest / d.name)[0])
            except (UsageError, DataNotFound, OSError) as e:
                failed.append((d.name, str(e)))
    return done, failed


def content_hash(src: Path) -> str:
    """Of everything the conversion reads (the task's name, its files' paths, bytes and
    executable bits)."""
    h = hashlib.sha256(f"skyhub-tb-{CONVERTER_VERSION}\0{src.name}\0".encode())
    for item in sorted(src.rglob("*")):
        if item.is_file():
            rel = item.relative_to(src).as_posix().encode()
            data = item.read_bytes()
            h.update(len(rel).to_bytes(4, "big") + rel + bytes([bool(item.stat().st_mode
                                                                      & 0o111)]))
            h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()[:20]


def cache_root() -> Path:
    """Where converted tasks are kept: $XDG_CACHE_HOME/skyhub/harbor-tb (~/.cache/...), or
    the temp folder when that cannot be written."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    root = base / "skyhub" / "harbor-tb"
    try:
        root.mkdir(parents=True, exist_ok=True)
        if os.access(root, os.W_OK):
            return root
    except OSError:
        pass
    root = Path(tempfile.gettempdir()) / f"skyhub-{os.getuid()}" / "harbor-tb"
    root.mkdir(parents=True, exist_ok=True)
    return root


def converted_dir(src: str | Path) -> Path:
    """The Harbor task converted from `src`, made once per content (concurrent callers
    agree: each converts into its own folder and the first rename wins)."""
    src = Path(src).expanduser().resolve()
    final = cache_root() / content_hash(src)
    if (final / src.name / "task.toml").is_file():
        return final / src.name
    tmp = final.with_name(f"{final.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        convert_task(src, tmp / src.name)
        try:
            os.rename(tmp, final)
        except OSError:  # another process got there first
            if not (final / src.name / "task.toml").is_file():
                raise
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
    return final / src.name


def load_converted(src: str | Path, load_task: Callable[[Path], Task]) -> Task:
    """A Terminal-Bench task as the `Task` of its Harbor conversion (id = its folder's name;
    meta["converted_from"] = the original folder). `load_task` is task.py's, which calls this
    (handed in, so that the converter does not import its caller back)."""
    src = Path(src).expanduser().resolve()
    task = load_task(converted_dir(src))
    cfg = dict(task.meta["config"], source_format="terminal-bench")
    return dataclasses.replace(task, meta={**task.meta, "config": cfg,
                                           "source": "terminal-bench",
                                           "converted_from": str(src)})


__all__ = ["cache_root", "content_hash", "convert_dataset", "convert_task", "converted_dir",
           "is_terminal_bench_task", "load_converted"]
