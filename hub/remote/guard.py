"""Who may call a local server, and how many may wait on it: the guards `skyhub serve` and
`skyhub view` share.

Callers (`OriginGate`, an ASGI middleware):
- `Host` must name this machine's loopback (`localhost`, `127.0.0.1`, `::1`, ...) or a name
  the operator allowed (`--allow-host`). A page on `evil.example` whose DNS answer flips to
  127.0.0.1 (DNS rebinding) reaches a loopback server with `Host: evil.example`, and the
  browser lets that page read the answers: refused (403).
- `Origin` is sent by browsers (on every WebSocket handshake, on cross-site requests) and by
  nothing else skyhub talks to. A request without one is a program (allowed); one from the
  server's own origin is its own page (allowed); any other origin is a web page the user
  happened to open, driving the server through the user's browser: refused (403) unless the
  operator allowed that origin (`--allow-origin`).

Connections (`guarded_http_protocol`, `listen_socket`):
- a connection must send a complete request head within `header_timeout_s` of opening (or
  of its previous response): half-sent requests no longer hold a file descriptor forever;
- at most `max_connections` connections are in the HTTP phase at once (sized from
  `RLIMIT_NOFILE` by default); at the cap, the oldest connection still waiting for its
  request head is dropped to make room (so a flood of idle sockets cannot lock a real
  client out); upgraded WebSockets leave the count (the session limits govern them);
- `accept()` out of descriptors (EMFILE) drops the pending connections instead of raising
  into asyncio, which logged a traceback per attempt (2048 per event-loop pass on Python
  3.11: 2.2 million log lines in 30 s); this is logged once per interval, with a count.

Nothing here imports uvicorn or FastAPI at module level.

Over ~400 lines, for a reason: one job, who reaches a local server: the caller policy and
the connection limits guard the same front door of both servers and are checked together.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import ipaddress
import logging
import os
import resource
import socket
import time
import urllib.parse
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("skyhub.remote.guard")

#: Seconds a connection has to send its request head.
HEADER_TIMEOUT_S = 10.0
#: Descriptors left to the rest of the process (env sessions, files, sandboxes) when the
#: connection cap is derived from RLIMIT_NOFILE.
FD_RESERVE = 64
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class Throttled:
    """A log line that can be provoked from outside, written at most once per `interval_s`
    with the number of occurrences it stands for: an attacker cannot grow the log faster
    than the clock does."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0) -> None:
        self.logger, self.interval_s = logger, interval_s
        self._last: dict[str, float] = {}
        self._count: collections.Counter[str] = collections.Counter()

    def __call__(self, key: str, level: int, msg: str, *args: Any) -> None:
        self._count[key] += 1
        now = time.monotonic()
        if now - self._last.get(key, -1e18) < self.interval_s:
            return
        self._last[key] = now
        n, self._count[key] = self._count[key], 0
        suffix = f" ({n} times in the last {self.interval_s:g} s)" if n > 1 else ""
        self.logger.log(level, msg + suffix, *args)


_throttled = Throttled(log)


# ----------------------------------------------------------------------------- Host, Origin
def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address) only accepts connections from this machine."""
    host = host.strip("[]").rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a hostname other than localhost may resolve to anything


def host_name(value: str) -> str:
    """The name in a `Host` header, without its port: `[::1]:80` -> `::1`."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    name, sep, port = value.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        value = name
    return value.rstrip(".")


def _normal_origin(origin: str) -> str:
    return origin.strip().lower().rstrip("/")


@dataclass(frozen=True)
class CallerPolicy:
    """Which `Host` and `Origin` values a server answers (see the module docstring).

    `allow_hosts`: names (or addresses) besides loopback; `"*"` turns the Host check off.
    `allow_origins`: exact origins such as `https://notebook.example:8888`; `"*"` allows
    any web page (only for a server that holds nothing a page should not see).
    """

    allow_hosts: frozenset[str] = frozenset()
    allow_origins: frozenset[str] = frozenset()

    @classmethod
    def make(cls, allow_hosts: Iterable[str] = (), allow_origins: Iterable[str] = (), *,
             bound_to: str | None = None) -> CallerPolicy:
        """A policy; `bound_to`, the address the server listens on, is allowed as a Host
        when it is a specific address (a Host that is an IP address cannot come from DNS
        rebinding: the browser connects to that very address)."""
        hosts = {host_name(h) for h in allow_hosts if h.strip()}
        if bound_to and bound_to not in ("0.0.0.0", "::", ""):
            hosts.add(host_name(bound_to))
        return cls(frozenset(hosts), frozenset(_normal_origin(o) for o in allow_origins
                                               if o.strip()))

    def host_ok(self, host: str | None) -> bool:
        if host is None or "*" in self.allow_hosts:
            return True  # no Host at all: HTTP/1.0 from a program, not a browser
        name = host_name(host)
        return is_loopback(name) or name in self.allow_hosts

    def origin_ok(self, origin: str | None, host: str | None) -> bool:
        if origin is None:
            return True  # not a browser
        o = _normal_origin(origin)
        if "*" in self.allow_origins or o in self.allow_origins:
            return True
        parts = urllib.parse.urlsplit(o)
        # the server's own page (the Host was checked first)
        return parts.scheme in ("http", "https") and host is not None \
            and parts.netloc == host.strip().lower()

    def refusal(self, host: str | None, origin: str | None) -> str | None:
        """Why a request with these headers is refused; None when it is not."""
        if not self.host_ok(host):
            name = host_name(host or "")
            return (f"Host {name[:100]!r} is not served here: this server answers loopback "
                    "names only (a web page could otherwise reach it through DNS rebinding). "
                    f"If clients reach it by that name, start it with --allow-host {name[:100]}")
        if not self.origin_ok(origin, host):
            o = (origin or "")[:100]
            return (f"requests from the web page at {o!r} are refused: a page open in a "
                    "browser must not drive this server. Programs send no Origin and are "
                    f"served; to allow a page you trust, start it with --allow-origin {o}")
        return None


