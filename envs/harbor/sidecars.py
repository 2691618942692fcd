"""A Harbor task's sidecar services: the compose file's services besides `main` (a database,
a web service the tests talk to), started per episode with the Docker SDK, as Harbor's
`docker compose up --detach --wait` starts them (harbor/environments/docker/docker.py).

What is read of each service: `image` (a local image: nothing is pulled) or `build` (a
context directory with its Dockerfile, relative to the compose file, built as the main image
is: image.py, cached by content), `command`,
`entrypoint`, `environment` (interpolated as the main service is), `healthcheck` (`test`,
`interval`, `timeout`, `retries`, `start_period`, `disable`), `depends_on` (a list, or a
mapping with `condition`: service_started, service_healthy, service_completed_successfully)
and `user`/`working_dir`; `expose` needs nothing (every port is reachable on the episode's
network). Anything that outlives or escapes the episode (`volumes`, `ports`, `network_mode`,
`privileged`, `cap_add`, `devices`...) is refused by name (UsageError), rather than run
without.

How: one bridge network per episode (internal, so nothing leaves it, when the task's network
is off), each service on it under its service name (Compose's hostname), started in
depends_on order once the conditions it names hold; then, as `up --wait` does, every service
running (and healthy where it has a healthcheck; a one-shot that a depends_on waits to
complete, exited 0) before the agent starts (else
SandboxUnavailable: an infrastructure error, with the service's last log lines). The main
container joins the network as `main` when the task gives it a network; with
`network_mode = "no-network"` it stays without one, as Harbor's no-network override leaves
it. Each sidecar gets the task's CPU and memory limits and skyhub's pid limit, and the owner
labels `skyhub reap` uses; `Sidecars.close` removes them and the network (every reset and
close of the env), and `sweep` the networks of owners that died without closing. Only
`isolation="harbor"` runs them (env.py refuses them under training: its agent container has
no network interface to reach them through).
"""

from __future__ import annotations

import contextlib
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyhub.errors import SandboxUnavailable, UsageError

from . import compose

_READ = {"image", "build", "expose", "command", "entrypoint", "environment", "healthcheck",
         "depends_on", "user", "working_dir", "hostname", "labels", "restart", "pull_policy",
         "container_name"}
_CONDITIONS = ("service_started", "service_healthy", "service_completed_successfully")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)")
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
START_TIMEOUT_S = 300.0
POOL = "harbor-sidecar"  # the pool label of sidecars and their networks (owner_labels)
PIDS = 1024


@dataclass(frozen=True)
class Sidecar:
    """One service besides `main`, as read from the compose file."""

    name: str
    image: str  # "" until a `build` service's image is built (env.py)
    command: list[str] | None = None
    entrypoint: list[str] | None = None
    environment: dict[str, str] = field(default_factory=dict)
    healthcheck: dict[str, Any] | None = None  # docker-py's form (nanoseconds)
    depends_on: dict[str, str] = field(default_factory=dict)  # service -> condition
    user: str | None = None
    working_dir: str | None = None
    build_dir: Path | None = None  # `build`: the context, holding its Dockerfile


def read(build_dir: Path, variables: Mapping[str, str]) -> tuple[list[Sidecar], dict[str, str]]:
    """The compose file's services besides `main`, in an order that starts each after those it
    depends on, and main's own depends_on; ([], {}) without a compose file."""
    path = Path(build_dir).resolve() / compose.COMPOSE_FILE
    if not path.is_file():
        return [], {}
    where = str(path)
    services = compose._load_yaml(path).get("services") or {}
    if not isinstance(services, dict):
        raise UsageError(f"{where}: `services` must be a mapping of service names")
    main_deps = _depends_on((services.get(compose.MAIN) or {}).get("depends_on"), where, "main")
    found: dict[str, Sidecar] = {}
    for name, raw in services.items():
        if name == compose.MAIN:
            continue
        found[str(name)] = _sidecar(str(name), compose._interpolate_tree(raw or {}, variables,
                                                                          where),
                                    variables, path.parent, where)
    for name, deps in [(compose.MAIN, main_deps), *((s.name, s.depends_on)
                                                    for s in found.values())]:
        for dep in deps:
            if dep not in found:
                raise UsageError(f"{where}: service {name} depends on {dep!r}, which is not a "
                                 "service besides main")
    return _ordered(found, where), main_deps


