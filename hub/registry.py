"""The env registry: `register`, `make`, `spec`, `list_envs`, and entry-point plugins.

Env families are found, never imported by core: any installed distribution (skyhub itself
included) declares a module or callable in the entry-point group `skyhub.envs`; the first
call that needs the registry loads them all. Registering stores only an entry point
(`"package.module:Class"`), so listing envs imports no heavy dependency.

Over ~400 lines, for a reason: `make` and the check of its kwargs (following `**kwargs` to
the real signatures) are one job: a kwarg is refused where the env is made.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
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
from skyhub.errors import EnvNotFound, MissingDependency, RegistrationError, UsageError

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


def make(env_id: str, *, remote: str | None = None, token: str | None = None,
         **kwargs: Any) -> TextEnv:
    """Create the env registered as `env_id`; `kwargs` override the registered defaults.

    With `remote="ws://host:port"` the env runs on a `skyhub serve` server instead and this
    returns a `TextEnv` client for it (extra `serve`); `kwargs` go to the server's
    constructor, `token` (default `$SKYHUB_TOKEN`) authenticates. The id need not be
    registered here.
    """
    if remote is not None:
        from skyhub.remote.client import make_remote

        return make_remote(env_id, remote, token=token, **kwargs)
    return spec(env_id).make(**kwargs)


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
        creator = _load(s.entry_point) if isinstance(s.entry_point, str) else s.entry_point
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


# -- the kwargs an env accepts -------------------------------------------------------------------
#
# Read from the entry point's signature. A `**kwargs` parameter is followed to where it goes:
# `super().__init__(**kwargs)` (the next `__init__` of the class), a call of a function the
# module names (`load_tasks(..., **kwargs)`), or a dispatch table that function consults (a
# dict of callables or of "module:attr" strings: every entry counts, so nothing one of them
# takes is refused). A callable can also say where its `**kwargs` go with a `kwargs_targets`
# attribute: `kwargs_targets(kwargs) -> list of callables`, or None when it cannot tell. A
# `**kwargs` that cannot be followed makes the env's kwargs unknown: nothing is refused then.
# A `**_` (a name starting with "_") swallows what it gets: it forwards nothing.


@dataclass(frozen=True)
class KwargInfo:
    """One kwarg an env accepts: its default (`inspect.Parameter.empty` if required), its
    annotation (a type, or None when unknown) and the line its docstring gives it."""

    name: str
    default: Any
    annotation: Any
    doc: str = ""
    owner: str = ""  # the function whose parameter it is
    deprecated: bool = False  # an old name of another kwarg (`skyhub.deprecation`)


def accepted_kwargs(env: str | EnvSpec, kwargs: dict[str, Any] | None = None
                    ) -> tuple[dict[str, KwargInfo], bool]:
    """The kwargs env `env` accepts, by name, and whether that list is complete (False when a
    `**kwargs` could not be followed). `kwargs` are those it will be made with (a dispatcher's
    target may depend on them); the registered ones fill in."""
    s = env if isinstance(env, EnvSpec) else spec(env)
    creator = _load(s.entry_point) if isinstance(s.entry_point, str) else s.entry_point
    found: dict[str, KwargInfo] = {}
    complete = _collect(creator, {**s.kwargs, **(kwargs or {})}, found, set(), 0)
    return found, complete


def check_kwargs(s: EnvSpec, kwargs: dict[str, Any]) -> None:
    """`UsageError` for a kwarg `s`'s env does not accept ("did you mean") or a value of a
    type its annotation excludes. Silent when the env's kwargs cannot be known."""
    if not kwargs:
        return
    try:
        accepted, complete = accepted_kwargs(s, kwargs)
    except (ImportError, AttributeError):  # made below, which reports a missing dependency
        return
    if complete:
        unknown = [k for k in kwargs if k not in accepted]
        if unknown:
            names = sorted(n for n, info in accepted.items() if not info.deprecated)
            hints = []
            for k in unknown:
                close = difflib.get_close_matches(k, names, n=1, cutoff=0.6)
                hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            listed = ", ".join(f"{n}={_show_default(accepted[n], s)}" for n in names)
            raise UsageError(
                f"{s.id!r} does not take the kwarg{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(hints)}. It accepts: {listed or 'no kwargs'} "
                f"(`skyhub info {s.id}` describes them).")
    for k, value in kwargs.items():
        info = accepted.get(k)
        if info is None or info.annotation is None:
            continue
        expected = _type_mismatch(value, info.annotation)
        if expected is not None:
            raise UsageError(
                f"{s.id!r}: {k} expects {expected}, got {value!r} ({type(value).__name__}). "
                f"On the command line {k}=3 is a number, {k}=word text ({k}='\"3\"' for "
                f"digits as text), {k}='[1, 2]' a list.")


def _show_default(info: KwargInfo, s: EnvSpec) -> str:
    import inspect

    if info.name in s.kwargs:
        return repr(s.kwargs[info.name])
    return "(required)" if info.default is inspect.Parameter.empty else repr(info.default)