class OriginGate:
    """ASGI middleware: refuses (403, before the app sees it) an HTTP request or a
    WebSocket handshake whose `Host` or `Origin` the policy does not allow."""

    def __init__(self, app: Any, policy: CallerPolicy) -> None:
        self.app, self.policy = app, policy

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = origin = None
        for k, v in scope.get("headers") or ():
            if k == b"host":
                host = v.decode("latin-1")
            elif k == b"origin":
                origin = v.decode("latin-1")
        why = self.policy.refusal(host, origin)
        if why is None:
            await self.app(scope, receive, send)
            return
        _throttled("refused:" + ("host" if not self.policy.host_ok(host) else "origin"),
                   logging.WARNING, "refused a %s: %s", scope["type"], why)
        await refuse(scope, receive, send, 403, why)


async def refuse(scope: dict[str, Any], receive: Any, send: Any, status: int,
                 detail: str) -> None:
    """Answer `status` with `{"detail": ...}`: an HTTP response, or for a WebSocket the
    handshake's HTTP response (where the server supports it; a bare 403 otherwise)."""
    import json

    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await receive()  # websocket.connect
    if "websocket.http.response" in (scope.get("extensions") or {}):
        await send({"type": "websocket.http.response.start", "status": status,
                    "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})


# ----------------------------------------------------------------------------- connections
def fd_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else int(soft)


def connection_cap(requested: int | None = None) -> int:
    """Connections allowed in the HTTP phase at once: `requested`, or half the descriptors
    this process may open (less a reserve) up to 4096; never more than the limit allows."""
    most = max(16, fd_limit() - FD_RESERVE)
    if requested is None:
        return max(16, min(4096, most // 2))
    if requested < 1:
        from skyhub.errors import UsageError

        raise UsageError(f"max_connections must be >= 1, got {requested}")
    if requested > most:
        log.warning("max_connections=%d is more than this process may open (RLIMIT_NOFILE "
                    "%d, %d kept for the rest); using %d. Raise `ulimit -n` for more",
                    requested, fd_limit(), FD_RESERVE, most)
        return most
    return requested


class _Tracker:
    """The HTTP-phase connections of one server, and those waiting for a request head in
    the order they started waiting (oldest first: the first to evict)."""

    def __init__(self, header_timeout_s: float, max_connections: int) -> None:
        self.header_timeout_s, self.max_connections = header_timeout_s, max_connections
        self.live: set[Any] = set()
        self.waiting: collections.OrderedDict[Any, asyncio.TimerHandle] = \
            collections.OrderedDict()

    def admit(self, conn: Any) -> None:
        if len(self.live) >= self.max_connections:
            if self.waiting:
                oldest = next(iter(self.waiting))
                self.drop(oldest)
                oldest.transport.abort()
                _throttled("evict", logging.WARNING, "%d connections open (the cap): "
                           "dropped the oldest one still waiting for its request",
                           self.max_connections)
            else:  # every connection is busy with a request: this one waits its turn
                _throttled("full", logging.WARNING, "%d connections open, all busy: refused "
                           "a new one", self.max_connections)
                conn.transport.abort()
                return
        self.live.add(conn)
        self.progress(conn)

    def progress(self, conn: Any) -> None:
        """Re-check `conn` after it received data or finished a response."""
        if conn not in self.live:
            return
        transport = conn.transport
        if transport is None or transport.is_closing() or transport.get_protocol() is not conn:
            self.drop(conn)  # closed, or upgraded to a WebSocket
            return
        cycle = getattr(conn, "cycle", None)
        if cycle is not None and not cycle.response_complete:
            self._stop_waiting(conn)  # a request is being served
        elif conn not in self.waiting:  # waiting for a request head: the clock starts now
            self.waiting[conn] = conn.loop.call_later(self.header_timeout_s, self.expire,
                                                      conn)

    def expire(self, conn: Any) -> None:
        if self.waiting.pop(conn, None) is None:
            return
        self.live.discard(conn)
        _throttled("timeout", logging.INFO, "closed a connection that sent no complete "
                   "request within %g s", self.header_timeout_s)
        conn.transport.abort()

    def _stop_waiting(self, conn: Any) -> None:
        timer = self.waiting.pop(conn, None)
        if timer is not None:
            timer.cancel()

    def drop(self, conn: Any) -> None:
        self._stop_waiting(conn)
        self.live.discard(conn)


def guarded_http_protocol(header_timeout_s: float = HEADER_TIMEOUT_S,
                          max_connections: int | None = None) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a request-head deadline and a connection cap (pass it as
    `uvicorn.Config(http=...)`; one class per server: it holds that server's count)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    if not header_timeout_s > 0:
        from skyhub.errors import UsageError

        raise UsageError(f"header_timeout_s must be > 0 seconds, got {header_timeout_s}")
    tracker = _Tracker(header_timeout_s, connection_cap(max_connections))

    class GuardedH11Protocol(H11Protocol):
        guard = tracker

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            tracker.admit(self)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            tracker.progress(self)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            tracker.progress(self)

        def connection_lost(self, exc: Exception | None) -> None:
            tracker.drop(self)
            super().connection_lost(exc)

    return GuardedH11Protocol


class ShedSocket(socket.socket):
    """A listening socket whose `accept()` never raises "out of descriptors" into asyncio.

    On EMFILE/ENFILE it frees a spare descriptor kept for the purpose, accepts and closes the
    pending connections (their clients see a reset at once instead of hanging in the
    backlog), takes the spare again and reports an empty backlog; one log line per
    interval says how many were dropped. (uvloop does the same in libuv and never calls
    this method.)"""

    _spare: int | None = None

    def arm(self) -> ShedSocket:
        self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        return self

    def accept(self) -> tuple[socket.socket, Any]:
        try:
            return super().accept()
        except OSError as e:
            if e.errno not in _OUT_OF_FDS:
                raise
            dropped = self._shed()
            _throttled("emfile", logging.WARNING, "out of file descriptors (%s) accepting "
                       "connections: dropped %d pending", errno.errorcode.get(e.errno, e.errno),
                       dropped)
            if self._spare is None:  # nothing freed: let asyncio pause accepting (1 s)
                raise
            raise BlockingIOError(errno.EAGAIN, "backlog shed") from None

    def _shed(self) -> int:
        dropped = 0
        if self._spare is None:
            return 0
        os.close(self._spare)
        self._spare = None
        try:
            while True:
                fd, _ = self._accept()  # type: ignore[attr-defined]
                os.close(fd)
                dropped += 1
        except OSError:
            pass  # the backlog is empty (EAGAIN), or descriptors ran out again
        try:
            self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._spare = None
        return dropped

    def close(self) -> None:
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
        super().close()


def listen_socket(host: str, port: int, backlog: int = 2048) -> ShedSocket:
    """A listening `ShedSocket` on host:port (port 0: a free one); `UsageError` saying what
    to change when it cannot bind."""
    from skyhub.errors import UsageError

    try:
        family, _, _, _, addr = socket.getaddrinfo(host.strip("[]") or None, port,
                                                   type=socket.SOCK_STREAM,
                                                   flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as e:
        raise UsageError(f"cannot listen on {host}:{port} ({e.strerror}): check --host") \
            from None
    sock = ShedSocket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        hint = ("another program listens there: pass --port N (or --port 0 for any free port)"
                if e.errno == errno.EADDRINUSE else "check --host and --port")
        raise UsageError(f"cannot listen on {host}:{port} ({e.strerror}): {hint}") from None
    sock.listen(backlog)
    sock.setblocking(False)
    return sock.arm()


def describe_hosts(policy: CallerPolicy) -> str:
    """What the Host check accepts, for a start-up line."""
    if "*" in policy.allow_hosts:
        return "any Host"
    extra = sorted(policy.allow_hosts)
    return "Host: loopback" + (f", {', '.join(extra)}" if extra else "")


def split_names(values: Collection[str] | None) -> list[str]:
    """`--allow-host a,b --allow-host c` -> [a, b, c]."""
    return [v.strip() for item in values or () for v in item.split(",") if v.strip()]


__all__ = ["HEADER_TIMEOUT_S", "CallerPolicy", "OriginGate", "ShedSocket", "Throttled",
           "connection_cap", "describe_hosts", "guarded_http_protocol", "host_name",
           "is_loopback", "listen_socket", "split_names"]
