"""The sandbox interface every backend implements, and what it returns.

A sandbox is an isolated place to run an agent's commands: a workdir, limits on CPU, memory,
processes and wall time, no network unless asked for, and a label on everything it creates
so that `reap()` can find what a crashed process left behind.
"""

from __future__ import annotations

import abc
import contextlib
import os
import posixpath
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyhub.errors import ChannelBroken, ChannelTimeout  # noqa: F401  (moved there; kept here)

#: Labels (Docker labels; local scratch directory names carry the same facts).
LABEL = "skyhub.sandbox"
LABEL_OWNER_PID = "skyhub.owner_pid"
LABEL_OWNER_HOST = "skyhub.owner_host"
LABEL_CREATED = "skyhub.created"
LABEL_POOL = "skyhub.pool"

DEFAULT_MAX_OUTPUT = 1 << 20  # bytes kept per stream (head and tail halves), per exec
DEFAULT_PIDS = 256


@dataclass(frozen=True)
class ExecResult:
    """What a command did. `exit_code` is 128+N when a signal N killed it (137 = SIGKILL,
    e.g. the memory limit or a timeout); output is decoded as UTF-8 with replacement."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @classmethod
    def from_guest(cls, r: dict[str, Any]) -> ExecResult:
        """An ExecResult from the guest's reply to an `exec` request (bytes stdout/stderr)."""
        def text(b: bytes) -> str:
            return b.decode("utf-8", errors="replace")

        return cls(int(r["exit_code"]), text(r["stdout"]), text(r["stderr"]),
                   bool(r["timed_out"]), float(r["duration_s"]))


@dataclass(frozen=True)
class Snapshot:
    """A saved state of a sandbox's workdir (files, not processes), restorable with
    `restore` on the sandbox that took it."""

    id: str
    sandbox_id: str
    created: float = field(default_factory=time.time)


@dataclass(frozen=True)
class Places:
    """A copy of every place of a sandbox that a restore puts back (the workdir and, on
    Docker, /tmp, $HOME and the rest), taken mid-use by `Sandbox.export_places` and put into
    another sandbox of the same kind by `import_places`: how a running episode is forked.
    `kind` names what the two sandboxes must share (backend, image, user, workdir);
    `per_process` the places each process tree has its own of (bwrap's /tmp and /dev/shm),
    which are not in the copy: a caller that needs them copies them through its process.
    A copy of a whole container's changes (Docker, where restores replace the container)
    is one tar at "/" and the paths it `deleted`."""

    kind: str
    tars: tuple[tuple[str, bytes], ...]
    per_process: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()


