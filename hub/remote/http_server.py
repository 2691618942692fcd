"""Running an ASGI app with uvicorn, for skyhub's servers (`skyhub serve`, `skyhub view`, the
Tinker server, the OpenEnv adapter): a config whose connections are guarded
(`skyhub.remote.guard`), the env server's WebSocket settings, and a server in a thread of
this process (`UvicornThread`). uvicorn is imported only when a server is made.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

from skyhub.remote.guard import HEADER_TIMEOUT_S, guarded_http_protocol


def uvicorn_config(app: Any, host: str, port: int, *, log_level: str,
                   header_timeout_s: float = HEADER_TIMEOUT_S,
                   max_connections: int | None = None, **kwargs: Any) -> Any:
    """A uvicorn config whose connections are guarded (`skyhub.remote.guard`): a deadline
    for the request head and a cap on connections. `kwargs`: more `uvicorn.Config` options."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level=log_level,
                          http=guarded_http_protocol(header_timeout_s, max_connections),
                          **kwargs)


def ws_server(app: Any, host: str, port: int, max_message_bytes: int, log_level: str,
              header_timeout_s: float, max_connections: int | None) -> Any:
    """The uvicorn server of `skyhub serve`: guarded, with WebSocket limits and pings."""
    import uvicorn

    # The transport limit sits above ours so that an oversized message gets a clear error
    # reply rather than a bare 1009 close.
    return uvicorn.Server(uvicorn_config(
        app, host, port, log_level=log_level, header_timeout_s=header_timeout_s,
        max_connections=max_connections, ws_max_size=max(4 * max_message_bytes, 1 << 20),
        ws_ping_interval=20.0, ws_ping_timeout=20.0))


class UvicornThread:
    """A uvicorn server in a daemon thread of this process: `start` returns once it listens
    (with `port=0`, `port` is then the one it got); `stop` ends it. A context manager."""

    def __init__(self, server: Any, host: str, port: int, name: str,
                 sockets: list[Any] | None = None) -> None:
        self.server, self.host, self.port = server, host, port
        self.sockets = list(sockets or ())
        run = self.server.run if sockets is None else functools.partial(self.server.run,
                                                                         sockets=sockets)
        self.thread = threading.Thread(target=run, daemon=True, name=name)

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> Any:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server on {self.host}:{self.port} did not start "
                                   "(port in use? see the log above)")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        for sock in self.sockets:  # ours: uvloop serves a copy and leaves it open
            sock.close()

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
