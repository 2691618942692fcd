"""Long-running processes on this machine: `PipeStream` (raw bytes) and `PipeChannel`
(skyhub's message framing on top of one).

What `LocalSandbox.open_stream` and `LocalSandbox.spawn` return: the process (usually
bubblewrap around a kernel bridge or a shell) is talked to over its stdin/stdout. Reads have
deadlines (select), so a hung process is a timeout, never a hung caller, and replies have a
byte budget (`max_frame`), so a hijacked process announcing a 4 GiB frame is a broken
channel, never a 4 GiB buffer on the host.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import struct
import subprocess
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from skyhub.errors import ChannelBroken, ChannelTimeout
from skyhub.sandbox.base import Channel, Stream
from skyhub.sandbox.guest.procs import kill_tree

#: The largest reply a `PipeChannel` accepts by default (bytes of one frame's JSON body).
DEFAULT_MAX_FRAME = 64 << 20


class PipeStream(Stream):
    """Start `argv`; its stderr goes to `stderr_log` (a host file) or nowhere."""

    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: str,
                 preexec_fn: Callable[[], None] | None = None,
                 stderr_log: str | None = None) -> None:
        self.stderr_log = stderr_log
        stderr: BinaryIO | int = (open(stderr_log, "ab")  # noqa: SIM115  (closed below)
                                  if stderr_log else subprocess.DEVNULL)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=stderr, cwd=cwd, env=env, preexec_fn=preexec_fn,
                                     start_new_session=True)
        if not isinstance(stderr, int):
            stderr.close()  # the child has its own copy
        self.pid = self.proc.pid
        self._closed = False

    def write(self, data: bytes) -> None:
        if self._closed:
            raise ChannelBroken("the stream is closed")
        try:
            self.proc.stdin.write(data)  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except (OSError, ValueError) as e:
            raise ChannelBroken(f"process {self.pid}: {e!r}") from e

    def read(self, timeout: float | None) -> bytes:
        if self._closed:
            raise ChannelBroken("the stream is closed")
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return b""
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=1)
            code = self.proc.poll()
            raise ChannelBroken(f"process {self.pid} ended" + (
                "" if code is None else f" with exit code {code}") + self._stderr_tail())
        return chunk

    def _stderr_tail(self, limit: int = 2000) -> str:
        if not self.stderr_log:
            return ""
        try:
            with open(self.stderr_log, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
                tail = f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f"; its stderr ends with:\n{tail}" if tail else ""

    def close(self) -> None:
        """Close stdin (a well-behaved server exits and cleans up), then kill what is left."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)
        kill_tree(self.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdout.close()  # type: ignore[union-attr]


class PipeChannel(Channel):
    """skyhub's framing (4-byte big-endian length + UTF-8 JSON) over a `PipeStream`. Not
    thread-safe: one request at a time. A reply longer than `max_frame` bytes breaks the
    channel (`ChannelBroken`, before any of its body is read): the caller restarts the
    process or reports the failure."""

    def __init__(self, stream: PipeStream, *, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.stream = stream
        self.pid = stream.pid
        self.max_frame = max_frame
        self._buf = bytearray()
        self._seq = 0
        self._broken = ""

    def _read(self, n: int, deadline: float | None) -> bytes:
        while len(self._buf) < n:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise ChannelTimeout(f"no reply from process {self.pid} in time")
            self._buf += self.stream.read(wait)
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def request(self, req: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        if self._broken:  # what is left in the pipe is no longer in step with requests
            raise ChannelBroken(self._broken)
        self._seq += 1
        body = json.dumps(dict(req, id=self._seq)).encode("utf-8")
        self.stream.write(struct.pack(">I", len(body)) + body)
        deadline = None if timeout is None else time.monotonic() + timeout
        (size,) = struct.unpack(">I", self._read(4, deadline))
        if size > self.max_frame:
            self._buf.clear()
            self._broken = (f"process {self.pid} announced a reply of {size} bytes, over the "
                            f"frame budget of {self.max_frame} bytes")
            raise ChannelBroken(self._broken)
        try:
            reply = json.loads(self._read(size, deadline).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise ChannelBroken(f"malformed reply from process {self.pid}: {e}") from e
        if not isinstance(reply, dict) or reply.get("id") != self._seq:
            raise ChannelBroken(f"process {self.pid} answered out of turn")
        return reply

    def close(self) -> None:
        self.stream.close()


__all__ = ["PipeChannel", "PipeStream"]
