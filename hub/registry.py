"""The env registry: `register`, `spec`, `list_envs`, and entry-point plugins.

Env families are found, never imported by core: any installed distribution (skyhub itself
included) declares a module or callable in the entry-point group `skyhub.envs`; the first
call that needs the registry loads them all. Registering stores only an entry point
(`"package.module:Class"`), so listing envs imports no heavy dependency.

`spec(env_id).make(**kwargs)` creates an env, refusing a kwarg it does not take (the check,
which reads the env's signatures and source, is `skyhub.env_kwargs`). `skyhub.make` is that,
or a client of an env served elsewhere (`remote=`): the registry knows nothing of
`skyhub.remote`.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import threading
import types
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gymnasium.envs.registration import EnvSpec as _GymEnvSpec
from gymnasium.error import Error as GymnasiumError

from skyhub import gymnasium_ids
from skyhub.env_kwargs import check_kwargs, load_entry_point
from skyhub.errors import EnvNotFound, MissingDependency, RegistrationError

if TYPE_CHECKING:
    from skyhub.env import TextEnv

ENTRY_POINT_GROUP = "skyhub.envs"
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$")


@dataclass
class EnvSpec(_GymEnvSpec):
    """What `register` stored about an env: a gymnasium `EnvSpec` plus hub metadata.

    Being a gymnasium `EnvSpec`, it is what `env.spec` holds, so gymnasium tools that
    re-create an env from its spec (`check_env`) get a skyhub env back.
    """

    description: str = ""
    tags: tuple[str, ...] = ()
    #: Where the registration came from: a module name or `plugin:<distribution>`.
    source: str = ""
    #: What one instance needs where it is placed (`make_vec(executor="ray")` asks Ray for
    #: it): `num_cpus`, `num_gpus`, `memory` (bytes), custom resources. Empty: the default.
    resources: dict[str, Any] = field(default_factory=dict)

    def make(self, **kwargs: Any) -> TextEnv:
        """Create the env with the registered kwargs updated by `kwargs`."""
        return _create(self, kwargs)

    @property
    def family(self) -> str:
        return self.id.split("/")[-1].split("-")[0]


_lock = threading.RLock()
_registry: dict[str, EnvSpec] = {}
_plugins_loaded = False
_plugin_errors: dict[str, str] = {}


def register(env_id: str, entry_point: str | Callable[..., TextEnv], *,
             kwargs: dict[str, Any] | None = None, description: str = "",
             tags: Iterable[str] = (), override: bool = False,
             nondeterministic: bool = False,
             resources: dict[str, Any] | None = None) -> EnvSpec:
    """Register an env so that `skyhub.make(env_id)` creates it.

    `entry_point` is `"module:attr"` (imported only when the env is made) or a callable
    returning a `TextEnv`; `kwargs` are defaults that `make(env_id, **kw)` overrides.
    Registering an id that exists raises `RegistrationError` unless `override=True`.
    `resources` is what one instance needs when an executor places it (Ray): e.g.
    `{"num_cpus": 1, "memory": 2**30}`.
    """
    if not isinstance(env_id, str) or not _ID_RE.match(env_id):
        raise RegistrationError(f"invalid env id {env_id!r}: use letters, digits and '-', like "
                                "'<family>-<dataset>' (e.g. 'sql-spider')")
    if isinstance(entry_point, str):
        if entry_point.count(":") != 1 or not all(entry_point.split(":")):
            raise RegistrationError(f"entry point {entry_point!r} for {env_id!r} must look like "
                                    "'package.module:ClassName'")
    elif not callable(entry_point):
        raise RegistrationError(f"entry point for {env_id!r} must be a 'module:attr' string or "
                                f"a callable, got {type(entry_point).__name__}")
    try:
        new = EnvSpec(id=env_id, entry_point=entry_point, kwargs=dict(kwargs or {}),
                      nondeterministic=nondeterministic, description=description,
                      tags=tuple(tags), source=_caller_module(),
                      resources=dict(resources or {}))
    except GymnasiumError as e:  # ids gymnasium cannot parse, e.g. 'a/b/c'
        raise RegistrationError(f"invalid env id {env_id!r}: {e}") from None
    with _lock:
        old = _registry.get(env_id)
        if old is not None and not override:
            raise RegistrationError(
                f"env id {env_id!r} is already registered (entry point {_ep_name(old)}, from "
                f"{old.source or 'unknown'}). Pick another id, or pass override=True to "
                "replace it.")
        _registry[env_id] = new
    gymnasium_ids.mirror(env_id)
    return new


def spec(env_id: str) -> EnvSpec:
    """The `EnvSpec` registered for `env_id`; `EnvNotFound` naming the closest ids if none."""
    _ensure_plugins()
    with _lock:
        found = _registry.get(env_id)
        known = list(_registry)
    if found is not None:
        return found
    close = tuple(difflib.get_close_matches(env_id, known, n=3, cutoff=0.5))
    if not close:  # same family, e.g. 'sql-spidr' -> every 'sql-*'
        family = str(env_id).split("-")[0]
        close = tuple(k for k in known if k.split("-")[0] == family)[:3]
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    failed = (" Some plugins failed to load: " + "; ".join(f"{k}: {v}" for k, v in
              _plugin_errors.items()) + ".") if _plugin_errors else ""
    raise EnvNotFound(
        f"no env registered as {env_id!r}.{hint} 'skyhub list' shows every registered env; "
        f"an env from another package appears once that package is installed.{failed}",
        env_id=str(env_id), suggestions=close)


def list_envs() -> list[EnvSpec]:
    """Every registered env (plugins included), sorted by id."""
    _ensure_plugins()
    with _lock:
        return sorted(_registry.values(), key=lambda s: s.id)


def unregister(env_id: str) -> None:
    """Remove an env (for tests and interactive work); unknown ids are ignored."""
    with _lock:
        _registry.pop(env_id, None)
    gymnasium_ids.unmirror(env_id)


def plugin_errors() -> dict[str, str]:
    """Plugins (entry-point names) that failed to load, with the error; shown by `skyhub list`."""
    _ensure_plugins()
    return dict(_plugin_errors)


def load_plugins(*, reload: bool = False) -> None:
    """Load every `skyhub.envs` entry point (done automatically on first use).

    A plugin that fails is reported with a warning and in `plugin_errors()`; the others and
    the built-in envs still load.
    """
    global _plugins_loaded
    from importlib.metadata import entry_points

    with _lock:
        if _plugins_loaded and not reload:
            return
        _plugins_loaded = True
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist is not None else "?"
            key = f"{ep.name} ({dist})"
            try:
                obj = ep.load()
                if not isinstance(obj, types.ModuleType) and callable(obj):
                    obj()
                _plugin_errors.pop(key, None)
            except Exception as e:  # a broken plugin must not break the hub
                _plugin_errors[key] = f"{type(e).__name__}: {e}"
                warnings.warn(f"skyhub: env plugin {ep.name!r} = {ep.value!r} from distribution "
                              f"{dist!r} failed to load ({type(e).__name__}: {e}); its envs are "
                              "unavailable. Reinstall or fix that package.", stacklevel=2)


def _ensure_plugins() -> None:
    if not _plugins_loaded:
        load_plugins()


def _create(s: EnvSpec, kwargs: dict[str, Any]) -> TextEnv:
    from skyhub.env import TextEnv

    merged = {**s.kwargs, **kwargs}
    check_kwargs(s, kwargs)
    try:
        creator = (load_entry_point(s.entry_point) if isinstance(s.entry_point, str)
                   else s.entry_point)
        env = creator(**merged)
    except ModuleNotFoundError as e:
        raise MissingDependency(
            f"{s.id!r} needs the Python package {e.name!r}, which is not installed. For a built-in "
            f"family: pip install 'skyhub[{s.family}]'; for a plugin, install its dependencies."
        ) from e
    if not isinstance(env, TextEnv):
        raise RegistrationError(f"entry point {_ep_name(s)} of {s.id!r} returned "
                                f"{type(env).__name__}, not a skyhub.TextEnv subclass")
    env.spec = dataclasses.replace(s, kwargs=merged)
    return env


def _ep_name(s: EnvSpec) -> str:
    ep = s.entry_point
    return ep if isinstance(ep, str) else getattr(ep, "__qualname__", repr(ep))


def _caller_module() -> str:
    import sys

    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("skyhub.registry"):
        frame = frame.f_back  # pragma: no cover
    return frame.f_globals.get("__name__", "") if frame is not None else ""


__all__ = ["EnvSpec", "list_envs", "load_plugins", "plugin_errors", "register", "spec",
           "unregister"]


# gymnasium is loaded now (this module imports it): skyhub's ids go into its registry as
# `skyhub/<id>` (see skyhub.gymnasium_ids; its import hook leaves this case to us)
_REGISTRY_LOADED = True
gymnasium_ids.enable()