def _collect(fn: Any, kwargs: dict[str, Any], found: dict[str, KwargInfo], seen: set[int],
             depth: int, cls: type | None = None,
             given: tuple[int, frozenset[str]] = (0, frozenset())) -> bool:
    """Add the named parameters of `fn` (a class: its `__init__`) to `found`, but those the
    forwarding call already fills (`given`: its positional count and keyword names); follow
    its `**kwargs`. Returns False when they go somewhere that cannot be known."""
    import inspect

    if depth > 8:
        return False
    if isinstance(fn, type):
        init = _own_init(fn)
        if init is None:
            return True  # object.__init__: takes nothing
        return _collect(init, kwargs, found, seen, depth + 1, given=given)
    if isinstance(fn, tuple):  # (an __init__ function, the class defining it)
        fn, cls = fn
        given = (given[0] + 1, given[1])  # self
    if id(fn) in seen:
        return True
    seen.add(id(fn))
    renamed = getattr(fn, "__renamed_kwargs__", {})  # skyhub.deprecation.renamed_kwargs
    fn = inspect.unwrap(fn)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    hints = _hints(fn)
    docs = _arg_docs(fn, cls)
    varkw = None
    for k, p in enumerate(sig.parameters.values()):
        if p.kind is p.VAR_KEYWORD:
            varkw = p.name
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self" \
                and p.name not in found and p.name not in given[1] \
                and not (p.kind is p.POSITIONAL_OR_KEYWORD and k < given[0]):
            found[p.name] = KwargInfo(p.name, p.default, hints.get(p.name), docs.get(p.name, ""),
                                      getattr(fn, "__qualname__", ""))
    for old, new in renamed.items():  # old names still pass (they warn when used)
        if new in found and old not in found:
            found[old] = dataclasses.replace(found[new], name=old,
                                             doc=f"deprecated: the old name of {new}",
                                             deprecated=True)
    if varkw is None or varkw.startswith("_"):
        return True
    targets = _targets(fn, cls, varkw, kwargs)
    if targets is None:
        return False
    return all(_collect(t, kwargs, found, seen, depth + 1, given=g) for t, g in targets)


def _own_init(cls: type) -> tuple[Any, type] | None:
    """The `__init__` `cls` runs and the class that defines it (None: object's)."""
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            return None if klass is object else (vars(klass)["__init__"], klass)
    return None


def _targets(fn: Any, cls: type | None, varkw: str, kwargs: dict[str, Any]
             ) -> list[tuple[Any, tuple[int, frozenset[str]]]] | None:
    """Where `fn` sends its `**varkw`, each with what that call fills itself (positional
    count, keyword names); None when that cannot be known."""
    import ast

    hook = getattr(cls if cls is not None else fn, "kwargs_targets", None)
    if callable(hook):
        got = hook(dict(kwargs))
        return None if got is None else [(t, (0, frozenset())) for t in got]
    tree = _source_tree(fn)
    if tree is None:
        return None
    scope = getattr(fn, "__globals__", {})
    uses = sum(isinstance(n, ast.Name) and n.id == varkw for n in ast.walk(tree))
    spread = sum(isinstance(n, ast.keyword) and n.arg is None and isinstance(n.value, ast.Name)
                 and n.value.id == varkw for n in ast.walk(tree))
    reads = sum(isinstance(n, ast.Attribute) and n.attr in ("get", "keys", "items", "values")
                and isinstance(n.value, ast.Name) and n.value.id == varkw for n in ast.walk(tree))
    reads += sum(isinstance(n, ast.Compare) and any(isinstance(c, ast.Name) and c.id == varkw
                                                    for c in n.comparators)
                 for n in ast.walk(tree))  # "x" in kwargs
    if uses != spread + reads:  # also stored or changed (kwargs.pop("x")): cannot tell
        return None
    out: list[tuple[Any, tuple[int, frozenset[str]]]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if not any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == varkw
                   for k in node.keywords):
            continue
        given = (len(node.args), frozenset(k.arg for k in node.keywords if k.arg is not None))
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr == "__init__"
                and isinstance(func.value, ast.Call) and isinstance(func.value.func, ast.Name)
                and func.value.func.id == "super"):
            if cls is None:
                return None
            mro = cls.__mro__
            nxt = next(((vars(k)["__init__"], k) for k in mro[1:] if "__init__" in vars(k)),
                       None)
            if nxt is not None and nxt[1] is not object:
                out.append((nxt, given))
            continue
        target = _resolve(func, scope)
        if target is None:  # dynamic: the dispatch tables the function consults
            tables = _dispatch_tables(tree, scope)
            if not tables:
                return None
            out += [(t, given) for t in tables]
        else:
            out.append((target, given))
    return out if out else None


@functools.lru_cache(maxsize=256)
def _source_tree(fn: Any) -> Any:
    """The parsed source of `fn` (None without one), parsed once per function."""
    import ast
    import inspect
    import textwrap

    try:
        return ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None


