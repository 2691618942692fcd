"""Harbor tasks, read natively (the `harbor` package needs Python 3.12; we only need files).

A task directory holds `task.toml` (schema 1.x), `instruction.md`, `environment/` (a
Dockerfile or docker-compose.yaml and its context, unless `[environment] docker_image` names
an image), `tests/` (`test.sh` and what it needs; uploaded to /tests only when the verifier
runs) and, optionally, `solution/solve.sh`. A multi-step task lists `[[steps]]` and keeps
each step's `instruction.md` (and, optionally, its own `tests/`, `solution/`, `workdir/`)
under `steps/<name>/`. A dataset is a directory of task directories (`dataset.toml` beside
them is read for its name when present). The original Terminal-Bench format (`task.yaml`)
is converted on the fly, as `harbor tasks migrate` converts it (terminal_bench.py).

`task.meta["config"]` is a plain, JSON-able dict read as Harbor's `TaskConfig` reads
task.toml (its defaults, legacy fields and resolution rules); its keys are listed in
`load_task`'s docstring. Misreadings are `UsageError`s naming the file, the field and the fix.

Over ~400 lines, for a reason: one schema (task.toml 1.x, with its steps and verifier
environments), read as Harbor's TaskConfig reads it.
"""

from __future__ import annotations

import copy
import os
import re
import tomllib
from collections.abc import Mapping
from ipaddress import ip_address, ip_network
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn

from skyhub.errors import DataNotFound, UsageError
from skyhub.task import Task, TaskSet

DEFAULTS = {"agent_timeout_s": 600.0, "verifier_timeout_s": 600.0, "build_timeout_s": 600.0,
            "cpus": 1.0, "memory_mb": 2048, "network": True, "docker_image": None}
NETWORK_MODES = ("public", "no-network", "allowlist")
VERIFIER_MODES = ("shared", "separate")
REWARD_STRATEGIES = ("mean", "final")
_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")  # Harbor's ${VAR} / ${VAR:-default}
_HOST_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_PACKAGE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)


def is_task_dir(path: Path) -> bool:
    """A Harbor task directory (task.toml), a single-step or a multi-step one."""
    return (Path(path) / "task.toml").is_file()


def resolve_env(d: Mapping[str, Any] | None, *, task: str = "",
                host_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Fill `${VAR}` / `${VAR:-default}` values from the host's environment (`host_env`,
    default os.environ), as Harbor does at run time: only a value that is wholly one template
    is filled (`"a-${X}"` stays as written); a variable the host lacks takes its default, and
    with none it is an error."""
    host = os.environ if host_env is None else host_env
    out: dict[str, str] = {}
    for key, raw in (d or {}).items():
        key, value = str(key), str(raw)
        m = _TEMPLATE.fullmatch(value)
        if m is None:
            out[key] = value
        elif m.group(1) in host:
            out[key] = host[m.group(1)]
        elif m.group(2) is not None:
            out[key] = m.group(2)
        else:
            raise UsageError(f"{f'Harbor task {task}: ' if task else ''}{key} = {value!r} needs "
                             f"the host variable {m.group(1)}, which is not set: export it "
                             f"(or write ${{{m.group(1)}:-default}} in task.toml)")
    return out


def strip_canary(text: str) -> str:
    """The instruction without its leading canary lines (data-provenance markers that the
    agent is not shown, as in Harbor) and the blank lines after them."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and _CANARY.match(lines[i].strip()):
        i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    return "\n".join(lines[i:])


