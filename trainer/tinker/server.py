"""`skyhub tinker serve`: an HTTP server that speaks the official `tinker` SDK's protocol.

A Tinker script (`tinker.ServiceClient(base_url=...)`, `create_lora_training_client`,
`forward_backward`, `optim_step`, `sample`, ...) runs unchanged against it, training on
this machine's CPU or GPU. This module runs it (`serve`, `TinkerServerThread`); the parts:

- `service.py`: `TinkerService`, the state (sessions, training clients, samplers,
  checkpoints, each owned by the principal that made it) and the operations on it;
- `routes.py`: `create_app`, the HTTP routes of the SDK's protocol, the API key check and
  the request body limit;
- `jobs.py`, `models.py`, `losses.py`, `wire.py`: see the package's docstring.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skyhub.remote.guard import is_loopback
from skyhub.remote.http_server import UvicornThread
from skyhub.trainer.tinker.routes import create_app
from skyhub.trainer.tinker.service import TinkerService, _keys

__all__ = ["TinkerServerThread", "serve"]


def _checked_keys(api_key: str | Sequence[str] | None, host: str) -> tuple[str, ...]:
    """The keys to require (`$SKYHUB_TINKER_API_KEY` when none given, comma separated),
    after refusing what cannot work or is unsafe."""
    from skyhub.errors import UsageError

    keys = _keys(api_key) or _keys([k.strip() for k in
                                    os.environ.get("SKYHUB_TINKER_API_KEY", "").split(",")])
    bad = [k for k in keys if not k.startswith("tml-")]
    if bad:
        raise UsageError("an API key must start with 'tml-': the tinker SDK refuses to send "
                         "any other (e.g. --api-key tml-mysecret)")
    if not keys and not is_loopback(host):
        raise UsageError(f"refusing to serve on {host!r} without an API key: pass "
                         "--api-key tml-SECRET (or set SKYHUB_TINKER_API_KEY), or bind to "
                         "127.0.0.1")
    return keys


def serve(base_model: str, *, host: str = "127.0.0.1", port: int = 8000,
          state_dir: str | Path = "tinker-state", api_key: str | Sequence[str] | None = None,
          log_level: str = "info", **service_kwargs: Any) -> None:
    """Serve until interrupted. A non-loopback `host` needs an API key (`--api-key`, one per
    tenant, or `$SKYHUB_TINKER_API_KEY`): anyone who reaches the port could train and
    sample. `service_kwargs`: `TinkerService`'s (engine, limits)."""
    import uvicorn

    keys = _checked_keys(api_key, host)
    service = TinkerService(base_model, state_dir, api_key=keys, **service_kwargs)
    uvicorn.run(create_app(service), host=host, port=port, log_level=log_level)


class TinkerServerThread(UvicornThread):
    """The server in a background thread (tests, notebooks):

        with TinkerServerThread(base_model=path, state_dir=tmp) as srv:
            client = tinker.ServiceClient(base_url=srv.url, api_key="tml-local")

    `service_kwargs` are `TinkerService`'s (api_key, threads, limits, ...).
    """

    def __init__(self, base_model: str, state_dir: str | Path, *, host: str = "127.0.0.1",
                 port: int = 0, **service_kwargs: Any) -> None:
        import uvicorn

        self.service = TinkerService(base_model, state_dir, **service_kwargs)
        config = uvicorn.Config(create_app(self.service), host=host, port=port,
                                log_level="warning", lifespan="off")
        super().__init__(uvicorn.Server(config), host, port, "skyhub-tinker")

    @property
    def url(self) -> str:
        return self.http_url

    def stop(self) -> None:
        super().stop()
        self.service.close()
