"""The `docker` sandbox backend: one container per sandbox, driven by a persistent guest
(skyhub's in-sandbox daemon, `skyhub.sandbox.guest`).

Isolation: no network unless `network=True`, CPU/memory (no swap)/process-count limits, all
capabilities dropped and `no-new-privileges` (unless `privileges="docker"`: Docker's defaults,
for Harbor tasks run as Harbor runs them), and commands run as the image's user (`sandbox`,
uid 1000, in skyhub's images). The container's pid 1 (docker-init + `sleep infinity`) runs
as root without capabilities, so a command's `kill -9 -1` cannot stop the container.

Speed: commands go to the guest process inside the container (see `docker_channel`), so a
warm `exec("true")` costs about 2 ms instead of a Docker exec (~70 ms). Snapshots are tars
kept in a root-owned directory inside the container (commands cannot tamper with the state a
pool restores to); `restore` is two guest requests.

What a restore gives back (the clean state a pool hands out), how the disk is bounded, and
why containers log nothing: `docker_layout`, which makes the container's spec and mounts and
finds the places to put back. Containers carry `base.owner_labels()` for `docker_client.reap`.

Interpreters: the guest runs `python3 -I -u` (isolated: no user site, no PYTHON* variables,
no cwd on sys.path) from a root-owned path with a fixed HOME, so a hook a command plants
(usercustomize, .pth, sitecustomize, a json.py) never runs inside it.

One guest per container: it starts before any command runs and is never started again in
that container. When a command kills it (or its channel breaks or hangs), the next request
replaces the container with a fresh one of the image, snapshots kept (`replaced` counts it;
the command that lost its guest gets exit 137 saying so). A second guest beside the agent's
processes could be opened through /proc/<pid>/fd (same uid) before it turns undumpable and
answered for; in a root image its code and the stdlib are the agent's to rewrite. Root-run
sandboxes keep their snapshots on the host too (root can rewrite those in the container).

Budgets: replies over `max_reply_mb` (default 64 MiB; file transfers may be as big as the
sandbox's disk and memory) break the channel instead of being buffered.

Over ~400 lines, for a reason: one backend, one class: what a sandbox does, done with a
container and its guest.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import logging
import posixpath
import threading
import time
from pathlib import Path
from typing import Any

from skyhub.errors import InfraError, SandboxUnavailable, UsageError
from skyhub.sandbox import base, docker_places
from skyhub.sandbox.base import ExecResult, Sandbox, Snapshot, as_bytes
from skyhub.sandbox.docker_channel import (
    SNAPSHOT_DIR,
    ChannelBroken,
    ChannelTimeout,
    ExecFallback,
    ExecStream,
    GuestChannel,
    ReplyTooLarge,
    extract_as,
    guest_setup_tar,
    reply_error,
    tar_dir_entry,
    tar_files,
    tar_one,
    tar_owned,
)
from skyhub.sandbox.docker_client import (
    get_client,
    get_image,
    storage_opt_refused,
    storage_opt_supported,
)
from skyhub.sandbox.docker_layout import (
    FIND_PYTHON,
    HOME,
    WITH_FSIZE,
    container_spec,
    default_disk_mb,
    image_places,
    restore_plan,
    tmpfs_fits,
    tmpfs_places,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_REPLY_MB = 64


class DockerSandbox(Sandbox):
    """A sandbox in a Docker container. See the module docstring for what it isolates.

    `image=None` uses skyhub's default image (build it with `skyhub images build`); another
    image works too: the guest is copied in when it has python3 >= 3.8, else every call uses
    Docker's exec API (slow, tens of ms). `user` overrides the image's user for commands.
    `disk_mb` bounds what commands can write (see `docker_layout`; default half of
    `memory_mb`), `max_reply_mb` what the host buffers of one reply.
    """

    backend = "docker"

    def __init__(self, image: str | None = None, *, cpus: float = 1.0, memory_mb: int = 1024,
                 network: bool = False, workdir: str = "/work", pids: int = base.DEFAULT_PIDS,
                 max_output: int = base.DEFAULT_MAX_OUTPUT, pool: str | None = None,
                 user: str | None = None, client: Any = None, disk_mb: int | None = None,
                 max_reply_mb: int = DEFAULT_MAX_REPLY_MB, privileges: str = "none",
                 env: dict[str, str] | None = None, volumes: list[str] | None = None,
                 command: list[str] | None = None, entrypoint: list[str] | None = None,
                 own_workdir: bool = True) -> None:
        """`privileges`: "none" (every capability dropped, `no-new-privileges`: skyhub's
        training isolation) or "docker" (Docker's default capabilities, setuid allowed: how
        Harbor runs a task, whose verifier may `chown` or `apt-get install` as root).
        `env`, `volumes` (docker-py "host:container:mode" binds), `command` (instead of
        `sleep infinity`; the image's ENTRYPOINT runs either way unless `entrypoint` replaces
        it) set up the container as a task's compose file does. `own_workdir=False` leaves the
        workdir's owner as the image has it (a Harbor task's files are the task's)."""
        if privileges not in ("none", "docker"):
            raise UsageError(f"privileges must be 'none' (skyhub's isolation) or 'docker' "
                             f"(Docker's defaults), got {privileges!r}")
        super().__init__(workdir=posixpath.normpath(workdir), max_output=max_output)
        from skyhub.sandbox import images

        self._closed = True  # until the container exists, close() has nothing to do
        self.client = client or get_client()
        self.image = image or images.image_tag("default")
        self.network = network
        self.disk_mb = int(disk_mb) if disk_mb is not None else default_disk_mb(memory_mb)
        if self.disk_mb < 1:
            raise UsageError(f"disk_mb must be >= 1, got {disk_mb}")
        # exec replies hold two capped streams in base64; file transfers are bounded by what
        # the sandbox can hold: its disk and its memory
        self.max_reply = max(int(max_reply_mb) << 20, 3 * max_output + (1 << 20))
        self.max_transfer = max(self.max_reply, 2 * (max(self.disk_mb, int(memory_mb)) << 20))
        self._max_file = max(self.disk_mb << 20, self.max_reply // 2)  # what a read returns
        # re-entrant: a request that finds the guest gone replaces the container, whose
        # setup sends requests of its own
        self._lock = threading.RLock()
        self._chan: GuestChannel | None = None
        self._fallback: ExecFallback | None = None
        self._snaps: dict[str, list[list[str]]] = {}  # id -> [[place, its tar], ...]
        self._snap_archive: bytes | None = None  # root run user: the snapshots, host-side
        self._keep: list[int] = []  # pids kill_all must spare (pid 1's child, when root)
        self._uid, self._gid = 0, 0
        img = get_image(self.client, self.image, requested=image)
        self._image_id = str(img.id)
        self.user = user if user is not None else (img.attrs.get("Config", {}).get("User") or "0")
        self._ours = self.image in {images.image_tag(n) for n in images.IMAGES}
        # skyhub's images as their own user: every writable place is a sized tmpfs
        self._tmpfs = self._ours and self.user == "sandbox" and tmpfs_fits(self.workdir)
        self._python: str | None = "/usr/bin/python3" if self._ours else None
        self._home: str | None = HOME if self._tmpfs else None
        self._fsize: int | None = None if self._tmpfs else self.disk_mb << 20
        self._places: list[str] = []  # restored besides the workdir
        self._clear: list[str] = []   # emptied by a restore (message queue mounts)
        self._in_place = True         # False: a restore replaces the container
        #: how many times the guest was found gone and the container replaced (see `exec`)
        self.replaced = 0
        self.labels = base.owner_labels(pool)
        self.name = f"skyhub-{self.id}"
        self.privileges = privileges
        self._spec = container_spec(
            name=self.name, labels=self.labels, workdir=self.workdir, network=network,
            cpus=cpus, memory_mb=memory_mb, pids=pids, disk_mb=self.disk_mb,
            privileges=privileges, env=env, volumes=volumes, entrypoint=entrypoint,
            tmpfs=self._tmpfs)
        self._command = list(command) if command else ["sleep", "infinity"]
        self._own_workdir = own_workdir
        self._create_container()

    def _create_container(self) -> None:
        """Create and start the container, then set it up (`_setup`); SandboxUnavailable
        when Docker cannot. Within the process's creation limits (`ratelimit`: a token
        bucket and a cap on creations in flight), so a burst reaches dockerd spaced."""
        from skyhub.sandbox.ratelimit import container_creation

        with container_creation():
            self._create_container_now()

    def _create_container_now(self) -> None:
        import docker.errors

        spec = dict(self._spec)
        if not self._tmpfs and storage_opt_supported(self.client):
            spec["storage_opt"] = {"size": f"{self.disk_mb}m"}
        try:
            try:
                self.container = self.client.containers.create(self.image, self._command,
                                                               **spec)
            except docker.errors.APIError as e:
                if "storage_opt" not in spec or "storage" not in str(e).lower():
                    raise
                storage_opt_refused(self.client)  # e.g. xfs without pquota
                spec.pop("storage_opt")
                self.container = self.client.containers.create(self.image, self._command,
                                                               **spec)
        except Exception as e:
            raise SandboxUnavailable(f"cannot create a container from {self.image}: {e}") from e
        self._closed = False
        try:
            self.container.start()
            self._setup()
        except docker.errors.DockerException as e:
            self.close()
            raise SandboxUnavailable(f"cannot start a sandbox from {self.image}: {e}") from e
        except BaseException:
            self.close()
            raise

    # -- setup -------------------------------------------------------------------------
    def _root(self, argv: list[str], user: str = "0") -> tuple[int, str]:
        r = self.container.exec_run(argv, user=user)
        return r.exit_code, (r.output or b"").decode("utf-8", "replace")

    def _setup(self) -> None:
        """Copy the guest in (foreign images), make the workdir the run user's, start the guest
        (or the exec fallback), find the places a restore puts back and note which pids
        `kill_all` must spare."""
        if not self._ours:
            self.container.put_archive("/", guest_setup_tar())
            if self._python is None:
                code, out = self._root(["sh", "-c", FIND_PYTHON])
                self._python = out.strip().splitlines()[-1] if code == 0 and out.strip() \
                    else ""
        writable = True
        if self._tmpfs:
            self._uid = self._gid = 1000  # as the Dockerfile and the tmpfs mounts made it
        else:
            out = self._root(["sh", "-c", 'id -u; id -g; test -w "$1" && echo w || echo -; '
                              'printf "%s\\n" "$HOME"', "sh", self.workdir],
                             user=self.user)[1].splitlines()
            if len(out) >= 2 and out[0].isdigit() and out[1].isdigit():
                self._uid, self._gid = int(out[0]), int(out[1])
            writable = len(out) > 2 and out[2] == "w"
            if len(out) > 3 and out[3].startswith("/"):
                self._home = out[3]
        parent, leaf = posixpath.split(self.workdir)
        if not writable and leaf and self._own_workdir:
            # Docker created the workdir as root; the daemon can give it to the run user
            # (root in the container has no CAP_CHOWN)
            self.container.put_archive(parent, tar_dir_entry(leaf, uid=self._uid,
                                                             gid=self._gid))
        if self._python:
            self._start_guest()
            uid = self._chan.uid if self._chan else 0
            if self._tmpfs:  # $HOME is an empty tmpfs: what `useradd --create-home` put there
                self._request({"op": "exec", "cmd": ["cp", "-a", "/etc/skel/.", HOME],
                               "timeout": 60, "cwd": "/", "env": None, "stdin": None,
                               "max_output": 4096}, 90)
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
        self._find_places(uid)

    def _find_places(self, uid: int) -> None:
        """Which places besides the workdir a restore puts back, and whether it can do so in
        place (see `docker_layout`)."""
        if self._fallback is not None or uid == 0:
            self._places, self._clear, self._in_place = [], [], False
        elif self._tmpfs:
            self._places, self._clear, self._in_place = tmpfs_places(self.workdir)
        else:
            found = image_places(
                (self._image_id, self.user, self.workdir),
                lambda: self._request({"op": "places"}, 600))
            self._places, self._clear, self._in_place = restore_plan(found, self.workdir)

    def _start_guest(self) -> GuestChannel:
        import docker.errors

        try:
            chan = GuestChannel(self.client.api, self.container.id, self.user, self.workdir,
                                python=self._python or "python3", home=self._home,
                                max_reply=self.max_reply)
        except docker.errors.DockerException as e:
            self._check_container()
            raise InfraError(f"cannot start the guest in sandbox {self.name}: {e}") from e
        try:
            pong = chan.request({"op": "ping"}, 60)
        except ChannelBroken as e:
            chan.close()
            self._check_container()
            raise InfraError(f"the guest in sandbox {self.name} did not start ({e}); "
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

    def _drop_guest(self, kill: bool = False) -> None:
        chan, self._chan = self._chan, None
        if chan is not None:
            chan.close()
            if kill and chan.pid:  # a hung guest must not keep running a command
                with contextlib.suppress(Exception):
                    self._root(["kill", "-9", str(chan.pid)], user=self.user)

    def _request(self, req: dict[str, Any], timeout: float | None,
                 idempotent: bool = True, max_bytes: int | None = None) -> dict[str, Any] | None:
        """Send one request to the guest. A broken channel replaces the container once (see
        the module docstring): idempotent requests are retried there, others return None
        (the command's fate is unknown). A reply over `max_bytes` (default: `max_reply`)
        breaks the channel."""
        self._check_open()
        with self._lock:
            for attempt in range(2):
                chan = self._chan
                if chan is None or chan.stale():
                    # never a second guest in a container whose commands may still run: one
                    # could open the new guest's stdin and stdout (/proc/<pid>/fd, same uid)
                    # before it turns undumpable and answer for it, and in a root image the
                    # guest's code and Python itself are the agent's to rewrite
                    self._drop_guest()
                    self._replace_container()
                    chan = self._chan
                    if chan is None:  # the new container's guest did not start
                        raise InfraError(f"the guest of sandbox {self.name} did not start in "
                                         "its new container")
                try:
                    reply = chan.request(req, timeout, max_bytes)
                except ReplyTooLarge as e:
                    self._drop_guest(kill=True)  # the rest of the reply is still on its way
                    if not idempotent:
                        return None
                    raise OSError(errno.EFBIG, f"sandbox {self.name}: {e} (what {req['op']!r} "
                                  "returns is bounded by max_reply_mb, disk_mb and "
                                  "memory_mb)") from e
                except ChannelTimeout as e:
                    self._drop_guest(kill=True)
                    self._check_container()
                    raise InfraError(f"the guest in sandbox {self.name} did not answer a "
                                     f"{req['op']!r} request within {timeout} s") from e
                except ChannelBroken as e:
                    self._drop_guest()
                    self._check_container()
                    if not idempotent:
                        return None
                    if attempt:
                        raise InfraError(f"the guest in sandbox {self.name} keeps failing: "
                                         f"{e}") from e
                    continue
                if not reply.get("ok"):
                    raise reply_error(reply, req["op"])
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
            return ExecResult.from_guest(self._fallback.run(
                argv, timeout=timeout, cwd=wd, env=env, stdin=data, max_output=self.max_output))
        start = time.monotonic()
        reply = self._request(
            {"op": "exec", "cmd": cmd if isinstance(cmd, str) else [str(a) for a in cmd],
             "timeout": timeout, "cwd": wd, "env": env, "max_output": self.max_output,
             "stdin": None if data is None else base64.b64encode(data).decode("ascii"),
             **({} if self._fsize is None else {"fsize": self._fsize})},
            None if timeout is None else timeout + 30, idempotent=False)
        if reply is None:
            return ExecResult(137, "", "skyhub: the sandbox agent was killed (e.g. by `kill -9 "
                              "-1`) or its channel broke while running this command; the "
                              "sandbox is replaced by a fresh container of its image for the "
                              "next one (files and processes of earlier commands are gone)\n",
                              False, time.monotonic() - start)
        reply["stdout"] = base64.b64decode(reply["stdout"])
        reply["stderr"] = base64.b64decode(reply["stderr"])
        return ExecResult.from_guest(reply)

    def spawn(self, argv: list[str], env: dict[str, str] | None = None,
              cwd: str | None = None) -> base.Channel:
        """Start a long-running process as the sandbox's user (see `Sandbox.spawn`), attached
        through Docker's exec API like the guest; it ends when its stdin closes."""
        import docker.errors

        self._check_open()
        try:
            return GuestChannel(self.client.api, self.container.id, self.user,
                                self._path(cwd) if cwd else self.workdir,
                                argv=self._bounded(argv), env=env, max_reply=self.max_reply)
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
                              self._path(cwd) if cwd else self.workdir, self._bounded(argv),
                              env)
        except docker.errors.DockerException as e:
            self._check_container()
            raise InfraError(f"cannot start {argv[0]!r} in sandbox {self.name}: {e}") from e

    def _bounded(self, argv: list[str]) -> list[str]:
        """`argv` under the sandbox's file size bound, where no tmpfs bounds its disk."""
        argv = [str(a) for a in argv]
        if self._fsize is None or not self._python:
            return argv
        return [self._python, "-I", "-c", WITH_FSIZE, str(self._fsize), *argv]

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
            return base64.b64decode(self._request(
                {"op": "read", "path": target, "max_bytes": self._max_file}, 600,
                max_bytes=self.max_transfer)["data"])
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
        data = tar_owned(src, self._uid, self._gid)
        if self._fallback is not None:
            self._fallback.put(target, data)
            return
        self._request({"op": "untar", "path": target,
                       "data": base64.b64encode(data).decode("ascii")}, 600)

    def download(self, src: str, dest: str | Path) -> None:
        """A directory's contents go into the host directory `dest`; a file to
        `dest/<its name>`. The archive is untrusted (the agent made the tree; in a root image
        it can rewrite the guest's code, which is why a guest never restarts in the same
        container): `skyhub.sandbox.extract` writes it without following any link and leaves
        out links leaving the tree and special files (logged)."""
        target = self._path(src)
        name = posixpath.basename(target) or "root"
        if self._fallback is not None:
            prefix, data = self._fallback.archive(target)
        else:
            prefix = "."
            # the guest refuses (EFBIG) a tree over the budget rather than break the channel
            data = base64.b64decode(self._request(
                {"op": "tar", "path": target, "max_bytes": self.max_transfer}, 600,
                max_bytes=self.max_transfer)["data"])
        extract_as(data, prefix, name, Path(dest))

    # -- state -------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Save the workdir and every other place a restore puts back (see `docker_layout`),
        as tars in a root-owned directory of the container."""
        snap = Snapshot(id=base.new_id("snap"), sandbox_id=self.id)
        files = [[self.workdir, f"{SNAPSHOT_DIR}/{snap.id}.tar"]]
        if self._fallback is not None:
            self._fallback.sh('mkdir -p "$1" && tar -C "$2" -cf "$1/$3.tar" .', SNAPSHOT_DIR,
                              self.workdir, snap.id, user="0")
        else:
            paths = [self.workdir, *self._places]
            reply = self._request({"op": "tars", "paths": paths,
                                   "max_bytes": self.max_transfer}, 600,
                                  max_bytes=self.max_transfer)
            tars = [(f"{snap.id}.tar", base64.b64decode(reply["data"][0] or ""))]
            for i, (path, data) in enumerate(zip(paths, reply["data"], strict=True)):
                if i and data is not None:  # a place that is not there is not restored
                    tars.append((f"{snap.id}.{i}.tar", base64.b64decode(data)))
                    files.append([path, f"{SNAPSHOT_DIR}/{snap.id}.{i}.tar"])
            # written by the daemon as root 0644: readable by the agent, not changeable by it
            self.container.put_archive(SNAPSHOT_DIR, tar_files(tars))
        self._snaps[snap.id] = files
        if self._uid == 0:  # root in the container can rewrite them there: keep our copy
            stream, _ = self.container.get_archive(SNAPSHOT_DIR)
            self._snap_archive = b"".join(stream)
        return snap

    # copying the places into another sandbox (a fork): `docker_places`
    places_kind, export_places, import_places = (docker_places.places_kind,
                                                 docker_places.export_places,
                                                 docker_places.import_places)

    def restore(self, snap: Snapshot, *, kill_processes: bool = True) -> None:
        """Put back the workdir and, with `kill_processes`, every other writable place, after
        killing every process of the sandbox's user (see `docker_layout` for how, and when the
        container is replaced instead). A restore that fails in place (a tree the
        agent cannot take apart, a broken agent) replaces the container too; InfraError
        only when Docker cannot."""
        if snap.sandbox_id != self.id or snap.id not in self._snaps:
            raise UsageError(f"snapshot {snap.id} was taken of sandbox {snap.sandbox_id}, not of"
                             f" {self.id}; restore it on the sandbox that took it")
        self._check_open()
        if kill_processes and not self._in_place:
            self._recreate()
        try:
            self._restore(self._snaps[snap.id], kill_processes)
        except (InfraError, OSError) as e:
            if not kill_processes:
                raise
            log.warning("sandbox %s: restore in place failed (%s); replacing its container",
                        self.name, e)
            self._recreate()
            self._restore(self._snaps[snap.id], kill_processes)

    def _restore(self, files: list[list[str]], kill_processes: bool) -> None:
        if self._fallback is not None:
            if kill_processes:
                self._fallback.kill_all(self._keep)
            self._fallback.restore(posixpath.basename(files[0][1])[:-4], self.workdir)
            return
        if kill_processes:  # first, so nothing writes into a place while it is restored
            self._request({"op": "kill_all", "keep": self._keep}, 60)
        self._request({"op": "restore", "places": files if kill_processes else files[:1],
                       "clear": self._clear if kill_processes else [], "ipc": kill_processes,
                       "kill_processes": kill_processes, "keep": self._keep}, 600)

    def _replace_container(self) -> None:
        """The guest is gone (a command killed it, its channel broke or hung): replace the
        container, keeping the snapshots (what a restore that cannot work in place does).
        The guest only ever starts in a container no command has run in yet. InfraError
        when the container was stopped or removed (from outside: not ours to bring back)."""
        self._check_container()
        log.warning("sandbox %s: its guest is gone (killed by a command, or its channel "
                    "broke); replacing its container with a fresh one of %s", self.name,
                    self.image)
        self._recreate()
        self.replaced += 1

    def _recreate(self) -> None:
        """Replace the container by a new one from the image (same name, labels, limits),
        keeping the snapshots: a clean state whatever the last user changed."""
        import docker.errors

        try:
            snaps = self._snap_archive
            if snaps is None:  # root-owned in the container, out of the run user's reach
                stream, _ = self.container.get_archive(SNAPSHOT_DIR)
                snaps = b"".join(stream)
            self._drop_guest()
            self._fallback = None
            with contextlib.suppress(docker.errors.NotFound):
                self.container.remove(force=True, v=True)
            self._create_container()
            self.container.put_archive(posixpath.dirname(SNAPSHOT_DIR), snaps)
        except (docker.errors.DockerException, SandboxUnavailable) as e:
            raise InfraError(f"cannot replace the container of sandbox {self.name} for a "
                             f"restore: {e}") from e

    # -- lifecycle ---------------------------------------------------------------------
    def _close(self) -> None:
        import docker.errors

        chan, self._chan = self._chan, None
        if chan is not None:
            chan.close()
        if hasattr(self, "container"):
            with contextlib.suppress(docker.errors.NotFound):
                self.container.remove(force=True, v=True)


__all__ = ["DockerSandbox"]
