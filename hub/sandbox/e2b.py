"""The `e2b` backend: sandboxes in E2B's cloud (Firecracker microVMs), through the E2B SDK.

    sb = skyhub.sandbox.create(backend="e2b", image="base")   # needs E2B_API_KEY

What differs from docker/local, and why:
- `image` (or `template`) names an E2B *template*, not a Docker image (default "base"; build
  your own from a Dockerfile with `e2b template build`). CPU and memory are fixed per
  template by E2B, so `cpus`/`memory_mb` are ignored with a warning when not the defaults.
- `workdir` (default /work) is created as root and given to the sandbox's user ("user", E2B's
  default), because E2B images only let that user write under /home/user and /tmp.
- `network=False` asks E2B to deny all outbound traffic (`allow_internet_access=False`).
- `snapshot`/`restore` tar the workdir inside the VM, like the other backends. E2B's own
  pause/resume cannot serve as a restore point: resuming returns to the *last* pause, so
  after further changes there is no way back to an earlier state, which is exactly what a
  pool needs on every lease. E2B's persistent snapshots could, but each restore would boot a
  new VM and leave billable snapshots behind if the process crashed. `pause()`/`resume()`
  are offered separately, to park an idle sandbox (memory and files kept, not billed).
- `restore(kill_processes=True)` kills every process of the sandbox's user, including any
  service a custom template started as that user (E2B's own agent, envd, runs as root).
- `pids` is applied per command with `ulimit -u`; timeouts with the VM's coreutils
  `timeout` (so a template needs coreutils, as E2B's Debian-based ones have).
- The VM's lifetime is capped by E2B (`timeout_s`, default 3600 s; E2B kills it then), so a
  crashed owner's sandbox disappears on its own; `reap()` removes such orphans sooner.

The SDK is imported only when a sandbox is made: importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import os
import posixpath
import shlex
import socket
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from skyhub.errors import (
    InfraError,
    SandboxSDKMissing,
    SandboxUnavailable,
    SkyhubError,
    UsageError,
)
from skyhub.sandbox.base import (
    DEFAULT_MAX_OUTPUT,
    DEFAULT_PIDS,
    LABEL,
    LABEL_CREATED,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    ExecResult,
    Sandbox,
    Snapshot,
    as_bytes,
    new_id,
    owner_labels,
    pid_alive,
)
from skyhub.sandbox.extract import extract
from skyhub.sandbox.guest.procs import Capped
from skyhub.sandbox.guest.tars import tar_bytes

DEFAULT_TEMPLATE = "base"
DEFAULT_USER = "user"  # E2B's default (unprivileged, passwordless sudo) user
TMP_DIR = "/tmp/.skyhub-e2b"  # stdin files, transfer tars and snapshots, inside the VM
#: Kills every process of the sandbox's user except the shell running it (Linux's kill(-1)
#: spares the caller); envd, E2B's in-VM agent, runs as root and survives. Never run as root.
KILL_ALL = "kill -9 -1 2>/dev/null; true"
GRACE_S = 10.0  # the SDK's stream deadline, past the in-VM `timeout`, in case that one fails
NOT_FOUND_RC = 44  # our scripts' exit code for "no such path"

NO_KEY = ("the e2b sandbox backend needs an E2B API key: set E2B_API_KEY (from the E2B dashboard, "
          "https://e2b.dev/dashboard?tab=keys) or pass api_key=...; or use backend='docker' "
          "or backend='local', which need no account")

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"skyhub e2b sandbox: {message}", stacklevel=3)


def _q(path: str) -> str:
    return shlex.quote(path)


class E2BSandbox(Sandbox):
    """A sandbox in an E2B microVM. See the module docstring for how it differs from docker."""

    backend = "e2b"

    def __init__(self, image: str | None = None, *, cpus: float = 1.0, memory_mb: int = 1024,
                 network: bool = False, workdir: str = "/work", pids: int = DEFAULT_PIDS,
                 max_output: int = DEFAULT_MAX_OUTPUT, pool: str | None = None,
                 template: str | None = None, api_key: str | None = None,
                 timeout_s: float = 3600, user: str = DEFAULT_USER,
                 _sdk_sandbox: Any = None) -> None:
        """`_sdk_sandbox`: an already made SDK sandbox to drive (tests inject a stand-in)."""
        self._sdk: Any = None
        super().__init__(workdir=workdir, max_output=max_output)
        if image and template and image != template:
            raise UsageError(f"image={image!r} and template={template!r} disagree; for e2b "
                             "they name the same thing (an E2B template): pass one")
        self.template = template or image or DEFAULT_TEMPLATE
        self.user, self.pids, self.timeout_s = user, pids, timeout_s
        self.labels = owner_labels(pool)
        self._paused = False
        if cpus != 1.0 or memory_mb != 1024:
            _warn_once("limits", f"cpus={cpus} memory_mb={memory_mb} ignored: E2B fixes CPU "
                                 "and memory per template (cpu_count/memory_mb when building it)")
        self._sdk = _sdk_sandbox or _create_sdk_sandbox(
            self.template, api_key, network, self.labels, timeout_s)
        self.sandbox_id: str = str(getattr(self._sdk, "sandbox_id", ""))
        try:
            self._prepare_workdir()
        except InfraError as e:
            self.close()
            raise SandboxUnavailable(f"the E2B sandbox was made but does not answer: {e}") from e
        except BaseException:
            self.close()
            raise

    # -- commands ----------------------------------------------------------------------
    def exec(self, cmd: str | list[str], timeout: float | None = 30, cwd: str | None = None,
             env: dict[str, str] | None = None, stdin: str | bytes | None = None) -> ExecResult:
        """Run `cmd` with /bin/sh in the workdir (or `cwd`). The VM's coreutils `timeout`
        SIGKILLs the command's process group at `timeout` (exit 137, `timed_out=True`); the
        SDK's own deadline, `GRACE_S` later, is only a backstop."""
        from e2b import CommandExitException, TimeoutException

        sdk = self._ready()
        text = cmd if isinstance(cmd, str) else shlex.join([str(a) for a in cmd])
        stdin_path = None
        if stdin is not None:  # envd's stdin is a stream of RPCs: a file is simpler and exact
            stdin_path = f"{TMP_DIR}/stdin-{new_id('in')}"
            with self._sdk_errors("writing stdin"):
                sdk.files.write(stdin_path, as_bytes(stdin), user=self.user)
        run = f"/bin/sh -c {_q(text)} < {_q(stdin_path) if stdin_path else '/dev/null'}"
        if timeout is not None:
            run = f"timeout -s KILL {max(timeout, 0.001):g} {run}"
        script = (f"ulimit -u {int(self.pids)} 2>/dev/null; "
                  f"cd -- {_q(self._path(cwd) if cwd else self.workdir)} || exit 1; {run}")
        if stdin_path:
            script += f"; rc=$?; rm -f -- {_q(stdin_path)}; exit $rc"
        out, err = Capped(self.max_output), Capped(self.max_output)
        timed_out = False
        start = time.monotonic()
        with self._sdk_errors("exec"):
            handle = sdk.commands.run(
                script, background=True, envs=env or None, user=self.user,
                timeout=0 if timeout is None else timeout + GRACE_S, **_no_retain(sdk))
            try:
                code = handle.wait(on_stdout=lambda s: out.add(s.encode()),
                                   on_stderr=lambda s: err.add(s.encode())).exit_code
            except CommandExitException as e:
                code = e.exit_code
            except _gone_errors():
                raise  # the VM died or is unreachable: not a command timeout
            except TimeoutException:
                timed_out, code = True, 137
                with contextlib.suppress(Exception):
                    handle.kill()
        duration = time.monotonic() - start
        if timeout is not None and code == 137 and duration >= timeout:
            timed_out = True
        return ExecResult(int(code), out.value().decode("utf-8", errors="replace"),
                          err.value().decode("utf-8", errors="replace"), timed_out, duration)

    # -- files -------------------------------------------------------------------------
    def write_file(self, path: str, data: str | bytes, mode: int | None = None) -> None:
        p = self._path(path)
        with self._sdk_errors(f"writing {p}"):
            self._ready().files.write(p, as_bytes(data), user=self.user)
        if mode is not None:
            self._run(f"chmod {mode:o} -- {_q(p)}")

    def read_file(self, path: str) -> bytes:
        from e2b import NotFoundException

        p = self._path(path)
        with self._sdk_errors(f"reading {p}"):
            try:
                return bytes(self._ready().files.read(p, format="bytes", user=self.user))
            except NotFoundException as e:
                raise FileNotFoundError(errno.ENOENT, f"no such file in e2b sandbox "
                                                      f"{self.sandbox_id}", p) from e

    def upload(self, src: str | Path, dest: str | None = None) -> None:
        """A directory's contents go into `dest`; a file goes to `dest/<its name>`. Both
        travel as one tar (modes kept), so a tree costs two calls, not one per file."""
        src = Path(src)
        if not src.exists():
            raise FileNotFoundError(errno.ENOENT, "no such file to upload", str(src))
        target = self._path(dest) if dest else self.workdir
        data = tar_bytes(str(src), arcname="." if src.is_dir() else src.name)
        tmp = f"{TMP_DIR}/xfer-{new_id('up')}.tar"
        with self._sdk_errors(f"uploading {src}"):
            self._ready().files.write(tmp, data, user=self.user)
        self._run(f"mkdir -p -- {_q(target)} && tar -xf {_q(tmp)} -C {_q(target)} "
                  f"--no-same-owner; rc=$?; rm -f -- {_q(tmp)}; exit $rc")

    def download(self, src: str, dest: str | Path) -> None:
        """A directory's contents go into the host directory `dest`; a file to
        `dest/<its name>`. Links leaving the tree, device files and FIFOs are left out (and
        logged): see `skyhub.sandbox.extract`."""
        p = self._path(src)
        tmp = f"{TMP_DIR}/xfer-{new_id('down')}.tar"
        parent, name = posixpath.split(p)
        code, _, _ = self._run(
            f"[ -e {_q(p)} ] || exit {NOT_FOUND_RC}; mkdir -p {TMP_DIR}; if [ -d {_q(p)} ]; "
            f"then tar -cf {_q(tmp)} -C {_q(p)} .; else tar -cf {_q(tmp)} -C {_q(parent or '/')} "
            f"-- {_q(name)}; fi", ok=(0, NOT_FOUND_RC))
        if code == NOT_FOUND_RC:
            raise FileNotFoundError(errno.ENOENT, f"no such path in e2b sandbox "
                                                  f"{self.sandbox_id}", p)
        try:
            data = self.read_file(tmp)
        finally:
            self._run(f"rm -f -- {_q(tmp)}", ok=None)
        # the VM's tar and its content are untrusted on the host: never tarfile's extraction
        extract(data, dest)

    # -- state -------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Tar the workdir to the VM's /tmp (files only, not processes: see module doc)."""
        snap = Snapshot(id=new_id("snap"), sandbox_id=self.id)
        self._run(f"mkdir -p {TMP_DIR} && tar -cf {_q(self._snap_file(snap))} "
                  f"-C {_q(self.workdir)} .")
        return snap

    def restore(self, snap: Snapshot, *, kill_processes: bool = True) -> None:
        if snap.sandbox_id != self.id:
            raise UsageError(f"snapshot {snap.id} belongs to sandbox {snap.sandbox_id}, "
                             f"not {self.id}")
        if kill_processes and self.user != "root":  # as root, kill(-1) would take envd too
            self._run(KILL_ALL, ok=None)
        f, w = _q(self._snap_file(snap)), _q(self.workdir)
        code, _, _ = self._run(
            f"[ -f {f} ] || exit {NOT_FOUND_RC}; find {w} -mindepth 1 -maxdepth 1 "
            f"-exec rm -rf -- {{}} + && tar -xf {f} -C {w}", ok=(0, NOT_FOUND_RC))
        if code == NOT_FOUND_RC:
            raise SkyhubError(f"snapshot {snap.id} is gone from e2b sandbox {self.sandbox_id} "
                              "(was its /tmp cleared?); take a new one")

    def pause(self) -> None:
        """Park the sandbox: E2B keeps its memory and files and stops billing it. The next
        call on it resumes it (about a second). Not a restore point: see the module doc."""
        sdk = self._ready()
        with self._sdk_errors("pausing"):
            (getattr(sdk, "pause", None) or sdk.beta_pause)()
        self._paused = True

    def resume(self) -> None:
        """Resume a paused sandbox now (any other call does it too)."""
        self._check_open()
        if self._paused:
            with self._sdk_errors("resuming"):
                self._sdk = self._sdk.connect(timeout=int(self.timeout_s)) or self._sdk
            self._paused = False

    # -- lifecycle ---------------------------------------------------------------------
    def _close(self) -> None:
        if self._sdk is not None:
            self._sdk.kill()

    # -- helpers -----------------------------------------------------------------------
    def _ready(self) -> Any:
        self._check_open()
        if self._paused:
            self.resume()
        return self._sdk

    def _snap_file(self, snap: Snapshot) -> str:
        return f"{TMP_DIR}/{snap.id}.tar"

    def _prepare_workdir(self) -> None:
        code, _, _ = self._run(f"mkdir -p -- {_q(self.workdir)} {TMP_DIR}", ok=None)
        if code != 0:  # e.g. /work: only root may create it in E2B's images
            self._run(f"mkdir -p -- {_q(self.workdir)} && chown {_q(self.user)}: "
                      f"{_q(self.workdir)}", user="root")  # (mkdir made TMP_DIR all the same)

    def _run(self, script: str, *, user: str | None = None,
             ok: tuple[int, ...] | None = (0,)) -> tuple[int, str, str]:
        """One of our own commands; an exit code outside `ok` is an InfraError (`ok=None`
        accepts any)."""
        from e2b import CommandExitException

        with self._sdk_errors("running a command"):
            try:
                r = self._ready().commands.run(script, user=user or self.user, timeout=300)
                code, out, err = 0, r.stdout or "", r.stderr or ""
            except CommandExitException as e:
                code, out, err = e.exit_code, e.stdout or "", e.stderr or ""
        if ok is not None and code not in ok:
            raise InfraError(f"e2b sandbox {self.sandbox_id}: `{script}` exited {code}: "
                             f"{err.strip()[-500:]}")
        return code, out, err

    @contextlib.contextmanager
    def _sdk_errors(self, what: str) -> Iterator[None]:
        """SDK and transport failures (the VM died, E2B unreachable) become InfraError, so
        an episode hit by one is masked rather than scored."""
        try:
            yield
        except (SkyhubError, FileNotFoundError):
            raise
        except Exception as e:
            raise InfraError(
                f"e2b sandbox {self.sandbox_id}: {what} failed: {type(e).__name__}: {e}. It "
                f"may have outlived timeout_s={self.timeout_s:g} or E2B is unreachable; "
                "create a new sandbox") from e


