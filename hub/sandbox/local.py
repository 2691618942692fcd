"""The `local` sandbox backend: a scratch directory and subprocesses on this machine.

Each sandbox is `<base>/sb-<id>/` (base: `$SKYHUB_SANDBOX_DIR`, else
`<tempdir>/skyhub-sandboxes`, with `-<uid>` appended for non-root users) holding `work/` (the
agent's workdir), `label.json` (owner pid, host, creation time, pool: what `reap` reads; kept
outside the workdir so the agent cannot forge it), `snapshots/` and, without bubblewrap, `tmp/`.

With `bwrap` each command runs in fresh namespaces: `--unshare-all` (only a private loopback,
so host ports are unreachable, unless `network=True`), read-only /usr, /bin, /lib*, /etc, its
own /proc, /dev and tmpfs /tmp, the workdir bound at `workdir` (/work), and a pid namespace
whose death (end of the command, timeout, or our own death via `--die-with-parent`) kills
every process in it. Background processes therefore never outlive the `exec` that started
them (`spawn` starts the exception: a long-running process that ends when its stdin closes).
`mounts={"/opt/x": "/host/path"}` adds read-only binds (with bwrap only; without it the host's
paths are visible as they are). Without bwrap (`isolation="none"`, or "auto" when bwrap is
missing, with a one-time warning) commands run on the host in the scratch dir: weak
isolation, for development only.

Which limits hold (verified on Debian 12, kernel 6.18, bwrap 0.8: as root, and as a plain
user with and without bwrap):
- memory: RLIMIT_AS = `memory_mb` (address space), always. Allocations past it fail
  (MemoryError, malloc NULL), so a hog dies or exits non-zero; programs that reserve much
  more virtual memory than they use (JVM, some Go/Rust runtimes) need a larger `memory_mb`.
- processes (`pids`): RLIMIT_NPROC, which the kernel counts per real uid and ignores for
  root. As root each sandbox therefore runs as its own unprivileged uid (1.9e9 + random),
  which makes the count exactly the sandbox's processes and lets us kill them all. As
  non-root with bwrap the limit is set inside the new user namespace (`prlimit`), where the
  count is again just the sandbox's. As non-root without bwrap it is "your processes + pids":
  best effort.
- wall time: `exec(timeout=)` kills the process tree (with bwrap: the whole pid namespace).
- cpus: the command is pinned to ceil(cpus) cores (sched_setaffinity); no CPU-time quota.
- core dumps are off (RLIMIT_CORE=0). Disk use is not limited.
File operations (`write_file`, `read_file`, `upload`, `download`) act on the scratch dir from
the host, resolving symlinks as the sandbox would and refusing any path that leaves the workdir.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import posixpath
import random
import resource
import shutil
import stat
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path

from skyhub.errors import SandboxUnavailable, UsageError
from skyhub.sandbox import agent
from skyhub.sandbox import base as _b
from skyhub.sandbox.base import ExecResult, Sandbox, Snapshot, as_bytes
from skyhub.sandbox.local_scratch import (
    ENV_DIR,
    LABEL_FILE,
    LABEL_ID,
    LABEL_OWNER_START,
    LABEL_UID,
    MARKER_ENV,
    base_dir,
    drop_to,
    free_uid,
    kill_sandbox,
    list_sandboxes,
    make_base,
    proc_uids,
    reap,
    rmtree,
    start_time,
)

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_RO_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_warned_weak = False
_bwrap_checked: dict[bool, str] = {}  # as root? -> "" when bwrap works, else why not


def find_bwrap() -> str | None:
    return shutil.which("bwrap")


def _warn_weak(why: str) -> None:
    global _warned_weak
    if not _warned_weak:
        _warned_weak = True
        warnings.warn(f"skyhub local sandboxes run without isolation ({why}): commands see the "
                      "host's files and network. Install bubblewrap (apt-get install "
                      "bubblewrap) for real isolation.", RuntimeWarning, stacklevel=3)


def _bwrap_problem(bwrap: str, uid: int | None) -> str:
    """Why bwrap cannot make namespaces here (e.g. user namespaces are disabled), or ""."""
    key = uid is not None
    if key not in _bwrap_checked:
        try:
            r = subprocess.run([bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/",
                                "/", "true"], capture_output=True, timeout=30,
                               preexec_fn=lambda: drop_to(uid))
            why = "" if r.returncode == 0 else r.stderr.decode(errors="replace").strip()
        except (OSError, subprocess.SubprocessError) as e:
            why = str(e)
        _bwrap_checked[key] = why or ""
    return _bwrap_checked[key]


def _check_mounts(mounts: dict[str, str], workdir: str) -> dict[str, str]:
    """Validate `{sandbox path: host path}` read-only mounts."""
    out = {}
    for inside, host in mounts.items():
        inside = posixpath.normpath(str(inside))
        if not posixpath.isabs(inside):
            raise ValueError(f"mount target {inside!r} must be an absolute sandbox path")
        if inside == workdir or inside.startswith(workdir.rstrip("/") + "/") or \
                workdir.startswith(inside.rstrip("/") + "/"):
            raise ValueError(f"mount target {inside!r} overlaps the workdir {workdir}; mount "
                             "elsewhere (e.g. under /opt)")
        if not os.path.exists(host):
            raise FileNotFoundError(errno.ENOENT, "no such host path to mount", str(host))
        out[inside] = os.path.abspath(host)
    return out


class LocalSandbox(Sandbox):
    """A sandbox on this machine; see the module docstring for what isolates it and how."""

    backend = "local"

    def __init__(self, image: str | None = None, *, cpus: float = 1.0, memory_mb: int = 1024,
                 network: bool = False, workdir: str = "/work", pids: int = _b.DEFAULT_PIDS,
                 max_output: int = _b.DEFAULT_MAX_OUTPUT, pool: str | None = None,
                 isolation: str = "auto", mounts: dict[str, str] | None = None) -> None:
        if image is not None:
            raise ValueError(f"the local sandbox backend runs commands on this host's own system "
                             f"and cannot use image {image!r}; pass image=None, or use "
                             "backend='docker' for images")
        if isolation not in ("auto", "bwrap", "none"):
            raise ValueError(f"isolation must be 'auto', 'bwrap' or 'none', not {isolation!r}")
        if not posixpath.isabs(workdir):
            raise ValueError(f"workdir must be an absolute path, not {workdir!r}")
        super().__init__(workdir=posixpath.normpath(workdir), max_output=max_output)
        self.mounts = _check_mounts(mounts or {}, self.workdir)
        self.cpus, self.memory_mb, self.network, self.pids = cpus, memory_mb, network, pids
        self.uid = free_uid() if os.geteuid() == 0 else None
        self.bwrap = find_bwrap() if isolation != "none" else None
        problem = "bwrap is not on the PATH" if self.bwrap is None and isolation != "none" else (
            _bwrap_problem(self.bwrap, self.uid) if self.bwrap else "")
        if problem and isolation == "bwrap":
            raise SandboxUnavailable(f"local sandbox with isolation='bwrap': {problem}. Install "
                                     "bubblewrap (apt-get install bubblewrap) and allow user "
                                     "namespaces, or pass isolation='none'")
        if problem or isolation == "none":
            self.bwrap = None
            _warn_weak(problem or "isolation='none'")
        self.isolation = "bwrap" if self.bwrap else "none"
        self.prlimit = shutil.which("prlimit") if self.bwrap else None
        self._root = make_base() / self.id
        self._work, self._snaps = self._root / "work", self._root / "snapshots"
        self._root.mkdir(mode=0o711)
        self.labels = {**_b.owner_labels(pool), LABEL_ID: self.id, LABEL_UID: str(self.uid or ""),
                       LABEL_OWNER_START: str(start_time(os.getpid()))}
        (self._root / "label.tmp").write_text(json.dumps(self.labels, indent=1))
        (self._root / "label.tmp").replace(self._root / LABEL_FILE)  # complete or absent
        self._snaps.mkdir(mode=0o700)
        own = [self._work] if self.bwrap else [self._work, self._root / "tmp"]
        for d in own:
            d.mkdir(mode=0o700)
            if self.uid is not None:
                os.chown(d, self.uid, self.uid)
        if self.bwrap is None:
            self.workdir = str(self._work)
        cores = sorted(os.sched_getaffinity(0))
        n, start = max(1, math.ceil(cpus)), random.randrange(len(cores))
        self._cores = None if n >= len(cores) else {cores[(start + i) % len(cores)]
                                                     for i in range(n)}

    # -- commands ----------------------------------------------------------------------
    def exec(self, cmd: str | list[str], timeout: float | None = 30, cwd: str | None = None,
             env: dict[str, str] | None = None, stdin: str | bytes | None = None) -> ExecResult:
        self._check_open()
        full_env, wrap, host_cwd = self._launch(cwd, env)
        r = agent.run_command(cmd, timeout=timeout, cwd=host_cwd, env=full_env,
                              stdin=None if stdin is None else as_bytes(stdin),
                              max_output=self.max_output, preexec_fn=self._limits(), wrap=wrap)
        return ExecResult.from_agent(r)

    def spawn(self, argv: list[str], env: dict[str, str] | None = None,
              cwd: str | None = None) -> _b.Channel:
        """Start a long-running process (see `Sandbox.spawn`)."""
        from skyhub.sandbox.pipe_channel import PipeChannel

        return PipeChannel(self.open_stream(argv, env, cwd))

    def open_stream(self, argv: list[str], env: dict[str, str] | None = None,
                    cwd: str | None = None) -> _b.Stream:
        """Start a long-running process (see `Sandbox.open_stream`). It is not tied to the
        calling thread (bwrap's --die-with-parent would kill it when that thread ends): it
        ends when its stdin closes, at `restore(kill_processes=True)` or at `close()`. Its
        stderr goes to a log beside the workdir, quoted when it dies early."""
        from skyhub.sandbox.pipe_channel import PipeStream

        self._check_open()
        full_env, wrap, host_cwd = self._launch(cwd, env, die_with_parent=False)
        log = self._root / f"spawn-{_b.new_id('p')}.log"  # beside the workdir: not the agent's
        return PipeStream([*(wrap or []), *argv], env=full_env, cwd=host_cwd,
                          preexec_fn=self._limits(), stderr_log=str(log))

    def _launch(self, cwd: str | None, env: dict[str, str] | None, die_with_parent: bool = True
                ) -> tuple[dict[str, str], list[str] | None, str]:
        """The environment, bwrap prefix (or None) and host cwd for a command."""
        inside = self._path(cwd) if cwd else self.workdir
        full_env = {"PATH": PATH, "HOME": self.workdir, "LANG": "C.UTF-8", "USER": "sandbox",
                    "LOGNAME": "sandbox", "TMPDIR": "/tmp" if self.bwrap else str(
                        self._root / "tmp"), **(env or {}), MARKER_ENV: self.id}
        if self.bwrap:
            return full_env, self._bwrap_argv(inside, die_with_parent), "/"
        return full_env, None, os.path.join(self._work, *self._resolve(inside))

    def _bwrap_argv(self, cwd: str, die_with_parent: bool = True) -> list[str]:
        argv = [str(self.bwrap), "--unshare-all", *(["--share-net"] if self.network else []),
                *(["--die-with-parent"] if die_with_parent else []), "--new-session",
                "--hostname", "sandbox"]
        for d in _RO_DIRS:
            if os.path.islink(d):
                argv += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                argv += ["--ro-bind", d, d]
        for inside, host in self.mounts.items():
            argv += ["--ro-bind", host, inside]
        if self.network:
            argv += ["--ro-bind-try", "/run/systemd/resolve", "/run/systemd/resolve"]
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
                 "--bind", str(self._work), self.workdir,
                 # a read-only root: `rm -rf /` cannot delete the /lib and /bin symlinks that
                 # every later program in this namespace needs
                 "--remount-ro", "/", "--chdir", cwd]
        if self.prlimit:  # in the new user namespace NPROC counts only the sandbox's tasks
            argv += [self.prlimit, f"--nproc={self.pids}", "--"]
        return argv

    def _limits(self) -> Callable[[], None]:
        """The preexec_fn that applies rlimits, CPU pinning and the sandbox uid."""
        mem, uid, cores = self.memory_mb << 20, self.uid, self._cores
        if uid is not None:
            nproc: int | None = self.pids + (2 if self.bwrap else 0)  # bwrap's own two
        elif self.bwrap and self.prlimit:
            nproc = None
        else:
            nproc = self.pids + sum(u == os.getuid() for u in proc_uids().values())

        def apply() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if nproc is not None:
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            if cores:
                os.sched_setaffinity(0, cores)
            drop_to(uid)

        return apply

    # -- files -------------------------------------------------------------------------
    def _resolve(self, path: str) -> list[str]:
        """`path`'s components below the workdir after following symlinks the way the
        sandbox would (absolute targets are sandbox paths); ValueError if it leaves it."""
        outside = ValueError(f"{path!r} is outside the workdir {self.workdir}: local "
                             "sandboxes only expose their workdir to file operations")

        def below(full: str) -> list[str]:
            rel = posixpath.relpath(posixpath.normpath(full), self.workdir)
            if rel == ".." or rel.startswith("../"):
                raise outside
            return rel.split("/")

        todo, done, hops = below(self._path(path)), [], 0
        while todo:
            name = todo.pop(0)
            if name == "..":
                if not done:
                    raise outside
                done.pop()
            elif name not in ("", "."):
                host = os.path.join(self._work, *done, name)
                if not os.path.islink(host):
                    done.append(name)
                    continue
                hops += 1
                if hops > 40:
                    raise OSError(errno.ELOOP, "too many levels of symbolic links", path)
                target = os.readlink(host)
                if target.startswith("/"):
                    todo, done = below(target) + todo, []
                else:
                    todo = target.split("/") + todo
        return done

    def _open_dir(self, parts: list[str], create: bool) -> int:
        """A descriptor of the directory `parts`, opened one component at a time without
        following symlinks, so a symlink swapped in after `_resolve` cannot redirect us."""
        fd = os.open(self._work, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for name in parts:
                if create:
                    try:
                        os.mkdir(name, 0o755, dir_fd=fd)
                        if self.uid is not None:
                            os.chown(name, self.uid, self.uid, dir_fd=fd, follow_symlinks=False)
                    except FileExistsError:
                        pass
                nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write_file(self, path: str, data: str | bytes, mode: int | None = None) -> None:
        self._check_open()
        parts = self._resolve(path)
        if not parts:
            raise IsADirectoryError(errno.EISDIR, "the workdir is a directory", path)
        dfd, tmp = self._open_dir(parts[:-1], create=True), f".skyhub-{_b.new_id('w')}"
        try:  # a new file renamed into place: never writes through a (hard) link
            try:
                old = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False).st_mode & 0o7777
            except FileNotFoundError:
                old = 0o644
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                         dir_fd=dfd)
            with os.fdopen(fd, "wb") as f:
                f.write(as_bytes(data))
                if self.uid is not None:
                    os.fchown(fd, self.uid, self.uid)
                os.fchmod(fd, old if mode is None else mode)
            os.replace(tmp, parts[-1], src_dir_fd=dfd, dst_dir_fd=dfd)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            os.close(dfd)

    def read_file(self, path: str) -> bytes:
        self._check_open()
        parts = self._resolve(path)
        dfd = self._open_dir(parts[:-1], create=False)
        try:
            fd = os.open(parts[-1] if parts else ".", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK,
                         dir_fd=dfd)
        finally:
            os.close(dfd)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory", path)
            if not stat.S_ISREG(st.st_mode):  # a FIFO would block us forever
                raise OSError(errno.EINVAL, "not a regular file", path)
            return f.read()

    def upload(self, src: str | Path, dest: str | None = None) -> None:
        """A directory's contents go into `dest`; a file goes to `dest/<its name>`."""
        self._check_open()
        src = Path(src)
        if not src.exists():
            raise FileNotFoundError(errno.ENOENT, "no such file to upload", str(src))
        parts = self._resolve(dest or self.workdir)
        os.close(self._open_dir(parts, create=True))
        target = os.path.join(self._work, *parts)
        data = agent.tar_bytes(str(src), arcname="." if src.is_dir() else src.name)
        agent.untar_bytes(data, target)  # refuses members that would land outside `target`
        if self.uid is not None:
            top = target if src.is_dir() else os.path.join(target, src.name)
            for d, dirs, files in os.walk(top):
                for name in [d, *(os.path.join(d, n) for n in dirs + files)]:
                    os.chown(name, self.uid, self.uid, follow_symlinks=False)

    def download(self, src: str, dest: str | Path) -> None:
        """A directory's contents go into the host directory `dest`; a file to
        `dest/<its name>`."""
        self._check_open()
        host = os.path.join(self._work, *self._resolve(src))
        if not os.path.lexists(host):
            raise FileNotFoundError(errno.ENOENT, "no such path in the sandbox", src)
        Path(dest).mkdir(parents=True, exist_ok=True)
        if os.path.isdir(host):
            shutil.copytree(host, dest, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(host, Path(dest) / posixpath.basename(self._path(src)))

    # -- state -------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        self._check_open()
        snap = Snapshot(_b.new_id("snap"), self.id)
        agent.snapshot_dir(str(self._work), str(self._snaps / f"{snap.id}.tar"))
        return snap

    def restore(self, snap: Snapshot, *, kill_processes: bool = True) -> None:
        self._check_open()
        tar = self._snaps / f"{snap.id}.tar"
        if snap.sandbox_id != self.id or not tar.is_file():
            raise UsageError(f"snapshot {snap.id} was not taken by sandbox {self.id}; "
                              "restore it on the sandbox that took it")
        if kill_processes:
            self.kill_processes()
        agent.restore_dir(str(self._work), str(tar))

    def kill_processes(self) -> None:
        """SIGKILL every process this sandbox's commands started."""
        kill_sandbox(self.id, self.uid)

    def _close(self) -> None:
        if hasattr(self, "_root"):
            self.kill_processes()
            rmtree(self._root)


__all__ = ["ENV_DIR", "LocalSandbox", "base_dir", "list_sandboxes", "reap"]
