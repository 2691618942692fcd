"""The picklable `env_fn`s `make_vec` builds: an env from its spec, or a remote session.

Below the executors that place them (the Ray executor reads an `EnvFactory`'s spec for the
resources one env needs), so that they need not import the package's `__init__`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyhub.env import TextEnv
    from skyhub.registry import EnvSpec


class EnvFactory:
    """A picklable `env_fn`: builds the env from its spec, so a worker process needs neither
    the parent's registry nor its plugins loaded."""

    def __init__(self, spec: EnvSpec, kwargs: dict[str, Any]) -> None:
        self.spec, self.kwargs = spec, kwargs

    def __call__(self) -> TextEnv:
        return self.spec.make(**self.kwargs)

    def __repr__(self) -> str:
        return f"EnvFactory({self.spec.id!r}, {self.kwargs!r})"


class RemoteFactory:
    """A picklable `env_fn` for an env served by `skyhub serve` (one session per env)."""

    def __init__(self, env_id: str, url: str, token: str | None,
                 kwargs: dict[str, Any]) -> None:
        self.env_id, self.url, self.token, self.kwargs = env_id, url, token, kwargs

    def __call__(self) -> TextEnv:
        from skyhub.remote.client import make_remote

        return make_remote(self.env_id, self.url, token=self.token, **self.kwargs)

    def __repr__(self) -> str:
        return f"RemoteFactory({self.env_id!r}, {self.url!r}, {self.kwargs!r})"


__all__ = ["EnvFactory", "RemoteFactory"]