def _sidecar(name: str, svc: Any, variables: Mapping[str, str], base: Path,
             where: str) -> Sidecar:
    if not isinstance(svc, dict):
        raise UsageError(f"{where}: service {name} must be a mapping")
    refused = sorted(str(k) for k in svc if k not in _READ and not str(k).startswith("x-"))
    if refused:
        raise UsageError(f"{where}: service {name} sets {', '.join(refused)}, which skyhub's "
                         "sidecars do not support (they run a local `image` with command, "
                         "entrypoint, environment, healthcheck and depends_on, on the episode's "
                         "own network); bake what it needs into an image")
    build_dir = _build_dir(svc.get("build"), name, base, where)
    if not svc.get("image") and build_dir is None:
        raise UsageError(f"{where}: service {name} has no `image` or `build`")
    return Sidecar(
        name=name, image="" if build_dir is not None else str(svc["image"]),
        build_dir=build_dir,
        command=compose._argv(svc.get("command"), "command", where),
        entrypoint=compose._argv(svc.get("entrypoint"), "entrypoint", where),
        environment=compose._pairs(svc.get("environment"), variables, "environment", where),
        healthcheck=_healthcheck(svc.get("healthcheck"), name, where),
        depends_on=_depends_on(svc.get("depends_on"), where, name),
        user=None if svc.get("user") is None else str(svc["user"]),
        working_dir=None if svc.get("working_dir") is None else str(svc["working_dir"]))


def _build_dir(raw: Any, name: str, base: Path, where: str) -> Path | None:
    """`build: DIR` or `build: {context: DIR}` (its own Dockerfile): the context, resolved
    from the compose file's directory. Other build settings are refused by name."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        extra = sorted(str(k) for k in raw if k != "context" and not (
            k == "dockerfile" and raw[k] == "Dockerfile"))
        if extra:
            raise UsageError(f"{where}: service {name}'s build sets {', '.join(extra)}; skyhub "
                             "builds a sidecar from a context directory and its Dockerfile")
        raw = raw.get("context", ".")
    context = (base / str(raw)).resolve()
    if not (context / "Dockerfile").is_file():
        raise UsageError(f"{where}: service {name}'s build context {context} has no Dockerfile")
    return context


def _depends_on(raw: Any, where: str, name: str) -> dict[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, list):
        return {str(d): "service_started" for d in raw}
    if isinstance(raw, dict):
        out = {}
        for dep, spec in raw.items():
            cond = str((spec or {}).get("condition") or "service_started") \
                if isinstance(spec, dict) else "service_started"
            if cond not in _CONDITIONS:
                raise UsageError(f"{where}: service {name}'s depends_on {dep}: condition "
                                 f"{cond!r} is not one of {', '.join(_CONDITIONS)}")
            out[str(dep)] = cond
        return out
    raise UsageError(f"{where}: service {name}'s depends_on must be a list or a mapping")


def _seconds(raw: Any, where: str) -> float:
    """A Compose duration ("1m30s", "500ms", a number of seconds) in seconds."""
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return float(raw)
    text = str(raw).strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise UsageError(f"{where}: {raw!r} is not a duration (e.g. 5s, 1m30s, 500ms)")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _healthcheck(raw: Any, name: str, where: str) -> dict[str, Any] | None:
    """Compose's healthcheck as docker-py's (durations in nanoseconds); None: none, or
    `disable: true` (the image's own HEALTHCHECK then applies, as in Compose, unless
    disabled)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: service {name}'s healthcheck must be a mapping")
    if raw.get("disable"):
        return {"test": ["NONE"]}
    test = raw.get("test")
    if isinstance(test, str):
        test = ["CMD-SHELL", test]
    elif not (isinstance(test, list) and test):
        raise UsageError(f"{where}: service {name}'s healthcheck needs a `test`")
    hc: dict[str, Any] = {"test": [str(t) for t in test]}
    for key, out in (("interval", "interval"), ("timeout", "timeout"),
                     ("start_period", "start_period"), ("start_interval", "start_interval")):
        if raw.get(key) is not None:
            hc[out] = int(_seconds(raw[key], where) * 1e9)
    if raw.get("retries") is not None:
        hc["retries"] = int(raw["retries"])
    return hc


def _ordered(found: dict[str, Sidecar], where: str) -> list[Sidecar]:
    """Dependencies first (a cycle is a UsageError, as Compose refuses one)."""
    out: list[Sidecar] = []
    state: dict[str, int] = {}

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise UsageError(f"{where}: depends_on has a cycle: {' -> '.join((*chain, name))}")
        state[name] = 1
        for dep in sorted(found[name].depends_on):
            visit(dep, (*chain, name))
        state[name] = 2
        out.append(found[name])

    for name in sorted(found):
        visit(name, ())
    return out