def _create_sdk_sandbox(template: str, api_key: str | None, network: bool,
                        labels: dict[str, str], timeout_s: float) -> Any:
    key = api_key or os.environ.get("E2B_API_KEY")
    if not key:  # checked before any import or network call, so it fails at once
        raise SandboxUnavailable(NO_KEY)
    try:
        from e2b import Sandbox as SDKSandbox
    except ImportError as e:
        raise SandboxSDKMissing("the e2b sandbox backend needs the E2B SDK: "
                                "pip install 'skyhub[e2b]'") from e
    kwargs: dict[str, Any] = {"template": template, "timeout": int(timeout_s),
                              "metadata": dict(labels), "api_key": key}
    if "allow_internet_access" in inspect.signature(SDKSandbox.create).parameters:
        kwargs["allow_internet_access"] = bool(network)
    elif not network:
        _warn_once("network", "this E2B SDK cannot turn networking off; the sandbox has "
                              "internet access (upgrade e2b to get network=False)")
    try:
        return SDKSandbox.create(**kwargs)
    except Exception as e:
        raise SandboxUnavailable(
            f"could not create an E2B sandbox from template {template!r}: {type(e).__name__}: "
            f"{e}. Check E2B_API_KEY, that this machine reaches E2B (api.e2b.app, or "
            "E2B_DOMAIN when self-hosted) and that the template exists (`e2b template list`); "
            "or use backend='docker' or backend='local'") from e