class _Reader:
    """Typed reads of one task.toml, each failure naming the file, the field and the fix."""

    def __init__(self, file: Path) -> None:
        self.file = file

    def fail(self, field: str, why: str) -> NoReturn:
        raise UsageError(f"{self.file}: {field} {why}")

    def table(self, sec: dict[str, Any], key: str, where: str) -> dict[str, Any]:
        v = sec.get(key)
        if v is None:
            return {}
        if not isinstance(v, dict):
            self.fail(f"{where}{key}", f"must be a table ([{where}{key}] or {key} = {{ ... }}), "
                                       f"not {v!r}")
        return v

    def num(self, sec: dict[str, Any], key: str, where: str, default: float | None
            ) -> float | None:
        v = sec.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int | float):
            self.fail(f"[{where}] {key}", f"must be a number of seconds, not {v!r}")
        return float(v)

    def whole(self, sec: dict[str, Any], key: str, where: str, default: int | None) -> int | None:
        v = sec.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int | float) or v != int(v):
            self.fail(f"[{where}] {key}", f"must be a whole number, not {v!r}")
        return int(v)

    def string(self, sec: dict[str, Any], key: str, where: str) -> str | None:
        v = sec.get(key)
        if v is not None and not isinstance(v, str):
            self.fail(f"[{where}] {key}", f'must be a string (write {key} = "{v}"), not {v!r}')
        return v

    def user(self, sec: dict[str, Any], where: str) -> str | int | None:
        v = sec.get("user")
        if v is not None and (isinstance(v, bool) or not isinstance(v, str | int)):
            self.fail(f"[{where}] user", f"must be a user name or a UID, not {v!r}")
        return v

    def env(self, sec: dict[str, Any], where: str) -> dict[str, str]:
        env = self.table(sec, "env", f"{where}.")
        for k, v in env.items():
            if not isinstance(v, str):
                self.fail(f"[{where}.env] {k}", f'must be a string (write {k} = "{v}"), not '
                                                f"{v!r}")
        return dict(env)

    def size_mb(self, text: Any, field: str) -> int:
        """Harbor's legacy sizes: "2G", "512M", "1024K" (no "GB")."""
        s = str(text).strip().upper()
        scale = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}.get(s[-1:])
        try:
            if scale is None:
                raise ValueError
            return int(float(s[:-1]) * scale)
        except ValueError:
            self.fail(field, f"= {text!r} is not a size: write '2G', '512M' or '1024K' (or "
                             f"{field.split()[-1]}_mb = 2048)")

    def hosts(self, sec: dict[str, Any], where: str) -> list[str] | None:
        hosts = sec.get("allowed_hosts")
        if hosts is None:
            return None
        if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
            self.fail(f"[{where}] allowed_hosts", "must be a list of host names")
        return [self._host(h, where) for h in hosts]

    def _host(self, host: str, where: str) -> str:
        """Harbor's normalisation: lower case, no trailing dot; a hostname, `*.suffix`, an IP
        address or a CIDR range (never a URL, port or path)."""
        h = host.strip().lower().rstrip(".")
        bad = (f"entry {host!r} must be a hostname, '*.example.com', an IP address or an IP "
               "CIDR range (not a URL, port or path)")
        try:
            if "/" in h and "%" not in h:
                return ip_network(h, strict=True).compressed
            if ":" in h and "%" not in h:
                addr = ip_address(h)
                if addr.version == 6:
                    return addr.compressed
        except ValueError:
            pass
        if not h or "/" in h or ":" in h or "[" in h or "]" in h:
            self.fail(f"[{where}] allowed_hosts", bad)
        wildcard = h.startswith("*.")
        name = h[2:] if wildcard else h
        if "*" in name or not all(_HOST_LABEL.match(label) for label in name.split(".")):
            self.fail(f"[{where}] allowed_hosts", bad)
        if wildcard:
            try:
                ip_address(name)
            except ValueError:
                return h
            self.fail(f"[{where}] allowed_hosts", f"entry {host!r}: a wildcard must name "
                                                   "hosts, not an IP address")
        return h

    def network(self, sec: dict[str, Any], where: str, *, baseline: bool
                ) -> tuple[str | None, list[str]]:
        """(network_mode, allowed_hosts). A baseline ([environment]) defaults to "public" and
        reads the legacy `allow_internet` when neither field is written; a phase ([agent],
        [verifier]) is None unless it overrides the baseline."""
        mode, hosts = sec.get("network_mode"), self.hosts(sec, where)
        if mode is not None and mode not in NETWORK_MODES:
            self.fail(f"[{where}] network_mode", f"= {mode!r} is not one of Harbor's modes: "
                                                  "'public' (the default), 'no-network', "
                                                  "'allowlist' (with allowed_hosts)")
        if baseline:
            legacy = sec.get("allow_internet")
            if legacy is not None and not isinstance(legacy, bool):
                self.fail(f"[{where}] allow_internet", f"must be true or false, not {legacy!r} "
                                                       "(better: network_mode = 'public' or "
                                                       "'no-network')")
            if hosts and mode is None:
                self.fail(f"[{where}] allowed_hosts", "is only read with network_mode = "
                                                      "'allowlist'; add that line")
            if mode is None and legacy is not None and hosts is None:
                mode = "public" if legacy else "no-network"
            mode = mode or "public"
        elif mode is None and hosts is not None:
            self.fail(f"[{where}] allowed_hosts", "is only read with network_mode = "
                                                  "'allowlist'; add that line")
        if hosts and mode != "allowlist":
            self.fail(f"[{where}] allowed_hosts", f"is only read with network_mode = "
                                                  f"'allowlist', not {mode!r}")
        return mode, list(hosts or [])

    def healthcheck(self, sec: dict[str, Any], where: str) -> dict[str, Any] | None:
        hc = sec.get("healthcheck")
        if hc is None:
            return None
        hc = self.table(sec, "healthcheck", f"{where}.")
        w = f"{where}.healthcheck"
        command = self.string(hc, "command", w)
        if not command:
            self.fail(f"[{w}] command", 'is missing: the shell command whose exit 0 means '
                                        'ready, e.g. command = "curl -sf localhost:8080"')
        return {"command": command, "interval_s": self.num(hc, "interval_sec", w, 5.0),
                "timeout_s": self.num(hc, "timeout_sec", w, 30.0),
                "start_period_s": self.num(hc, "start_period_sec", w, 0.0),
                "start_interval_s": self.num(hc, "start_interval_sec", w, 5.0),
                "retries": self.whole(hc, "retries", w, 3)}

    def environment(self, sec: dict[str, Any], where: str) -> dict[str, Any]:
        """An "env config" dict (without build_dir, which depends on who uses it)."""
        os_name = sec.get("os", "linux")
        if not isinstance(os_name, str) or os_name.lower() not in ("linux", "windows"):
            self.fail(f"[{where}] os", f"= {os_name!r} is not 'linux' or 'windows'")
        if os_name.lower() == "windows":
            self.fail(f"[{where}] os", "= 'windows': skyhub runs Linux containers only")
        sizes: dict[str, int | None] = {}
        for name in ("memory", "storage"):
            sizes[name] = self.whole(sec, f"{name}_mb", where, None)
            legacy = sec.get(name)
            if isinstance(legacy, str):  # Harbor reads only a string here, as "2G"
                mb = self.size_mb(legacy, f"[{where}] {name}")
                if sizes[name] is not None and sizes[name] != mb:
                    self.fail(f"[{where}] {name}", f"= {legacy!r} ({mb} MB) disagrees with "
                                                   f"{name}_mb = {sizes[name]}; keep only "
                                                   f"{name}_mb")
                sizes[name] = mb
        mode, hosts = self.network(sec, where, baseline=True)
        mcp = sec.get("mcp_servers") or []
        if not isinstance(mcp, list):
            self.fail(f"[{where}] mcp_servers", "must be a list of tables")
        gpu_types = sec.get("gpu_types")
        if gpu_types is not None and (not isinstance(gpu_types, list)
                                      or not all(isinstance(g, str) for g in gpu_types)):
            self.fail(f"[{where}] gpu_types", "must be a list of strings")
        return {"docker_image": self.string(sec, "docker_image", where) or None,
                "build_dir": None,
                "cpus": float(self.num(sec, "cpus", where, 1.0) or 1.0),
                "memory_mb": sizes["memory"] if sizes["memory"] is not None else 2048,
                "storage_mb": sizes["storage"],
                "gpus": self.whole(sec, "gpus", where, None), "gpu_types": gpu_types,
                "network_mode": mode, "allowed_hosts": hosts,
                "env": self.env(sec, where), "workdir": self.string(sec, "workdir", where),
                "healthcheck": self.healthcheck(sec, where),
                "skills_dir": self.string(sec, "skills_dir", where),
                "build_timeout_s": self.num(sec, "build_timeout_sec", where, 600.0),
                "mcp_servers": [dict(m) for m in mcp if isinstance(m, dict)]}

    def verifier(self, sec: dict[str, Any], where: str) -> dict[str, Any]:
        mode = sec.get("environment_mode")
        if mode is not None and mode not in VERIFIER_MODES:
            self.fail(f"[{where}] environment_mode", f"= {mode!r} is not 'shared' (the "
                                                     "agent's container) or 'separate'")
        env_sec = sec.get("environment")
        if env_sec is not None:
            env_sec = self.table(sec, "environment", f"{where}.")
            if mode == "shared":
                self.fail(f"[{where}] environment_mode", f"= 'shared' conflicts with "
                                                         f"[{where}.environment]: remove that "
                                                         "table or set environment_mode = "
                                                         "'separate'")
        collect = sec.get("collect") or []
        if not isinstance(collect, list) or not all(isinstance(c, dict) for c in collect):
            self.fail(f"[[{where}.collect]]", "must be a list of tables")
        nmode, hosts = self.network(sec, where, baseline=False)
        return {"timeout_s": self.num(sec, "timeout_sec", where, 600.0),
                "env": self.env(sec, where), "user": self.user(sec, where),
                "mode": mode, "network_mode": nmode, "allowed_hosts": hosts,
                "environment": None if env_sec is None else self.environment(
                    env_sec, f"{where}.environment"),
                "collect": [{"command": self.string(c, "command", f"{where}.collect"),
                             "service": self.string(c, "service", f"{where}.collect") or "main",
                             "timeout_s": self.num(c, "timeout_sec", f"{where}.collect", 60.0),
                             "user": self.user(c, f"{where}.collect")} for c in collect]}

    def agent(self, sec: dict[str, Any], where: str) -> dict[str, Any]:
        nmode, hosts = self.network(sec, where, baseline=False)
        return {"timeout_s": self.num(sec, "timeout_sec", where, None),
                "user": self.user(sec, where), "network_mode": nmode, "allowed_hosts": hosts}

    def artifacts(self, value: Any, where: str) -> list[dict[str, Any]]:
        """Harbor's artifact entries: a container path, or {source, destination, exclude,
        service}; sources have no `..`, destinations are relative paths under the trial's
        artifacts folder (not manifest.json, which Harbor reserves)."""
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(where, "must be a list of paths or tables")
        out = []
        for a in value:
            if isinstance(a, str):
                a = {"source": a}
            if not isinstance(a, dict) or not isinstance(a.get("source"), str):
                self.fail(where, f"entry {a!r} needs source = a path in the container")
            src, dest = a["source"], self.string(a, "destination", where) or None
            service = self.string(a, "service", where)
            exclude = a.get("exclude") or []
            if ".." in PurePosixPath(src).parts:
                self.fail(where, f"source {src!r} must not contain '..'")
            if dest is not None:
                p = PurePosixPath(dest)
                if "\\" in dest or p.is_absolute() or ".." in p.parts or \
                        dest.rstrip("/") == "manifest.json":
                    self.fail(where, f"destination {dest!r} must be a relative path with '/' "
                                     "and no '..' (and not manifest.json)")
            if service not in (None, "main") and not src.startswith("/"):
                self.fail(where, f"source {src!r} of service {service!r} must be absolute")
            if not isinstance(exclude, list) or not all(isinstance(x, str) for x in exclude):
                self.fail(where, f"exclude of {src!r} must be a list of patterns")
            out.append({"source": src, "destination": dest, "exclude": list(exclude),
                        "service": service})
        return out