def _resolve(node: Any, scope: dict[str, Any]) -> Any:
    """The callable a `name` or `module.name` expression denotes in `scope`, else None."""
    import ast

    if isinstance(node, ast.Name):
        obj = scope.get(node.id, getattr(__import__("builtins"), node.id, None))
    elif isinstance(node, ast.Attribute):
        base = _resolve(node.value, scope) if isinstance(node.value, ast.Name | ast.Attribute) \
            else None
        obj = getattr(base, node.attr, None) if isinstance(base, types.ModuleType) else None
    else:
        return None
    return obj if callable(obj) else (obj if isinstance(obj, types.ModuleType) else None)


def _dispatch_tables(tree: Any, scope: dict[str, Any]) -> list[Any]:
    """Every callable in the dispatch tables `tree` uses: dict literals of named callables,
    and module-level dicts whose values are all callables or "module:attr" strings."""
    import ast

    out: list[Any] = []
    for node in ast.walk(tree):
        values: list[Any] = []
        if isinstance(node, ast.Dict) and node.values and all(
                isinstance(v, ast.Name | ast.Attribute) for v in node.values):
            values = [_resolve(v, scope) for v in node.values]
        elif isinstance(node, ast.Name) and isinstance(scope.get(node.id), dict):
            table = scope[node.id]
            if table and all(isinstance(v, str) and v.count(":") == 1 for v in table.values()):
                try:
                    values = [_load(v) for v in table.values()]
                except (ImportError, AttributeError):
                    return []
            elif table and all(callable(v) for v in table.values()):
                values = list(table.values())
        if values and all(callable(v) for v in values):
            out += values
    return out


def _hints(fn: Any) -> dict[str, Any]:
    import typing

    try:
        return typing.get_type_hints(fn)
    except Exception:  # an annotation that names something only type checkers import
        return {}


def _arg_docs(fn: Any, cls: type | None) -> dict[str, str]:
    """`name: text` entries of the "Args:" section of the class's or function's docstring
    (`a / b: text` documents both)."""
    import inspect

    out: dict[str, str] = {}
    for obj in (cls, fn):
        doc = inspect.getdoc(obj) if obj is not None else None
        if not doc or "Args:" not in doc:
            continue
        lines = doc.split("Args:", 1)[1].splitlines()[1:]
        indent, name = None, None
        for line in lines:
            if not line.strip():
                continue
            width = len(line) - len(line.lstrip())
            if indent is None:
                indent = width
            if width < indent:
                break
            head, sep, text = line.strip().partition(":")
            if width == indent and sep and all(n.strip().isidentifier()
                                               for n in head.split("/")):
                names = [n.strip() for n in head.split("/")]
                for n in names:
                    out.setdefault(n, text.strip())
                name = names
            elif name:
                for n in name:
                    if out.get(n) is not None:
                        out[n] = (out[n] + " " + line.strip()).strip()
    return out


def _type_mismatch(value: Any, annotation: Any) -> str | None:
    """What `annotation` expects when `value` is clearly not that (None: fine or unknown).
    Only plain types are checked: int, float, bool, str, paths, None, list/tuple/dict."""
    import pathlib
    import typing

    origin = typing.get_origin(annotation)
    members = typing.get_args(annotation) if origin in (typing.Union, types.UnionType) \
        else (annotation,)
    plain: list[type] = []
    for m in members:
        if m is type(None) or m is None:
            plain.append(type(None))
            continue
        m = typing.get_origin(m) or m
        if m is typing.Any or not isinstance(m, type):
            return None
        if m not in (int, float, bool, str, list, tuple, dict, set, frozenset) and not (
                issubclass(m, pathlib.PurePath)):
            return None  # a class of the env's own: not checked here
        plain.append(m)

    def fits(t: type) -> bool:
        if t is bool:
            return isinstance(value, bool)
        if t is int:
            return isinstance(value, int) and not isinstance(value, bool)
        if t is float:
            return isinstance(value, int | float) and not isinstance(value, bool)
        if issubclass(t, pathlib.PurePath):
            return isinstance(value, str | pathlib.PurePath)
        if t in (list, tuple, set, frozenset):
            return isinstance(value, list | tuple | set | frozenset)
        return isinstance(value, t)

    if any(fits(t) for t in plain):
        return None
    names = ["None" if t is type(None) else "a path" if issubclass(t, pathlib.PurePath)
             else t.__name__ for t in plain]
    return " or ".join(dict.fromkeys(names))


def _load(entry_point: str) -> Callable[..., TextEnv]:
    mod_name, attr = entry_point.split(":")
    obj: Any = importlib.import_module(mod_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _ep_name(s: EnvSpec) -> str:
    ep = s.entry_point
    return ep if isinstance(ep, str) else getattr(ep, "__qualname__", repr(ep))


def _caller_module() -> str:
    import sys

    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("skyhub.registry"):
        frame = frame.f_back  # pragma: no cover
    return frame.f_globals.get("__name__", "") if frame is not None else ""


__all__ = ["EnvSpec", "KwargInfo", "MissingDependency", "accepted_kwargs", "check_kwargs",
           "list_envs", "load_plugins", "make", "plugin_errors",
           "register", "spec", "unregister"]


# gymnasium is loaded now (this module imports it): skyhub's ids go into its registry as
# `skyhub/<id>` (see skyhub.gymnasium_ids; its import hook leaves this case to us)
_REGISTRY_LOADED = True
gymnasium_ids.enable()
