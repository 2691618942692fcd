"""How DockerSandbox talks to its container: a persistent guest (skyhub's in-sandbox daemon),
or Docker's exec API.

`GuestChannel` keeps one `python3 -I -u /opt/skyhub/guest.pyz` process per container, started
with Docker's low-level exec API and attached through a hijacked socket. A request is one
length-prefixed JSON message (the guest's own framing), so `exec("true")` costs a round trip
plus a fork inside the container instead of a Docker exec (~70 ms). The interpreter runs
isolated (`-I`: no user site, no PYTHON* variables, no cwd on sys.path) with a fixed HOME,
so nothing a command leaves in the sandbox is loaded by it (and a guest never starts twice in
one container: see docker.py).

Byte budgets: a reply (and a Docker stream frame) longer than the channel's budget breaks the
channel (`ChannelBroken`) before anything of it is buffered, so a hijacked process cannot
make the host allocate what a 4-byte length claims (up to 4 GiB).

`ExecFallback` is for images without python3 (3.8+): every command is its own Docker exec
(wrapped in `timeout -s KILL` when the image has it) and files go through the archive API.
It works, but each call costs what a Docker exec costs; prefer an image with python3.

Over ~400 lines, for a reason: the two ways DockerSandbox reaches its container (the guest's
channel and Docker's exec API as the fallback) share their framing, budgets and tar helpers.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import posixpath
import select
import socket
import struct
import tarfile
import time
from pathlib import Path
from typing import Any

from skyhub.errors import ChannelBroken, ChannelTimeout, InfraError, ReplyTooLarge
from skyhub.sandbox import guest_app
from skyhub.sandbox.base import Channel, Stream
from skyhub.sandbox.extract import extract
from skyhub.sandbox.guest.procs import Capped
from skyhub.sandbox.guest.server import write_message

log = logging.getLogger(__name__)

GUEST_PATH = "/opt/skyhub/guest.pyz"  # the guest's zipapp (`guest_app`)
#: root-owned, outside every place a command can write (and outside /tmp, a tmpfs mount in
#: skyhub's images): written by the daemon, read by the guest, changed by neither
SNAPSHOT_DIR = "/opt/skyhub/snapshots"
DEFAULT_MAX_REPLY = 64 << 20  # bytes: replies to anything but file transfers are far smaller
_STDOUT, _STDERR = 1, 2
_STDERR_LOG_LIMIT = 64 << 10  # bytes of a channel's stderr that reach the log


class _Demux:
    """Reads Docker's multiplexed attach stream (8-byte headers: stream type, 3 zero bytes,
    4-byte big-endian size), keeping stdout bytes and logging stderr frames (the first
    64 KiB of them). A frame over `max_frame` bytes breaks the stream."""

    def __init__(self, sock: socket.socket, max_frame: int = DEFAULT_MAX_REPLY) -> None:
        self.sock = sock
        self.max_frame = max_frame
        self.raw = bytearray()
        self.out = bytearray()
        self.logged = 0

    def _fill(self) -> None:
        try:
            chunk = self.sock.recv(1 << 20)
        except TimeoutError as e:
            raise ChannelTimeout("no reply from the guest in time") from e
        except OSError as e:
            raise ChannelBroken(f"guest socket: {e!r}") from e
        if not chunk:
            raise ChannelBroken("guest stream ended")
        self.raw += chunk

    def _frame(self) -> None:
        while len(self.raw) < 8:
            self._fill()
        kind, size = self.raw[0], struct.unpack(">I", self.raw[4:8])[0]
        if size > self.max_frame:
            raise ReplyTooLarge(f"a stream frame of {size} bytes from the sandbox is over the "
                                f"budget of {self.max_frame} bytes")
        while len(self.raw) < 8 + size:
            self._fill()
        payload = bytes(self.raw[8:8 + size])
        del self.raw[:8 + size]
        if kind == _STDERR:
            if self.logged < _STDERR_LOG_LIMIT:
                text = payload[:_STDERR_LOG_LIMIT - self.logged]
                self.logged += len(payload)
                log.warning("sandbox process stderr: %s%s",
                            text.decode("utf-8", "replace").rstrip(),
                            "" if self.logged < _STDERR_LOG_LIMIT else " [further stderr dropped]")
        else:
            self.out += payload

    def read_some(self, timeout: float | None) -> bytes:
        """The stdout bytes ready now, waiting up to `timeout` s for a frame (b"" if none)."""
        if not self.out:
            self.sock.settimeout(timeout)
            try:
                self._frame()
            except ChannelTimeout:
                return b""
        data = bytes(self.out)
        self.out.clear()
        return data

    def read(self, n: int) -> bytes:
        while len(self.out) < n:
            self._frame()
        data = bytes(self.out[:n])
        del self.out[:n]
        return data


class _Writer:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def write(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise ChannelBroken(f"guest socket: {e!r}") from e

    def flush(self) -> None:
        pass


class GuestChannel(Channel):
    """One persistent process in a container speaking the guest's framing: the guest itself
    (the default `argv`: `python -I -u guest.pyz`, with `home` as HOME) or anything
    `DockerSandbox.spawn` starts. Replies over `max_reply` bytes break the channel. Not
    thread-safe: the sandbox holds a lock around `request`."""

    def __init__(self, api: Any, container_id: str, user: str, workdir: str,
                 argv: list[str] | None = None, env: dict[str, str] | None = None, *,
                 python: str = "python3", home: str | None = None,
                 max_reply: int = DEFAULT_MAX_REPLY) -> None:
        environment = {"PYTHONDONTWRITEBYTECODE": "1", **({"HOME": home} if home else {}),
                       **(env or {})}
        exec_id = api.exec_create(container_id, argv or [python, "-I", "-u", GUEST_PATH],
                                  stdin=True, stdout=True, stderr=True, tty=False, user=user,
                                  workdir=workdir, environment=environment)
        resp = api.exec_start(exec_id["Id"], socket=True)
        self.sock: socket.socket = getattr(resp, "_sock", resp)
        self._resp = resp
        self.max_reply = max_reply
        self._reader = _Demux(self.sock, max_frame=max_reply)
        self._writer = _Writer(self.sock)
        self.pid = 0
        self.uid = -1
        self._seq = 0

    def stale(self) -> bool:
        """Whether the stream has something to read while idle: the guest died (EOF) or wrote
        out of turn. Either way the channel cannot be trusted for the next request."""
        try:
            ready, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(ready) or bool(self._reader.raw) or bool(self._reader.out)

    def request(self, req: dict[str, Any], timeout: float | None,
                max_bytes: int | None = None) -> dict[str, Any]:
        """Send `req`, return the guest's reply to it. Anything but a well-formed reply that
        echoes this request's id breaks the channel (the sandbox then replaces its container),
        and so does a reply over `max_bytes` (default: the channel's `max_reply`)."""
        self._seq += 1
        self.sock.settimeout(timeout)
        write_message(self._writer, dict(req, id=self._seq))
        limit = self.max_reply if max_bytes is None else max_bytes
        self._reader.max_frame = limit
        header = self._reader.read(4)
        (size,) = struct.unpack(">I", header)
        if size > limit:
            raise ReplyTooLarge(f"a reply of {size} bytes from the sandbox is over the budget "
                                f"of {limit} bytes")
        try:
            reply = json.loads(self._reader.read(size).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise ChannelBroken(f"malformed reply from the sandbox: {e}") from e
        if not isinstance(reply, dict) or reply.get("id") != self._seq:
            raise ChannelBroken("the guest's reply does not answer this request")
        return reply

    def close(self) -> None:
        for f in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close,
                  self._resp.close):
            with contextlib.suppress(Exception):
                f()


class ExecStream(Stream):
    """A process started with Docker's exec API, attached through a hijacked socket: raw
    stdin and stdout (stderr frames are logged). What `DockerSandbox.open_stream` returns."""

    def __init__(self, api: Any, container_id: str, user: str, workdir: str, argv: list[str],
                 env: dict[str, str] | None = None) -> None:
        exec_id = api.exec_create(container_id, argv, stdin=True, stdout=True, stderr=True,
                                  tty=False, user=user, workdir=workdir, environment=env or {})
        resp = api.exec_start(exec_id["Id"], socket=True)
        self.sock: socket.socket = getattr(resp, "_sock", resp)
        self._resp = resp
        self._reader = _Demux(self.sock)
        self._writer = _Writer(self.sock)
        self._closed = False

    def write(self, data: bytes) -> None:
        self.sock.settimeout(60)
        self._writer.write(data)

    def read(self, timeout: float | None) -> bytes:
        return self._reader.read_some(timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for f in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close,
                  self._resp.close):
            with contextlib.suppress(Exception):
                f()


# ----------------------------------------------------------------------------- fallback
class ExecFallback:
    """Docker exec per command, archives for files: for images without python3. Slow (tens of
    ms per call); `kill_all` and snapshots use sh, tar and /proc from the image."""

    def __init__(self, api: Any, container_id: str, user: str, workdir: str,
                 has_timeout: bool) -> None:
        self.api, self.cid, self.user, self.workdir = api, container_id, user, workdir
        self.has_timeout = has_timeout

    def run(self, argv: list[str], *, timeout: float | None = 60, cwd: str | None = None,
            env: dict[str, str] | None = None, stdin: bytes | None = None,
            max_output: int = 1 << 20,
            user: str | None = None) -> dict[str, Any]:
        if timeout is not None and self.has_timeout:
            argv = ["timeout", "-s", "KILL", f"{max(timeout, 0.001):.3f}", *argv]
        import docker.errors

        start = time.monotonic()
        try:
            exec_id = self.api.exec_create(
                self.cid, argv, stdin=stdin is not None, stdout=True, stderr=True,
                user=self.user if user is None else user, workdir=cwd or self.workdir,
                environment=env)["Id"]
            resp = self.api.exec_start(exec_id, socket=True)
        except docker.errors.DockerException as e:
            raise InfraError(f"Docker exec in sandbox container {self.cid[:12]} failed ({e}); "
                             "if the container is gone, create a new sandbox") from e
        sock = getattr(resp, "_sock", resp)
        try:
            if stdin is not None:
                sock.sendall(stdin)
                sock.shutdown(socket.SHUT_WR)
            deadline = None if timeout is None else start + timeout + 10
            out, err = _read_stream_split(sock, max_output, deadline)
        finally:
            sock.close()
        info = self.api.exec_inspect(exec_id)
        duration = time.monotonic() - start
        code = info.get("ExitCode")
        code = 137 if code is None else int(code)
        timed_out = timeout is not None and code == 137 and duration >= timeout
        return {"exit_code": code, "stdout": out, "stderr": err, "timed_out": timed_out,
                "duration_s": duration}

    def sh(self, script: str, *args: str, user: str | None = None) -> dict[str, Any]:
        r = self.run(["sh", "-c", script, "sh", *args], timeout=600, user=user)
        if r["exit_code"] != 0:
            raise OSError(r["stderr"].decode("utf-8", "replace").strip() or f"{script!r} failed")
        return r

    def put(self, dest: str, tar: bytes) -> None:
        """Extract `tar` into sandbox directory `dest` (created as the run user first)."""
        self.sh('mkdir -p "$1"', dest)
        self.api.put_archive(self.cid, dest, tar)

    def archive(self, path: str) -> tuple[str, bytes]:
        """Docker's tar of `path`, whose member names start with the basename (returned)."""
        import docker.errors

        try:
            stream, _ = self.api.get_archive(self.cid, path)
        except docker.errors.NotFound:
            raise FileNotFoundError(f"no such file in the sandbox: {path}") from None
        return posixpath.basename(path), b"".join(stream)

    def read(self, path: str) -> bytes:
        name, data = self.archive(path)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = tar.getmember(name)
            if member.isdir():
                raise IsADirectoryError(f"{path} is a directory")
            f = tar.extractfile(member)
            return f.read() if f else b""

    def kill_all(self, keep: list[int]) -> None:
        spare = " ".join(str(p) for p in [1, *keep])
        self.sh('for d in /proc/[0-9]*; do p=${d#/proc/}; case " $0 $$ $PPID " in *" $p "*) ;; '
                '*) kill -9 "$p" 2>/dev/null;; esac; done; true'.replace("$0", spare))

    def snapshot(self, name: str, path: str) -> None:
        self.sh('mkdir -p "$1" && tar -C "$2" -cf "$1/$3.tar" .', SNAPSHOT_DIR, path, name)

    def restore(self, name: str, path: str) -> None:
        self.sh('find "$2" -mindepth 1 -maxdepth 1 -exec rm -rf {} + && '
                'tar -C "$2" -xf "$1/$3.tar"', SNAPSHOT_DIR, path, name)


def _read_stream_split(sock: socket.socket, limit: int,
                       deadline: float | None) -> tuple[bytes, bytes]:
    """Read a multiplexed exec stream to its end, capping stdout and stderr separately."""
    out, err = Capped(limit), Capped(limit)
    raw = bytearray()
    while True:
        if deadline is not None:
            sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            chunk = sock.recv(1 << 16)
        except OSError:
            break
        if not chunk:
            break
        raw += chunk
        while len(raw) >= 8:
            size = struct.unpack(">I", raw[4:8])[0]
            if size > DEFAULT_MAX_REPLY:  # not Docker's framing: stop reading
                return out.value(), err.value()
            if len(raw) < 8 + size:
                break
            (err if raw[0] == _STDERR else out).add(bytes(raw[8:8 + size]))
            del raw[:8 + size]
    return out.value(), err.value()


def tar_one(name: str, data: bytes, *, mode: int = 0o644, uid: int = 0, gid: int = 0) -> bytes:
    """An in-memory tar holding one file (for Docker's put_archive)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.uid, info.gid = len(data), mode, uid, gid
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_files(files: list[tuple[str, bytes]]) -> bytes:
    """An in-memory tar of root-owned 0644 files (name, data), for Docker's put_archive."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_dir_entry(name: str, *, mode: int = 0o755, uid: int = 0, gid: int = 0) -> bytes:
    """An in-memory tar holding one directory entry: put_archive applies its owner and mode,
    which is how a workdir is made writable without CAP_CHOWN in the container."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, mode, uid, gid
        info.mtime = int(time.time())
        tar.addfile(info)
    return buf.getvalue()


def extract_as(data: bytes, prefix: str, name: str, dest: Path) -> list[str]:
    """Extract a sandbox's tar of one path (members named `prefix`, `prefix/...`) into host
    directory `dest`: a file as `dest/name`, a directory's contents into `dest`. The content
    is untrusted: `skyhub.sandbox.extract` parses and writes it (never `tarfile`'s
    extraction), leaving out links that leave the tree and special files; returns those."""
    return extract(data, dest, prefix=prefix, name=name)


#: the guest's error types a request raises again on the host as themselves
_FILE_ERRORS = {"FileNotFoundError": FileNotFoundError, "IsADirectoryError": IsADirectoryError,
                "NotADirectoryError": NotADirectoryError, "PermissionError": PermissionError,
                "FileExistsError": FileExistsError, "OSError": OSError}


def reply_error(reply: dict[str, Any], op: str) -> Exception:
    """The exception a failed guest reply stands for: the same OSError (errno, filename) for
    a file error, InfraError for anything else."""
    kind = _FILE_ERRORS.get(str(reply.get("type")))
    if kind is not None and isinstance(reply.get("errno"), int):
        return kind(reply["errno"], str(reply.get("strerror") or ""),
                    *([str(reply["filename"])] if reply.get("filename") else []))
    if kind is not None:
        return kind(reply.get("error", ""))
    return InfraError(f"sandbox guest {op!r} failed: {reply.get('type')}: {reply.get('error')}")


def tar_owned(src: Path, uid: int, gid: int) -> bytes:
    """A tar of the host path `src` (a directory as ".", a file by its name) whose members
    belong to `uid`:`gid` (what an upload gives the sandbox's user)."""
    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(src, arcname="." if src.is_dir() else src.name, filter=owned)
    return buf.getvalue()


def guest_setup_tar() -> bytes:
    """The guest and a root-owned snapshot directory, for images that are not skyhub's."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in (posixpath.dirname(GUEST_PATH), SNAPSHOT_DIR):
            entry = tarfile.TarInfo(d.lstrip("/"))
            entry.type, entry.mode, entry.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
            tar.addfile(entry)
        src = guest_app.zipapp()
        info = tarfile.TarInfo(GUEST_PATH.lstrip("/"))
        info.size, info.mode, info.mtime = len(src), 0o644, int(time.time())
        tar.addfile(info, io.BytesIO(src))
    return buf.getvalue()