def _script(directory: Path, base: str, where: str) -> Path | None:
    """`base`.sh in `directory` (Harbor's discovery for Linux tasks); a `.bat` alone means a
    Windows task, which skyhub cannot run."""
    if (directory / f"{base}.sh").is_file():
        return directory / f"{base}.sh"
    if (directory / f"{base}.bat").is_file():
        raise UsageError(f"{where}: {directory / base}.bat is a Windows script and there is no "
                         f"{base}.sh; skyhub runs Linux tasks only (add {base}.sh)")
    return None


def _verifier_mode(v: dict[str, Any]) -> str | None:
    """Harbor's rule at one level: the mode written, else "separate" when an environment is
    given, else None (inherit)."""
    return v["mode"] or ("separate" if v["environment"] is not None else None)


def _with_build_dir(env_cfg: dict[str, Any], build_dir: Path) -> dict[str, Any]:
    out = copy.deepcopy(env_cfg)
    out["build_dir"] = str(build_dir)
    return out


def _steps(r: _Reader, doc: dict[str, Any], d: Path, task: dict[str, Any]
           ) -> list[dict[str, Any]] | None:
    """The `[[steps]]` with Harbor's fallbacks applied (see `load_task`)."""
    raw = doc.get("steps")
    if raw is None or raw == []:
        return None
    if not isinstance(raw, list) or not all(isinstance(s, dict) for s in raw):
        r.fail("[[steps]]", "must be an array of tables ([[steps]] name = ...)")
    steps, seen = [], set()
    for i, s in enumerate(raw):
        name = s.get("name")
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            r.fail(f"[[steps]] #{i + 1} name", f"= {name!r}: every step needs a name, the name "
                                               "of its folder under steps/")
        if name in seen:
            r.fail(f"[[steps]] name = {name!r}", "is used twice; step names must be unique")
        seen.add(name)
        where = f"steps.{name}"
        sd = d / "steps" / name
        if not (sd / "instruction.md").is_file():
            raise UsageError(f"Harbor task {d.name}: step {name!r} has no "
                             f"steps/{name}/instruction.md (a step's folder holds its "
                             "instruction, and optionally tests/, solution/, workdir/)")
        agent = r.agent(r.table(s, "agent", "steps."), f"{where}.agent")
        ver = r.verifier(r.table(s, "verifier", "steps."), f"{where}.verifier")
        mode = _verifier_mode(ver) or task["verifier_mode"]
        tests = sd / "tests" if (sd / "tests").is_dir() else d / "tests"
        v_env = None
        if mode == "separate":
            source = ver["environment"] or task["verifier_section"]["environment"] or \
                task["environment"]
            v_env = _with_build_dir(source, tests)
        test_sh = _script(sd / "tests", "test", f"Harbor task {d.name}, step {name}") or \
            _script(d / "tests", "test", f"Harbor task {d.name}")
        if test_sh is None and mode == "shared":
            raise UsageError(f"Harbor task {d.name}: step {name!r} has no test script: add "
                             f"steps/{name}/tests/test.sh or tests/test.sh")
        sol = sd / "solution" if (sd / "solution").is_dir() else d / "solution"
        solve = _script(sol, "solve", f"Harbor task {d.name}, step {name}")
        min_reward = s.get("min_reward")
        if min_reward is not None and not (
                (isinstance(min_reward, int | float) and not isinstance(min_reward, bool))
                or (isinstance(min_reward, dict) and all(
                    isinstance(v, int | float) and not isinstance(v, bool)
                    for v in min_reward.values()))):
            r.fail(f"[[steps]] {name} min_reward", "must be a number (gates 'reward') or a "
                                                   "table of numbers by reward name")
        task_agent, task_ver = task["agent_section"], task["verifier_section"]
        steps.append({
            "name": name, "path": str(sd),
            "instruction": strip_canary((sd / "instruction.md").read_text(encoding="utf-8")
                                        ).strip(),
            # Harbor: a step's agent timeout and users fall back to the task's; a step's
            # verifier timeout is its own or 600 s (VerifierConfig's default), never the task's
            "agent_timeout_s": agent["timeout_s"] if agent["timeout_s"] is not None
            else task["agent_timeout_s"],
            "verifier_timeout_s": ver["timeout_s"],
            "agent_user": agent["user"] if agent["user"] is not None else task_agent["user"],
            "verifier_user": ver["user"] if ver["user"] is not None else task_ver["user"],
            "agent_network_mode": agent["network_mode"] or task_agent["network_mode"],
            "agent_allowed_hosts": agent["allowed_hosts"] if agent["network_mode"]
            else task_agent["allowed_hosts"],
            "verifier_network_mode": ver["network_mode"] or task_ver["network_mode"],
            "verifier_allowed_hosts": ver["allowed_hosts"] if ver["network_mode"]
            else task_ver["allowed_hosts"],
            "verifier_env": {**task_ver["env"], **ver["env"]},
            "min_reward": (float(min_reward) if isinstance(min_reward, int | float) else
                           None if min_reward is None else
                           {str(k): float(v) for k, v in min_reward.items()}),
            "healthcheck": r.healthcheck(s, "steps"),
            "verifier_mode": mode, "verifier_environment": v_env,
            "artifacts": r.artifacts(s.get("artifacts"), f"[[steps]] {name} artifacts"),
            "tests_dir": str(test_sh.parent) if test_sh else None,
            "tests_dirs": [str(p) for p in (d / "tests", sd / "tests") if p.is_dir()],
            "solution_dir": str(sol) if sol.is_dir() else None,
            "solve_path": str(solve) if solve else None,
            "workdir_dir": str(sd / "workdir") if (sd / "workdir").is_dir() else None,
        })
    return steps


