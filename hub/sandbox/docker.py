"""The `docker` sandbox backend: one container per sandbox, driven by a persistent agent.

Isolation: no network unless `network=True`, CPU/memory (no swap)/process-count limits, all
capabilities dropped, `no-new-privileges`, and commands run as the image's user (`sandbox`,
uid 1000, in skyhub's images). The container's pid 1 (docker-init + `sleep infinity`) runs
as root without capabilities, so a command's `kill -9 -1` cannot stop the container.

Speed: commands go to an agent process inside the container (see `docker_channel`), so a
warm `exec("true")` costs about 2 ms instead of a Docker exec (~70 ms). Snapshots are tars
of the workdir kept in a root-owned directory inside the container (commands cannot tamper
with the state a pool restores to); `restore` is one agent request.

Every container carries `base.owner_labels()`, so `reap()` removes those whose owner died.
"""

from __future__ import annotations

import base64
import contextlib
import io
import logging
import posixpath
import socket
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

from skyhub.errors import InfraError, SandboxUnavailable, UsageError
from skyhub.sandbox import base
from skyhub.sandbox.base import ExecResult, Sandbox, Snapshot, as_bytes
from skyhub.sandbox.docker_channel import (
    SNAPSHOT_DIR,
    AgentChannel,
    ChannelBroken,
    ChannelTimeout,
    ExecFallback,
    ExecStream,
    agent_setup_tar,
    extract_as,
    tar_dir_entry,
    tar_one,
)

log = logging.getLogger(__name__)

START_HINT = "start Docker with `bash scripts/services.sh` (or run `dockerd` as root)"
_available = False
_client: Any = None
_client_lock = threading.Lock()
_FILE_ERRORS = {"FileNotFoundError": FileNotFoundError, "IsADirectoryError": IsADirectoryError,
                "NotADirectoryError": NotADirectoryError, "PermissionError": PermissionError,
                "FileExistsError": FileExistsError}


def docker_available(timeout: float = 3.0) -> bool:
    """Whether a Docker daemon answers a ping. A True answer is cached for the process (a
    daemon rarely goes away; `backend="auto"` asks often). Never raises."""
    global _available
    if _available:
        return True
    try:
        import docker

        client = docker.from_env(timeout=max(int(timeout), 1))
        try:
            _available = bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False
    return _available


def get_client() -> Any:
    """The process's shared Docker client (thread-safe; connection pool sized for pools)."""
    global _client
    with _client_lock:
        if _client is None:
            try:
                import docker
            except ImportError as e:
                raise SandboxUnavailable("the docker backend needs the Docker SDK: "
                                         "pip install 'skyhub[docker]'") from e
            try:
                client = docker.from_env(timeout=120, max_pool_size=64)
                client.ping()
            except Exception as e:
                raise SandboxUnavailable(f"no Docker daemon answers ({e}); {START_HINT}") from e
            _client = client
        return _client


