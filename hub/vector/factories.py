"""The picklable `env_fn`s `make_vec` builds: an env from its spec, or a remote session.

Below the executors that place them (the Ray executor reads an `EnvFactory`'s spec for the
resources one env needs), so that they need not import the package's `__init__`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from skyhub.env import TextEnv
    from skyhub.fork import Played
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


class ForkedFactory:
    """The `env_fn` of a slot that `VectorEnv.fork` made: first the child forked in this
    process (threads), or a fresh env replayed to the parent's turn (in the worker's process:
    picklable when `parent_fn` and the record's actions are); afterwards (the env was
    recreated after a crash, and will be reset) a fresh env from `parent_fn`."""

    def __init__(self, parent_fn: Callable[[], TextEnv], *, child: TextEnv | None = None,
                 played: Played | None = None) -> None:
        self.parent_fn, self.child, self.played = parent_fn, child, played

    def __call__(self) -> TextEnv:
        from skyhub.fork import replay_into

        child, played = self.child, self.played
        self.child = self.played = None
        if child is not None:
            return child
        env = self.parent_fn()
        if played is not None:
            try:
                replay_into(env, played)
            except BaseException:
                env.close()
                raise
        return env

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "child": None}  # an env object never crosses processes

    def __repr__(self) -> str:
        return f"ForkedFactory({self.parent_fn!r})"


__all__ = ["EnvFactory", "ForkedFactory", "RemoteFactory"]