def read_config(d: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """task.toml (already parsed) as the config dict described in `load_task`."""
    r = _Reader(d / "task.toml")
    doc = dict(doc)
    if "version" in doc:  # schema 1.0's name for schema_version
        doc.setdefault("schema_version", doc.pop("version"))
    schema = doc.get("schema_version")
    if schema is not None and not isinstance(schema, str):
        r.fail("schema_version", f'must be a string (write schema_version = "{schema}")')
    pkg = r.table(doc, "task", "")
    name = pkg.get("name")
    if pkg and (not isinstance(name, str) or not _PACKAGE_NAME.match(name) or ".." in name):
        r.fail("[task] name", f"= {name!r} must be 'org/name' (letters, digits, '.', '_', '-')")
    strategy = doc.get("multi_step_reward_strategy")
    if strategy is not None and strategy not in REWARD_STRATEGIES:
        r.fail("multi_step_reward_strategy", f"= {strategy!r} is not 'mean' or 'final'")
    env = r.environment(r.table(doc, "environment", ""), "environment")
    agent = r.agent(r.table(doc, "agent", ""), "agent")
    ver = r.verifier(r.table(doc, "verifier", ""), "verifier")
    mode = _verifier_mode(ver) or "shared"
    cfg: dict[str, Any] = {
        "schema_version": schema, "name": name, "source": r.string(doc, "source", "(top level)"),
        "agent_timeout_s": agent["timeout_s"] if agent["timeout_s"] is not None
        else DEFAULTS["agent_timeout_s"],
        "verifier_timeout_s": ver["timeout_s"], "build_timeout_s": env["build_timeout_s"],
        "environment": _with_build_dir(env, d / "environment"),
        "agent_user": agent["user"], "verifier_user": ver["user"],
        "agent_network_mode": agent["network_mode"],
        "agent_allowed_hosts": agent["allowed_hosts"],
        "verifier_network_mode": ver["network_mode"],
        "verifier_allowed_hosts": ver["allowed_hosts"],
        "solution_env": r.env(r.table(doc, "solution", ""), "solution"),
        "verifier_env": ver["env"], "verifier_mode": mode,
        "verifier_environment": None if mode == "shared" else _with_build_dir(
            ver["environment"] or env, d / "tests"),
        "verifier_collect": ver["collect"],
        "artifacts": r.artifacts(doc.get("artifacts"), "artifacts"),
        "tests_dir": str(d / "tests"), "solution_dir": str(d / "solution"),
        "source_format": "harbor",
    }
    cfg["steps"] = _steps(r, doc, d, {**cfg, "agent_section": agent, "verifier_section": ver})
    cfg["multi_step_reward_strategy"] = (strategy or "mean") if cfg["steps"] else strategy
    # flat aliases of the agent environment's values, for callers of the first loader
    cfg.update(cpus=env["cpus"], memory_mb=env["memory_mb"], docker_image=env["docker_image"],
               network=env["network_mode"] == "public")
    return cfg


def load_task(path: str | Path) -> Task:
    """One Harbor task directory as a `Task`: id = the directory's name, prompt = its
    instruction (the first step's for a multi-step task), answer = its solve.sh text (or
    None), meta = {"path", "config", "metadata", "timeout_s", "source"}.

    meta["config"] (JSON-able; defaults in brackets; "env config" below):
    schema_version, name ([task] name), source; agent_timeout_s [600], verifier_timeout_s
    [600], build_timeout_s [600]; environment (env config, build_dir = environment/);
    agent_user, verifier_user [None: the image's USER]; agent_network_mode /
    verifier_network_mode [None: the environment's] with agent_allowed_hosts /
    verifier_allowed_hosts; solution_env, verifier_env (raw: fill with `resolve_env` when
    running); verifier_mode ("shared" | "separate", Harbor's resolution);
    verifier_environment (separate: [verifier.environment], else a copy of environment,
    build_dir = tests/; shared: None); verifier_collect; artifacts ([{source, destination,
    exclude, service}]); tests_dir, solution_dir; steps (None or step dicts, see `_steps`);
    multi_step_reward_strategy ["mean" with steps]; source_format ("harbor" |
    "terminal-bench"); and the first loader's flat keys cpus, memory_mb, docker_image,
    network (bool) as aliases of environment's.

    Env config: docker_image, build_dir, cpus [1.0], memory_mb [2048], storage_mb, gpus,
    gpu_types, network_mode ["public"; legacy allow_internet], allowed_hosts, env, workdir,
    healthcheck ({command, interval_s, timeout_s, start_period_s, start_interval_s,
    retries} | None), skills_dir, build_timeout_s, mcp_servers.

    A step dict: name, path, instruction, agent_timeout_s / agent_user (the task's when the
    step has none), verifier_timeout_s (the step's, else 600 s as in Harbor),
    verifier_user, agent/verifier_network_mode and _allowed_hosts, verifier_env (the task's
    [verifier.env] overlaid with the step's), min_reward, healthcheck, verifier_mode (the
    step's, else its environment implies "separate", else the task's), verifier_environment
    (step's > task's [verifier.environment] > a copy of environment; build_dir = the step's
    tests/ if it has one, else tests/), artifacts (the step's own; Harbor collects the
    task's too), tests_dir (where test.sh was found: steps/<name>/tests, else tests/),
    tests_dirs (uploaded to /tests in this order), solution_dir (steps/<name>/solution,
    else solution/), solve_path, workdir_dir (steps/<name>/workdir: copied into the working
    directory before the step, its setup.sh run there)."""
    d = Path(path).expanduser().resolve()
    if not d.is_dir():
        raise DataNotFound(f"no Harbor task directory at {d}")
    if not (d / "task.toml").is_file():
        if (d / "task.yaml").is_file():
            from .terminal_bench import load_converted

            return load_converted(d, load_task)
        raise UsageError(f"{d} is not a Harbor task: task.toml is missing (a task has "
                         "task.toml, instruction.md, environment/Dockerfile and tests/test.sh)")
    try:
        doc = tomllib.loads((d / "task.toml").read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{d / 'task.toml'}: not valid TOML ({e})") from None
    cfg = read_config(d, doc)
    env = cfg["environment"]
    if env["docker_image"] is None and not any(
            (d / "environment" / f).is_file() for f in ("Dockerfile", "docker-compose.yaml")):
        raise UsageError(f"Harbor task {d.name}: neither environment/Dockerfile nor "
                         "environment/docker-compose.yaml nor [environment] docker_image in "
                         "task.toml")
    steps = cfg["steps"]
    if steps:
        prompt = steps[0]["instruction"]
        solve = Path(steps[0]["solve_path"]) if steps[0]["solve_path"] else None
    else:
        if not (d / "instruction.md").is_file():
            raise UsageError(f"Harbor task {d.name}: instruction.md is missing (or list "
                             "[[steps]] in task.toml for a multi-step task)")
        prompt = strip_canary((d / "instruction.md").read_text(encoding="utf-8")).strip()
        test_sh = _script(d / "tests", "test", f"Harbor task {d.name}")
        if test_sh is None and cfg["verifier_mode"] == "shared":
            raise UsageError(f"Harbor task {d.name}: tests/test.sh is missing (the verifier "
                             "that writes /logs/verifier/reward.txt)")
        solve = _script(d / "solution", "solve", f"Harbor task {d.name}")
    return Task(id=d.name, prompt=prompt,
                answer=solve.read_text(encoding="utf-8") if solve else None,
                meta={"path": str(d), "config": cfg, "metadata": dict(doc.get("metadata") or {}),
                      "timeout_s": cfg["agent_timeout_s"], "source": "harbor"})


def load_tasks(path: str | Path) -> TaskSet:
    """A task directory, or a dataset (a directory of task directories), as a `TaskSet`.
    Terminal-Bench tasks (task.yaml) are converted first (cached by content)."""
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise DataNotFound(f"no Harbor task or dataset at {root}; pass data_dir= a task directory "
                           "(task.toml, instruction.md, environment/, tests/), a Terminal-Bench "
                           "task (task.yaml), or a directory of them")
    if is_task_dir(root) or (root / "task.yaml").is_file():
        return TaskSet([load_task(root)], name=root.name)
    dirs = [d for d in sorted(root.iterdir())
            if d.is_dir() and (is_task_dir(d) or (d / "task.yaml").is_file())]
    if not dirs:
        raise DataNotFound(f"{root} holds no Harbor task: a task directory has task.toml and "
                           "instruction.md (or, from Terminal-Bench, task.yaml)")
    tasks = [load_task(d) for d in dirs]
    name = root.name
    if (root / "dataset.toml").is_file():
        try:
            meta = tomllib.loads((root / "dataset.toml").read_text(encoding="utf-8"))
            name = str((meta.get("dataset") or meta).get("name") or name)
        except tomllib.TOMLDecodeError:
            pass
    return TaskSet(tasks, name=name)


__all__ = ["DEFAULTS", "NETWORK_MODES", "is_task_dir", "load_task", "load_tasks",
           "read_config", "resolve_env", "strip_canary"]