class DockerSandbox(Sandbox):
    """A sandbox in a Docker container. See the module docstring for what it isolates.

    `image=None` uses skyhub's default image (build it with `skyhub images build`); another
    image works too: the agent is copied in when it has python3 >= 3.8, else every call uses
    Docker's exec API (slow, tens of ms). `user` overrides the image's user for commands.
    """

    backend = "docker"

    def __init__(self, image: str | None = None, *, cpus: float = 1.0, memory_mb: int = 1024,
                 network: bool = False, workdir: str = "/work", pids: int = base.DEFAULT_PIDS,
                 max_output: int = base.DEFAULT_MAX_OUTPUT, pool: str | None = None,
                 user: str | None = None, client: Any = None) -> None:
        super().__init__(workdir=posixpath.normpath(workdir), max_output=max_output)
        import docker.errors

        from skyhub.sandbox import images

        self._closed = True  # until the container exists, close() has nothing to do
        self.client = client or get_client()
        self.image = image or images.image_tag("default")
        self.network = network
        self._lock = threading.Lock()
        self._chan: AgentChannel | None = None
        self._fallback: ExecFallback | None = None
        self._snaps: set[str] = set()
        self._keep: list[int] = []  # pids kill_all must spare (pid 1's child, when root)
        self._uid, self._gid = 0, 0
        img = self._get_image(image)
        self.user = user if user is not None else (img.attrs.get("Config", {}).get("User") or "0")
        self.labels = base.owner_labels(pool)
        self.name = f"skyhub-{self.id}"
        try:
            self.container = self.client.containers.create(
                self.image, ["sleep", "infinity"], name=self.name, labels=self.labels,
                init=True, user="0", working_dir=self.workdir, hostname="sandbox",
                network_mode=None if network else "none", nano_cpus=int(cpus * 1e9),
                mem_limit=f"{int(memory_mb)}m", memswap_limit=f"{int(memory_mb)}m",
                pids_limit=int(pids), cap_drop=["ALL"], security_opt=["no-new-privileges"])
        except Exception as e:
            raise SandboxUnavailable(f"cannot create a container from {self.image}: {e}") from e
        self._closed = False
        try:
            self.container.start()
            self._setup(ours=self.image in {images.image_tag(n) for n in images.IMAGES})
        except docker.errors.DockerException as e:
            self.close()
            raise SandboxUnavailable(f"cannot start a sandbox from {self.image}: {e}") from e
        except BaseException:
            self.close()
            raise

    # -- setup -------------------------------------------------------------------------
    def _get_image(self, requested: str | None) -> Any:
        import docker.errors

        try:
            return self.client.images.get(self.image)
        except docker.errors.ImageNotFound:
            hint = ("run `skyhub images build` to build skyhub's images" if requested is None
                    or self.image.startswith("skyhub/") else
                    f"pull or build it first (`docker pull {self.image}`); skyhub's own images:"
                    " `skyhub images build`")
            raise SandboxUnavailable(f"Docker image {self.image} is not present; {hint}") from None

    def _root(self, argv: list[str], user: str = "0") -> tuple[int, str]:
        r = self.container.exec_run(argv, user=user)
        return r.exit_code, (r.output or b"").decode("utf-8", "replace")

    def _setup(self, ours: bool) -> None:
        """Copy the agent in (foreign images), make the workdir the run user's, start the agent
        (or the exec fallback) and note which pids `kill_all` must spare."""
        code, _ = (0, "") if ours else self._root(
            ["python3", "-c", "import sys; sys.exit(sys.version_info < (3, 8))"])
        if not ours:
            self.container.put_archive("/", agent_setup_tar())
        writable = True
        if ours and self.user == "sandbox" and self.workdir == "/work":
            self._uid = self._gid = 1000  # as the Dockerfile made it: no need to ask
        else:
            out = self._root(["sh", "-c", 'id -u; id -g; test -w "$1" && echo w', "sh",
                              self.workdir], user=self.user)[1].split()
            if len(out) >= 2 and out[0].isdigit() and out[1].isdigit():
                self._uid, self._gid = int(out[0]), int(out[1])
            writable = "w" in out[2:]
        parent, leaf = posixpath.split(self.workdir)
        if not writable and leaf:
            # Docker created the workdir as root; the daemon can give it to the run user
            # (root in the container has no CAP_CHOWN)
            self.container.put_archive(parent, tar_dir_entry(leaf, uid=self._uid,
                                                             gid=self._gid))
        if code == 0:
            self._start_agent()
            uid = self._chan.uid if self._chan else 0
        else:
            log.warning("image %s has no python3 >= 3.8: using Docker's exec API per call "
                        "(slow)", self.image)
            has_timeout = self._root(["sh", "-c", "command -v timeout"])[0] == 0
            self._fallback = ExecFallback(self.client.api, self.container.id, self.user,
                                          self.workdir, has_timeout)
            uid = self._uid
        if uid == 0:  # commands run as pid 1's user: spare `sleep infinity` in kill_all
            out = self._root(["cat", "/proc/1/task/1/children"])[1]
            self._keep = [int(p) for p in out.split() if p.isdigit()]

    def _start_agent(self) -> AgentChannel:
        import docker.errors

        try:
            chan = AgentChannel(self.client.api, self.container.id, self.user, self.workdir)
        except docker.errors.DockerException as e:
            self._check_container()
            raise InfraError(f"cannot start the agent in sandbox {self.name}: {e}") from e
        try:
            pong = chan.request({"op": "ping"}, 60)
        except ChannelBroken as e:
            chan.close()
            self._check_container()
            raise InfraError(f"the agent in sandbox {self.name} did not start ({e}); "
                             "see the log for its stderr") from e
        chan.pid, chan.uid = int(pong.get("pid", 0)), int(pong.get("uid", -1))
        self._chan = chan
        return chan

    def _check_container(self) -> None:
        """Raise InfraError when the container is gone or stopped."""
        import docker.errors

        try:
            self.container.reload()
            status = self.container.status
        except docker.errors.NotFound:
            status = "removed"
        except Exception as e:
            raise InfraError(f"cannot inspect sandbox container {self.name}: {e}") from e
        if status != "running":
            raise InfraError(f"sandbox container {self.name} is {status}; create a new sandbox")

    def _drop_agent(self, kill: bool = False) -> None:
        chan, self._chan = self._chan, None
        if chan is not None:
            chan.close()
            if kill and chan.pid:  # a hung agent must not keep running a command
                with contextlib.suppress(Exception):
                    self._root(["kill", "-9", str(chan.pid)], user=self.user)

    def _request(self, req: dict[str, Any], timeout: float | None,
                 idempotent: bool = True) -> dict[str, Any] | None:
        """Send one request to the agent. A broken channel is restarted once: idempotent
        requests are retried, others return None (the command's fate is unknown)."""
        self._check_open()
        with self._lock:
            for attempt in range(2):
                chan = self._chan
                if chan is None or chan.stale():
                    self._drop_agent()
                    chan = self._start_agent()
                try:
                    reply = chan.request(req, timeout)
                except ChannelTimeout as e:
                    self._drop_agent(kill=True)
                    self._check_container()
                    raise InfraError(f"the agent in sandbox {self.name} did not answer a "
                                     f"{req['op']!r} request within {timeout} s") from e
                except ChannelBroken as e:
                    self._drop_agent()
                    self._check_container()
                    if not idempotent:
                        return None
                    if attempt:
                        raise InfraError(f"the agent in sandbox {self.name} keeps failing: "
                                         f"{e}") from e
                    continue
                if not reply.get("ok"):
                    kind = _FILE_ERRORS.get(str(reply.get("type")))
                    if kind is not None:
                        raise kind(reply.get("error", ""))
                    raise InfraError(f"sandbox agent {req['op']!r} failed: "
                                     f"{reply.get('type')}: {reply.get('error')}")
                return reply
        return None  # not reached

    # -- commands ----------------------------------------------------------------------
    def exec(self, cmd: str | list[str], timeout: float | None = 30, cwd: str | None = None,
             env: dict[str, str] | None = None, stdin: str | bytes | None = None) -> ExecResult:
        self._check_open()
        wd = self._path(cwd) if cwd else self.workdir
        data = None if stdin is None else as_bytes(stdin)
        if self._fallback is not None:
            argv = ["sh", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
            return ExecResult.from_agent(self._fallback.run(
                argv, timeout=timeout, cwd=wd, env=env, stdin=data, max_output=self.max_output))
        start = time.monotonic()
        reply = self._request(
            {"op": "exec", "cmd": cmd if isinstance(cmd, str) else [str(a) for a in cmd],
             "timeout": timeout, "cwd": wd, "env": env, "max_output": self.max_output,
             "stdin": None if data is None else base64.b64encode(data).decode("ascii")},
            None if timeout is None else timeout + 30, idempotent=False)
        if reply is None:
            return ExecResult(137, "", "skyhub: the sandbox agent was killed (e.g. by `kill -9 "
                              "-1`) or its channel broke while running this command; it is "
                              "restarted for the next one\n", False, time.monotonic() - start)
        reply["stdout"] = base64.b64decode(reply["stdout"])
        reply["stderr"] = base64.b64decode(reply["stderr"])
        return ExecResult.from_agent(reply)

    def spawn(self, argv: list[str], env: dict[str, str] | None = None,
              cwd: str | None = None) -> base.Channel:
        """Start a long-running process as the sandbox's user (see `Sandbox.spawn`), attached
        through Docker's exec API like the agent; it ends when its stdin closes."""
        import docker.errors

        self._check_open()
        try:
            return AgentChannel(self.client.api, self.container.id, self.user,
                                self._path(cwd) if cwd else self.workdir, argv=list(argv),
                                env=env)
        except docker.errors.DockerException as e:
            self._check_container()
            raise InfraError(f"cannot start {argv[0]!r} in sandbox {self.name}: {e}") from e

    def open_stream(self, argv: list[str], env: dict[str, str] | None = None,
                    cwd: str | None = None) -> base.Stream:
        """Start a long-running process as the sandbox's user and return its raw stdin and
        stdout (see `Sandbox.open_stream`); it ends when its stdin closes."""
        import docker.errors

        self._check_open()
        try:
            return ExecStream(self.client.api, self.container.id, self.user,
                              self._path(cwd) if cwd else self.workdir, list(argv), env)
        except docker.errors.DockerException as e:
            self._check_container()
            raise InfraError(f"cannot start {argv[0]!r} in sandbox {self.name}: {e}") from e

    # -- files -------------------------------------------------------------------------
    def write_file(self, path: str, data: str | bytes, mode: int | None = None) -> None:
        target, raw = self._path(path), as_bytes(data)
        if self._fallback is not None:
            self._fallback.put(posixpath.dirname(target), tar_one(
                posixpath.basename(target), raw, mode=0o644 if mode is None else mode,
                uid=self._uid, gid=self._gid))
            return
        self._request({"op": "write", "path": target, "mode": mode,
                       "data": base64.b64encode(raw).decode("ascii")}, 600)

    def read_file(self, path: str) -> bytes:
        target = self._path(path)
        try:
            if self._fallback is not None:
                return self._fallback.read(target)
            return base64.b64decode(self._request({"op": "read", "path": target}, 600)["data"])
        except IsADirectoryError:
            raise IsADirectoryError(f"{target} is a directory in sandbox {self.name}; use "
                                    "download() to copy a directory") from None

    def upload(self, src: str | Path, dest: str | None = None) -> None:
        """A directory's contents go into `dest` (default: the workdir); a file goes to
        `dest/<its name>` (the same on every backend)."""
        src = Path(src)
        if not src.exists():
            raise FileNotFoundError(f"no such host file to upload: {src}")
        target = self._path(dest or ".")

        def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
            info.uid, info.gid, info.uname, info.gname = self._uid, self._gid, "", ""
            return info

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(src, arcname="." if src.is_dir() else src.name, filter=owned)
        if self._fallback is not None:
            self._fallback.put(target, buf.getvalue())
            return
        self._request({"op": "untar", "path": target,
                       "data": base64.b64encode(buf.getvalue()).decode("ascii")}, 600)

    def download(self, src: str, dest: str | Path) -> None:
        """A directory's contents go into the host directory `dest`; a file to
        `dest/<its name>` (links out of the tree and special files are skipped: the content
        is untrusted)."""
        target = self._path(src)
        name = posixpath.basename(target) or "root"
        if self._fallback is not None:
            prefix, data = self._fallback.archive(target)
        else:
            prefix = "."
            data = base64.b64decode(self._request({"op": "tar", "path": target}, 600)["data"])
        extract_as(data, prefix, name, Path(dest))

    # -- state -------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        snap = Snapshot(id=base.new_id("snap"), sandbox_id=self.id)
        if self._fallback is not None:
            self._fallback.sh('mkdir -p "$1" && tar -C "$2" -cf "$1/$3.tar" .', SNAPSHOT_DIR,
                              self.workdir, snap.id, user="0")
        else:
            data = base64.b64decode(self._request({"op": "tar", "path": self.workdir},
                                                  600)["data"])
            # written by the daemon as root 0644: readable by the agent, not changeable by it
            self.container.put_archive(SNAPSHOT_DIR, tar_one(f"{snap.id}.tar", data))
        self._snaps.add(snap.id)
        return snap

    def restore(self, snap: Snapshot, *, kill_processes: bool = True) -> None:
        if snap.sandbox_id != self.id or snap.id not in self._snaps:
            raise UsageError(f"snapshot {snap.id} was taken of sandbox {snap.sandbox_id}, not of"
                             f" {self.id}; restore it on the sandbox that took it")
        if self._fallback is not None:
            if kill_processes:
                self._fallback.kill_all(self._keep)
            self._fallback.restore(snap.id, self.workdir)
            return
        if kill_processes:  # first, so nothing writes into the workdir while it is restored
            self._request({"op": "kill_all", "keep": self._keep}, 60)
        self._request({"op": "restore", "path": self.workdir, "name": snap.id,
                       "kill_processes": kill_processes, "keep": self._keep}, 600)

    # -- lifecycle ---------------------------------------------------------------------
    def _close(self) -> None:
        import docker.errors

        chan, self._chan = self._chan, None
        if chan is not None:
            chan.close()
        with contextlib.suppress(docker.errors.NotFound):
            self.container.remove(force=True)


# ------------------------------------------------------------------------ orphans
def list_sandboxes(client: Any = None) -> list[dict[str, Any]]:
    """Every container labeled as a skyhub sandbox, on this daemon, with its owner."""
    client = client or get_client()
    out = []
    for c in client.containers.list(all=True, filters={"label": f"{base.LABEL}=1"}):
        labels = c.labels or {}
        pid = labels.get(base.LABEL_OWNER_PID, "")
        try:
            created = float(labels.get(base.LABEL_CREATED, "0"))
        except ValueError:
            created = 0.0
        out.append({"id": c.id, "name": c.name, "labels": labels, "status": c.status,
                    "owner_pid": int(pid) if pid.isdigit() else None,
                    "owner_host": labels.get(base.LABEL_OWNER_HOST, ""), "created": created})
    return out


def reap(older_than_s: float = 0.0, dry_run: bool = False) -> list[str]:
    """Remove sandbox containers whose owner process (on this host) is dead and that were
    created more than `older_than_s` seconds ago; return their names. Containers owned by
    another host are left alone: their owner's liveness cannot be checked from here."""
    import docker.errors

    client = get_client()
    host, now, removed = socket.gethostname(), time.time(), []
    for sb in list_sandboxes(client):
        pid = sb["owner_pid"]
        if sb["owner_host"] != host or pid is None or base.pid_alive(pid):
            continue
        if now - sb["created"] < older_than_s:
            continue
        if not dry_run:
            try:
                client.containers.get(sb["id"]).remove(force=True)
            except docker.errors.NotFound:
                continue
        removed.append(sb["name"])
    return removed


__all__ = ["DockerSandbox", "docker_available", "get_client", "list_sandboxes", "reap"]