class Sidecars:
    """The running sidecars of one episode and their network (`start`, then `close`)."""

    def __init__(self, client: Any, *, task_id: str, labels: Mapping[str, str]) -> None:
        self.client, self.task_id, self.labels = client, task_id, dict(labels)
        self.network: Any = None
        self.containers: dict[str, Any] = {}

    def start(self, services: list[Sidecar], main_deps: Mapping[str, str], *, public: bool,
              env_cfg: Mapping[str, Any], timeout_s: float = START_TIMEOUT_S) -> None:
        """The network, then each service once what it depends on holds, then every one
        running or healthy (`up --wait`). SandboxUnavailable when one never is."""
        import docker.errors

        deadline = time.monotonic() + timeout_s
        sweep(self.client)
        try:
            self.network = self.client.networks.create(
                f"skyhub-harbor-{secrets.token_hex(6)}", driver="bridge", internal=not public,
                labels=self.labels)
            for svc in services:
                for dep, cond in svc.depends_on.items():
                    self._await(dep, cond, deadline)
                self.containers[svc.name] = self._run(svc, env_cfg)
            for dep, cond in main_deps.items():
                self._await(dep, cond, deadline)
            one_shots = {dep for deps in [main_deps, *(s.depends_on for s in services)]
                         for dep, cond in deps.items()
                         if cond == "service_completed_successfully"}
            for svc in services:  # up --wait: running, and healthy where there is a check
                self._await(svc.name, "service_completed_successfully"
                            if svc.name in one_shots else "up", deadline)
        except docker.errors.ImageNotFound as e:
            raise SandboxUnavailable(f"Harbor task {self.task_id}: a sidecar's image is not "
                                     f"here ({e}); skyhub pulls nothing: build or load it "
                                     "first") from e
        except docker.errors.DockerException as e:
            raise SandboxUnavailable(f"Harbor task {self.task_id}: Docker failed while "
                                     f"starting its sidecar services: {e}") from e

    def _run(self, svc: Sidecar, env_cfg: Mapping[str, Any]) -> Any:
        net = self.network.name
        c = self.client.containers.create(
            svc.image, command=svc.command, entrypoint=svc.entrypoint,
            environment=svc.environment, healthcheck=svc.healthcheck, user=svc.user or "",
            working_dir=svc.working_dir, hostname=svc.name,
            name=f"{net}-{re.sub(r'[^a-zA-Z0-9_.-]', '-', svc.name)}", labels=self.labels,
            network=net, networking_config={
                net: self.client.api.create_endpoint_config(aliases=[svc.name])},
            mem_limit=f"{int(env_cfg.get('memory_mb') or 2048)}m",
            nano_cpus=int(float(env_cfg.get("cpus") or 1.0) * 1e9), pids_limit=PIDS,
            detach=True)
        c.start()
        return c

    def _await(self, name: str, condition: str, deadline: float) -> None:
        """Until `name` meets `condition` ("up": running, and healthy if it has a check)."""
        c = self.containers[name]
        while True:
            c.reload()
            state = c.attrs.get("State") or {}
            health = (state.get("Health") or {}).get("Status")
            status = state.get("Status")
            if condition == "service_completed_successfully":
                if status == "exited":
                    if state.get("ExitCode") == 0:
                        return
                    self._fail(name, f"exited {state.get('ExitCode')}")
            elif status in ("exited", "dead"):
                self._fail(name, f"exited {state.get('ExitCode')}")
            elif health == "unhealthy":
                self._fail(name, "unhealthy")
            elif status == "running":
                if condition == "service_healthy" and health is None:
                    self._fail(name, "has no healthcheck, and a service waits for it to be "
                                     "healthy (depends_on condition: service_healthy)")
                if condition == "service_started" or health in (None, "healthy"):
                    return
            if time.monotonic() > deadline:
                self._fail(name, f"not {condition} after the start timeout "
                                 f"({status}, health {health})")
            time.sleep(0.2)

    def _fail(self, name: str, why: str) -> None:
        logs = ""
        with contextlib.suppress(Exception):
            logs = self.containers[name].logs(tail=20).decode("utf-8", "replace").strip()
        raise SandboxUnavailable(f"Harbor task {self.task_id}: sidecar service {name} "
                                 f"{why}{': ' + logs[-500:] if logs else ''}")

    def join(self, container: Any) -> None:
        """The main container on the episode's network, as `main`."""
        self.network.connect(container, aliases=[compose.MAIN])

    def close(self) -> None:
        """Every sidecar removed (with its anonymous volumes), then the network."""
        for c in self.containers.values():
            with contextlib.suppress(Exception):
                c.remove(force=True, v=True)
        self.containers = {}
        if self.network is not None:
            with contextlib.suppress(Exception):
                self.network.remove()
            self.network = None


def sweep(client: Any) -> list[str]:
    """Remove the sidecars and sidecar networks of owners on this host that died without
    closing their env; return the networks' names. `skyhub reap` removes containers only, and
    a network left behind holds one of Docker's ~30 default address pools."""
    import socket

    from skyhub.sandbox import base

    host = socket.gethostname()

    def dead(labels: dict[str, str]) -> bool:
        pid = str(labels.get(base.LABEL_OWNER_PID, ""))
        return labels.get(base.LABEL_OWNER_HOST) == host and pid.isdigit() \
            and not base.pid_alive(int(pid))

    wanted = {"label": f"{base.LABEL_POOL}={POOL}"}
    for c in client.containers.list(all=True, ignore_removed=True, filters=wanted):
        if dead(c.labels or {}):
            with contextlib.suppress(Exception):
                c.remove(force=True, v=True)
    removed = []
    for net in client.networks.list(filters=wanted):
        if dead(net.attrs.get("Labels") or {}):
            with contextlib.suppress(Exception):
                net.remove()
                removed.append(net.name)
    return removed


__all__ = ["POOL", "Sidecar", "Sidecars", "read", "sweep"]