class Channel(abc.ABC):
    """A long-running process in a sandbox that answers requests: one length-prefixed JSON
    message in, one out (the in-sandbox guest's framing; replies echo the request's `id`).
    What `Sandbox.spawn` returns: kernels and shells that must outlive a single `exec`."""

    pid: int = 0

    @abc.abstractmethod
    def request(self, req: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        """Send `req` and return the reply to it; `ChannelTimeout` when none comes within
        `timeout` seconds, `ChannelBroken` when the process is gone or answers nonsense."""

    @abc.abstractmethod
    def close(self) -> None:
        """End the process (its stdin is closed, then it is killed). Idempotent."""


class Stream(abc.ABC):
    """A long-running process's stdin and stdout as raw bytes (what `Sandbox.open_stream`
    returns): for programs that do not speak skyhub's framing, such as a shell on a pty."""

    pid: int = 0

    @abc.abstractmethod
    def write(self, data: bytes) -> None:
        """Send bytes to the process's stdin (`ChannelBroken` when it is gone)."""

    @abc.abstractmethod
    def read(self, timeout: float | None) -> bytes:
        """The bytes ready now, waiting up to `timeout` s for the first: b"" when none came
        in time, `ChannelBroken` when the stream has ended."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close stdin, then kill the process if it is still there. Idempotent."""


def new_id(prefix: str = "sb") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def owner_labels(pool: str | None = None) -> dict[str, str]:
    """The labels that let `reap` decide whether a sandbox's owner is still alive."""
    labels = {LABEL: "1", LABEL_OWNER_PID: str(os.getpid()),
              LABEL_OWNER_HOST: socket.gethostname(), LABEL_CREATED: f"{time.time():.3f}"}
    if pool:
        labels[LABEL_POOL] = pool
    return labels


def start_time(pid: int) -> int:
    """A process's start time in clock ticks (tells a reused pid from its first owner)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return -1


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Sandbox(abc.ABC):
    """An isolated workdir plus limited command execution. Use as a context manager or call
    `close()` (idempotent). Relative paths are relative to `workdir`."""

    backend: str = ""

    def __init__(self, *, workdir: str, max_output: int = DEFAULT_MAX_OUTPUT) -> None:
        self.id = new_id()
        self.workdir = workdir
        self.max_output = max_output
        self.labels: dict[str, str] = {}
        self.created = time.time()
        self._closed = False

    # -- commands ----------------------------------------------------------------------
    @abc.abstractmethod
    def exec(self, cmd: str | list[str], timeout: float | None = 30, cwd: str | None = None,
             env: dict[str, str] | None = None, stdin: str | bytes | None = None) -> ExecResult:
        """Run `cmd` (a shell string, or an argv list) in the sandbox. A command past
        `timeout` seconds is killed with its whole process tree (`timed_out=True`)."""

    def spawn(self, argv: list[str], env: dict[str, str] | None = None,
              cwd: str | None = None) -> Channel:
        """Start `argv` as a long-running process that speaks skyhub's message framing on its
        stdin/stdout, and return a `Channel` to it. It lives until `Channel.close()`, a
        `restore(kill_processes=True)` or the sandbox's `close()`; its stderr is discarded.
        Used for state that must outlive one command: Jupyter kernels, shell sessions."""
        from skyhub.errors import SandboxUnavailable

        raise SandboxUnavailable(f"the {self.backend} sandbox backend cannot run long-lived "
                                 "processes yet; use backend='docker' or 'local'")

    def open_stream(self, argv: list[str], env: dict[str, str] | None = None,
                    cwd: str | None = None) -> Stream:
        """Start `argv` as a long-running process and return its raw stdin/stdout (stderr
        is discarded: merge it with `2>&1` or run the program on a pty). Lifetime as for
        `spawn`."""
        from skyhub.errors import SandboxUnavailable

        raise SandboxUnavailable(f"the {self.backend} sandbox backend cannot run long-lived "
                                 "processes yet; use backend='docker' or 'local'")

    # -- files -------------------------------------------------------------------------
    @abc.abstractmethod
    def write_file(self, path: str, data: str | bytes, mode: int | None = None) -> None:
        """Create or replace a file (parent directories are created)."""

    @abc.abstractmethod
    def read_file(self, path: str) -> bytes:
        """A file's bytes; `FileNotFoundError` if it does not exist."""

    @abc.abstractmethod
    def upload(self, src: str | Path, dest: str | None = None) -> None:
        """Copy a host file or directory into the sandbox (`dest` defaults to the workdir)."""

    @abc.abstractmethod
    def download(self, src: str, dest: str | Path) -> None:
        """Copy a sandbox file or directory to the host path `dest` (a directory)."""

    # -- state -------------------------------------------------------------------------
    @abc.abstractmethod
    def snapshot(self) -> Snapshot:
        """Save the workdir's files (and the other places `restore` puts back), to `restore`
        later (much cheaper than a new sandbox)."""

    @abc.abstractmethod
    def restore(self, snap: Snapshot, *, kill_processes: bool = True) -> None:
        """Put the workdir back as it was at `snap`. By default also kill every process of the
        sandbox's user and put back every other place it can write ($HOME, /tmp, /dev/shm,
        /var/tmp, runtime dirs...; each backend's docstring says what it covers), so the
        next user finds nothing of the last one: what a `Pool` lease relies on.
        `kill_processes=False` keeps the processes and puts back the workdir only. A
        snapshot of another sandbox raises `skyhub.errors.UsageError`."""

    def export_places(self) -> Places:
        """A copy of the sandbox's places as they are now (see `Places`), for
        `import_places` into a sandbox of the same kind. `SandboxUnavailable` where the
        backend cannot (callers fall back to replaying what made the state)."""
        from skyhub.errors import SandboxUnavailable

        raise SandboxUnavailable(f"the {self.backend} sandbox backend cannot copy its places "
                                 "to another sandbox")

    def import_places(self, places: Places) -> None:
        """Make this sandbox's places exactly those of `places` (another sandbox's
        `export_places`), leaving its processes running: for a fresh sandbox whose processes
        (a shell just started) have written nothing yet. A copy of another kind is a
        `UsageError`."""
        from skyhub.errors import SandboxUnavailable

        raise SandboxUnavailable(f"the {self.backend} sandbox backend cannot take places "
                                 "copied from another sandbox")

    def _check_kind(self, places: Places) -> None:
        from skyhub.errors import UsageError

        if places.kind != self.places_kind():
            raise UsageError(f"places copied from a sandbox of kind {places.kind!r} cannot "
                             f"go into {self.id} ({self.places_kind()!r}): import them into "
                             "a sandbox made with the same backend, image and workdir")

    def places_kind(self) -> str:
        """What two sandboxes must share for one to take the other's places."""
        return f"{self.backend}:{self.workdir}"

    def alive(self) -> bool:
        """Whether the sandbox still answers (a pool replaces those that don't)."""
        try:
            return self.exec("true", timeout=10).exit_code == 0
        except Exception:
            return False

    # -- lifecycle ---------------------------------------------------------------------
    @abc.abstractmethod
    def _close(self) -> None: ...

    def close(self) -> None:
        """Remove the sandbox and everything it made. Idempotent; never raises."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} {'closed' if self._closed else self.workdir}>"

    # -- helpers for backends ----------------------------------------------------------
    def _path(self, path: str) -> str:
        """An absolute path inside the sandbox for `path` (relative = under the workdir)."""
        return posixpath.normpath(posixpath.join(self.workdir, str(path)))

    def _check_open(self) -> None:
        if self._closed:
            from skyhub.errors import SkyhubError

            raise SkyhubError(f"sandbox {self.id} is closed; create a new one")


def as_bytes(data: str | bytes) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else bytes(data)
