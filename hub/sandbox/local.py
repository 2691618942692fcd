"""The `local` sandbox backend: a scratch directory and subprocesses on this machine.

Each sandbox is `<base>/sb-<id>/` (base: `$SKYHUB_SANDBOX_DIR`, else
`<tempdir>/skyhub-sandboxes`, with `-<uid>` appended for non-root users) holding `work/` (the
agent's workdir), `label.json` (owner pid, host, creation time, pool: what `reap` reads; kept
outside the workdir so the agent cannot forge it), `snapshots/` and, without bubblewrap, `tmp/`.

With `bwrap` each command runs in fresh namespaces: `--unshare-all` (only a private loopback,
so host ports are unreachable, unless `network=True`), read-only /usr, /bin, /lib*, its own
minimal read-only /etc (a passwd and group naming only root, `sandbox` and nobody, its own
hosts and nsswitch.conf; from the host only what programs need, `ETC_FROM_HOST`, and with
`network=True` what name lookups and TLS need, `ETC_FOR_NETWORK`; a host path mounted with
`mounts={"/etc/x": "/etc/x"}` adds more), its own /proc, a read-only /dev with sized tmpfs
/dev/shm, a sized tmpfs /tmp, the workdir bound at `workdir` (/work), and a pid namespace
whose death (end of the command, timeout, or our own death via `--die-with-parent`) kills
every process in it. Background processes therefore never outlive the `exec` that started
them (`spawn` starts the exception: a long-running process that ends when its stdin closes),
and /tmp and /dev/shm start empty for every command: the workdir (which is also $HOME) is
the only place that persists, and `restore` puts it back.
`mounts={"/opt/x": "/host/path"}` adds read-only binds (with bwrap only; without it the host's
paths are visible as they are). Without bwrap (`isolation="none"`, or "auto" when bwrap is
missing, with a one-time warning) commands run on the host in the scratch dir: weak
isolation, for development only. `local_bwrap` builds the bwrap argv and the sandbox's /etc.

Which limits hold (verified on Debian 12, kernel 6.18, bwrap 0.8: as root, and as a plain
user with and without bwrap):
- memory: a memory cgroup per sandbox (`local_cgroup`) limited to `memory_mb` without swap,
  which every command's processes enter before bwrap starts: every page they allocate counts,
  tmpfs, memfd and shared memory included, and past the limit the cgroup's OOM killer kills
  one of them (exit 137: the command's failure). Without cgroups (not root, no memory
  controller) `memory_cgroup="auto"` warns and goes on with RLIMIT_AS alone, "require"
  refuses to start. And RLIMIT_AS = `memory_mb` (address space), always: allocations past
  it fail (MemoryError, malloc NULL), so a hog dies or exits non-zero; programs that reserve
  much more virtual memory than they use (JVM, some Go/Rust runtimes) need a larger
  `memory_mb`. bwrap 0.8+ also forbids nested user namespaces (`--disable-userns`), where
  a command could mount tmpfs of any size.
- processes (`pids`): RLIMIT_NPROC, which the kernel counts per real uid and ignores for
  root. As root each sandbox therefore runs as its own unprivileged uid (1.9e9 + random),
  which makes the count exactly the sandbox's processes and lets us kill them all. As
  non-root with bwrap the limit is set inside the new user namespace (`prlimit`), where the
  count is again just the sandbox's. As non-root without bwrap it is "your processes + pids":
  best effort.
- wall time: `exec(timeout=)` kills the process tree (with bwrap: the whole pid namespace).
- cpus: the command is pinned to ceil(cpus) cores (sched_setaffinity); no CPU-time quota.
- core dumps are off (RLIMIT_CORE=0).
- disk (`disk_mb`, default half of `memory_mb`, at least 64, as for docker): /tmp holds at
  most `disk_mb` MiB and /dev/shm half of that (tmpfs: host RAM that RLIMIT_AS does not
  count, so they must be sized), and no file anywhere grows past `disk_mb` MiB
  (RLIMIT_FSIZE: EFBIG, or SIGXFSZ for programs that do not ignore it). The workdir's total
  is not bounded: it sits on the host's disk, where nothing short of quotas counts one uid's
  bytes; pids and wall time bound how many such files a command can write. Without bwrap
  /tmp is the host's.
File operations (`write_file`, `read_file`, `upload`, `download`) act on the scratch dir from
the host, resolving symlinks as the sandbox would and refusing any path that leaves the
workdir; they, `snapshot`, `restore` and `close` walk the tree through directory descriptors
and never follow a symlink, so a process swapping a directory for a symlink to a host path
while they run cannot redirect them (they run as root when we are root).

Over ~400 lines, for a reason: one backend, one class: what a sandbox does, done with a
scratch directory and subprocesses.
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
import warnings
from collections.abc import Callable
from pathlib import Path

from skyhub.errors import SandboxUnavailable, SkyhubError, UsageError
from skyhub.sandbox import base as _b
from skyhub.sandbox import local_cgroup
from skyhub.sandbox.base import ExecResult, Sandbox, Snapshot, as_bytes, start_time
from skyhub.sandbox.extract import extract
from skyhub.sandbox.guest import procs, tars, trees
from skyhub.sandbox.local_bwrap import bwrap_argv, bwrap_problem, find_bwrap, write_etc
from skyhub.sandbox.local_cgroup import MemoryCgroup
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
    remove_owned,
    rmtree,
)

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_warned_weak = False



def _warn_weak(why: str) -> None:
    global _warned_weak
    if not _warned_weak:
        _warned_weak = True
        warnings.warn(f"skyhub local sandboxes run without isolation ({why}): commands see the "
                      "host's files and network. Install bubblewrap (apt-get install "
                      "bubblewrap) for real isolation.", RuntimeWarning, stacklevel=3)


def _check_mounts(mounts: dict[str, str], workdir: str) -> dict[str, str]:
    """Validate `{sandbox path: host path}` read-only mounts."""
    out = {}
    for inside, host in mounts.items():
        inside = posixpath.normpath(str(inside))
        if not posixpath.isabs(inside):
            raise UsageError(f"mount target {inside!r} must be an absolute sandbox path")
        if inside == workdir or inside.startswith(workdir.rstrip("/") + "/") or \
                workdir.startswith(inside.rstrip("/") + "/"):
            raise UsageError(f"mount target {inside!r} overlaps the workdir {workdir}; mount "
                             "elsewhere (e.g. under /opt)")
        if not os.path.exists(host):
            raise FileNotFoundError(errno.ENOENT, "no such host path to mount", str(host))
        out[inside] = os.path.abspath(host)
    return out


_warned_no_cgroup = False


def _warn_no_cgroup(why: str) -> None:
    global _warned_no_cgroup
    if not _warned_no_cgroup:
        _warned_no_cgroup = True
        warnings.warn(f"skyhub local sandboxes run without a memory cgroup ({why}): memory_mb "
                      "bounds each process's address space only, so tmpfs, memfd and shared "
                      "memory pages are not counted. Run as root on a host with the cgroup "
                      "memory controller, or pass memory_cgroup='require' to refuse instead.",
                      RuntimeWarning, stacklevel=4)


class LocalSandbox(Sandbox):
    """A sandbox on this machine; see the module docstring for what isolates it and how."""

    backend = "local"

    def __init__(self, image: str | None = None, *, cpus: float = 1.0, memory_mb: int = 1024,
                 network: bool = False, workdir: str = "/work", pids: int = _b.DEFAULT_PIDS,
                 max_output: int = _b.DEFAULT_MAX_OUTPUT, pool: str | None = None,
                 isolation: str = "auto", mounts: dict[str, str] | None = None,
                 disk_mb: int | None = None, memory_cgroup: str | None = None) -> None:
        """`memory_cgroup`: "auto" (a memory cgroup of `memory_mb` when one can be made,
        else RLIMIT_AS alone, with a one-time warning), "require" (SandboxUnavailable where
        none can be made) or "off"; None reads `$SKYHUB_MEMORY_CGROUP` (default "auto")."""
        if image is not None:
            raise UsageError(f"the local sandbox backend runs commands on this host's own system "
                             f"and cannot use image {image!r}; pass image=None, or use "
                             "backend='docker' for images")
        if isolation not in ("auto", "bwrap", "none"):
            raise UsageError(f"isolation must be 'auto', 'bwrap' or 'none', not {isolation!r}")
        if not posixpath.isabs(workdir):
            raise UsageError(f"workdir must be an absolute path, not {workdir!r}")
        super().__init__(workdir=posixpath.normpath(workdir), max_output=max_output)
        self.mounts = _check_mounts(mounts or {}, self.workdir)
        self.cpus, self.memory_mb, self.network, self.pids = cpus, memory_mb, network, pids
        self.disk_mb = max(64, memory_mb // 2) if disk_mb is None else disk_mb
        if self.disk_mb < 1:
            raise UsageError(f"disk_mb must be at least 1, not {disk_mb!r}")
        self.uid = free_uid() if os.geteuid() == 0 else None
        self.bwrap = find_bwrap() if isolation != "none" else None
        problem = "bwrap is not on the PATH" if self.bwrap is None and isolation != "none" else (
            bwrap_problem(self.bwrap, self.uid) if self.bwrap else "")
        if problem and isolation == "bwrap":
            raise SandboxUnavailable(f"local sandbox with isolation='bwrap': {problem}. Install "
                                     "bubblewrap (apt-get install bubblewrap) and allow user "
                                     "namespaces, or pass isolation='none'")
        if problem or isolation == "none":
            self.bwrap = None
            _warn_weak(problem or "isolation='none'")
        self.isolation = "bwrap" if self.bwrap else "none"
        self.prlimit = shutil.which("prlimit") if self.bwrap else None
        self._cgroup = self._make_cgroup(memory_cgroup)  # first: "require" refuses early
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
        if self.bwrap:
            self._etc_binds = write_etc(
                self._root / "etc", uid=os.getuid() if self.uid is None else self.uid,
                gid=os.getgid() if self.uid is None else self.uid, workdir=self.workdir,
                network=self.network, mounts=self.mounts)
        if self.bwrap is None:
            self.workdir = str(self._work)
        cores = sorted(os.sched_getaffinity(0))
        n, start = max(1, math.ceil(cpus)), random.randrange(len(cores))
        self._cores = None if n >= len(cores) else {cores[(start + i) % len(cores)]
                                                     for i in range(n)}

    def _make_cgroup(self, mode: str | None) -> MemoryCgroup | None:
        """The sandbox's memory cgroup (see `local_cgroup`), or None where `mode` allows."""
        mode = local_cgroup.default_mode() if mode is None else mode
        if mode not in local_cgroup.MODES:
            raise UsageError(f"memory_cgroup must be one of {local_cgroup.MODES}, not {mode!r}")
        if mode == "off":
            return None
        try:
            return MemoryCgroup.create(self.id, self.memory_mb)
        except (OSError, SandboxUnavailable) as e:
            why = str(e) if isinstance(e, SandboxUnavailable) else f"{e.strerror or e}"
            if mode == "require":
                raise SandboxUnavailable(
                    f"local sandbox with memory_cgroup='require': no memory cgroup ({why}). "
                    "Run as root on a host with the cgroup memory controller mounted, set "
                    f"${local_cgroup.ENV_PARENT} to a cgroup directory delegated to you, or "
                    "pass memory_cgroup='auto'") from e
            _warn_no_cgroup(why)
            return None

    # -- commands ----------------------------------------------------------------------
    def exec(self, cmd: str | list[str], timeout: float | None = 30, cwd: str | None = None,
             env: dict[str, str] | None = None, stdin: str | bytes | None = None) -> ExecResult:
        self._check_open()
        full_env, wrap, host_cwd = self._launch(cwd, env)
        r = procs.run_command(cmd, timeout=timeout, cwd=host_cwd, env=full_env,
                              stdin=None if stdin is None else as_bytes(stdin),
                              max_output=self.max_output, preexec_fn=self._limits(), wrap=wrap)
        return ExecResult.from_guest(r)

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
            return full_env, bwrap_argv(
                str(self.bwrap), root=self._root, work=self._work, workdir=self.workdir,
                cwd=inside, network=self.network, etc_binds=self._etc_binds,
                mounts=self.mounts, disk_mb=self.disk_mb, prlimit=self.prlimit,
                pids=self.pids, die_with_parent=die_with_parent), "/"
        return full_env, None, os.path.join(self._work, *self._resolve(inside))

    def _limits(self) -> Callable[[], None]:
        """The preexec_fn that applies rlimits, CPU pinning and the sandbox uid."""
        mem, uid, cores, disk = self.memory_mb << 20, self.uid, self._cores, self.disk_mb << 20
        cgroup = self._cgroup
        if uid is not None:
            nproc: int | None = self.pids + (2 if self.bwrap else 0)  # bwrap's own two
        elif self.bwrap and self.prlimit:
            nproc = None
        else:
            nproc = self.pids + sum(u == os.getuid() for u in proc_uids().values())

        def apply() -> None:
            if cgroup is not None:  # first: moving into a cgroup needs our own uid
                cgroup.enter()
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_FSIZE, (disk, disk))
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
        data = tars.tar_bytes(str(src), arcname="." if src.is_dir() else src.name)
        fd = self._open_dir(self._resolve(dest or self.workdir), create=True)
        try:  # below a descriptor, never through a symlink, owned by the sandbox's uid
            tars.untar_at(data, fd, None if self.uid is None else (self.uid, self.uid))
        finally:
            os.close(fd)

    def download(self, src: str, dest: str | Path) -> None:
        """A directory's contents go into the host directory `dest`; a file to
        `dest/<its name>`. The files are ours on the host, whoever owned them inside; links
        leaving the tree and special files are left out (see `skyhub.sandbox.extract`)."""
        self._check_open()
        parts = self._resolve(src)
        dfd = self._open_dir(parts[:-1], create=False)
        try:
            name = parts[-1] if parts else "."
            try:
                is_dir = stat.S_ISDIR(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode)
            except FileNotFoundError:
                raise FileNotFoundError(errno.ENOENT, "no such path in the sandbox", src
                                        ) from None
            arcname = "." if is_dir else posixpath.basename(self._path(src))
            data = tars.tar_bytes(name, arcname, dir_fd=dfd)
        finally:
            os.close(dfd)
        # the sandbox's tree is the agent's: links leaving it are left out, never copied
        # (a `result.txt -> /etc/shadow` would read the host's file through `dest`)
        extract(data, dest)

    # -- state -------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        self._check_open()
        snap = Snapshot(_b.new_id("snap"), self.id)
        tars.snapshot_dir(str(self._work), str(self._snaps / f"{snap.id}.tar"))
        return snap

    def restore(self, snap: Snapshot, *, kill_processes: bool = True) -> None:
        """Put the workdir back as it was at `snap`. With `kill_processes` (the default) every
        process of the sandbox dies first (by its uid when we are root, so a daemon that
        scrubbed its environment goes too), and without bwrap its /tmp is emptied as well.
        Without it, processes still running may race the restore: it never touches anything
        outside the workdir whatever they do, but what they change meanwhile may stay."""
        self._check_open()
        tar = self._snaps / f"{snap.id}.tar"
        if snap.sandbox_id != self.id or not tar.is_file():
            raise UsageError(f"snapshot {snap.id} was not taken by sandbox {self.id}; "
                              "restore it on the sandbox that took it")
        try:
            if kill_processes:
                self.kill_processes()
                self._clear_outside_workdir()
            tars.restore_dir(str(self._work), str(tar),
                              owner=None if self.uid is None else (self.uid, self.uid))
        except OSError as e:
            raise SkyhubError(f"sandbox {self.id} could not be restored ({e}); close it and "
                              "create a new one") from e

    def places_kind(self) -> str:
        return f"local:{self.isolation}:{self.workdir}"

    def export_places(self) -> _b.Places:
        """The workdir, as a tar. With bwrap /tmp and /dev/shm are each process tree's own
        (`Places.per_process`); without it the workdir is a host path of this sandbox alone,
        so no other sandbox can take its files unchanged (`SandboxUnavailable`)."""
        self._check_open()
        if self.bwrap is None:
            raise SandboxUnavailable(f"sandbox {self.id} runs without bwrap: its workdir "
                                     f"({self.workdir}) is its own host path, so its files "
                                     "cannot be copied into another sandbox unchanged")
        return _b.Places(self.places_kind(), ((self.workdir, tars.tar_bytes(str(self._work))),),
                         per_process=("/tmp", "/dev/shm"))

    def import_places(self, places: _b.Places) -> None:
        self._check_open()
        self._check_kind(places)
        try:
            for _, data in places.tars:
                tars.restore_dir(str(self._work), data,
                                 owner=None if self.uid is None else (self.uid, self.uid))
        except OSError as e:
            raise SkyhubError(f"sandbox {self.id} could not take the copied files ({e}); "
                              "close it and create a new one") from e

    def _clear_outside_workdir(self) -> None:
        """Without bwrap, what the sandbox's processes (dead by now) left outside the workdir:
        its scratch /tmp and, with its own uid, its files in the host's /tmp, /dev/shm..."""
        if self.bwrap is None:
            trees.clear_dir(str(self._root / "tmp"))
            remove_owned(self.uid)

    def kill_processes(self) -> None:
        """SIGKILL every process this sandbox's commands started."""
        kill_sandbox(self.id, self.uid)
        if self._cgroup is not None:  # whatever uid or environment they have now
            self._cgroup.kill()

    def _close(self) -> None:
        if hasattr(self, "_root"):
            self.kill_processes()
            if self.bwrap is None:
                remove_owned(self.uid)
            if self._cgroup is not None:
                self._cgroup.remove()
            rmtree(self._root)


__all__ = ["ENV_DIR", "LocalSandbox", "base_dir", "list_sandboxes", "reap"]