def _no_retain(sdk: Any) -> dict[str, bool]:
    """Ask the SDK not to keep its own full copy of the output (ours is capped), where this
    SDK version knows how."""
    params = inspect.signature(sdk.commands.run).parameters
    return {"retain_output": False} if "retain_output" in params else {}


def _gone_errors() -> tuple[type[BaseException], ...]:
    """The SDK's "sandbox is gone" errors, which subclass its TimeoutException."""
    import e2b

    names = ("SandboxNotRunningException", "SandboxUnreachableException")
    return tuple(getattr(e2b, n) for n in names if hasattr(e2b, n))


def reap(older_than_s: float = 0.0, *, dry_run: bool = False,
         api_key: str | None = None) -> list[str]:
    """Kill E2B sandboxes made on this host by a process that is gone, created more than
    `older_than_s` seconds ago; returns their E2B ids. Without a key there is nothing to do."""
    key = api_key or os.environ.get("E2B_API_KEY")
    if not key:
        return []
    from e2b import Sandbox as SDKSandbox
    from e2b import SandboxQuery

    query = SandboxQuery(metadata={LABEL: "1", LABEL_OWNER_HOST: socket.gethostname()})
    try:
        pages = SDKSandbox.list(query=query, api_key=key)
        infos = []
        while pages.has_next:
            infos += pages.next_items()
    except Exception as e:
        raise SandboxUnavailable(f"cannot list E2B sandboxes to reap: {type(e).__name__}: "
                                 f"{e}") from e
    removed = []
    for info in infos:
        meta = info.metadata or {}
        pid = meta.get(LABEL_OWNER_PID, "")
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        with contextlib.suppress(ValueError):
            if time.time() - float(meta.get(LABEL_CREATED, "")) < older_than_s:
                continue
        if not dry_run:
            SDKSandbox.kill(info.sandbox_id, api_key=key)
        removed.append(info.sandbox_id)
    return removed
