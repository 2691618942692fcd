"""The reference RL code itself, for differential tests: skyrl-train 0.3.1's `ppo_utils.py` and
OpenRLHF 0.11.2's `models/utils.py`, `models/loss.py` and experience maker's advantage code.

Both are installed as test dependencies without their dependencies (`scripts/setup.sh`: they
need CUDA-only packages, and skyrl-train Python 3.12), so neither imports as a package here:
`import openrlhf.models.loss` needs flash_attn and deepspeed, `skyrl_train.utils.ppo_utils`
needs ray, jaxtyping and skyrl_train's own modules. And OpenRLHF installs a top-level `tests`
package into site-packages. So this helper finds the installed *source files* through the
distributions' metadata and executes only those, under private module names, with the few
imports their module headers make and their maths never uses (ray, deepspeed, jaxtyping,
OpenRLHF's launcher and logging, SkyRL's batch type) replaced by stubs for the duration of the
load only: nothing leaks into `sys.modules` under a real name, and no `tests` package is ever
imported.

    ref = reference_rl.load()        # or pytest.skip when they are not installed
    ref.skyrl.ppo_policy_loss(...)   # the functions, exactly as shipped
    ref.openrlhf_loss.PolicyLoss(...)
    ref.openrlhf_advantages(estimator, rewards, masks, n_samples_per_prompt, ...)
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SKYRL = ("skyrl-train", "0.3.1")
OPENRLHF = ("openrlhf", "0.11.2")


class _Stub(types.ModuleType):
    """A module whose every attribute is a do-nothing callable (decorators return what they
    decorate), enough for a module header's `import ray` / `@ray.remote` / `Float[...]`."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _anything


class _Anything:
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator
        return self

    def __getitem__(self, item: Any) -> Any:
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self


_anything = _Anything()


def _stub(name: str, **attrs: Any) -> types.ModuleType:
    module = _Stub(name)
    module.__path__ = []  # a package, so that submodules of it can be stubbed too
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


def _source(dist: tuple[str, str], relative: str) -> Path:
    """The installed file `relative` of distribution `dist`, which must be that version."""
    name, version = dist
    try:
        found = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ModuleNotFoundError(
            f"{name}=={version} is not installed: run `.venv/bin/pip install --no-deps "
            f"--ignore-requires-python {name}=={version}` (scripts/setup.sh does)") from exc
    if found != version:
        raise ModuleNotFoundError(f"{name} {found} is installed; the differential tests are "
                                  f"written against {version}")
    path = Path(str(importlib.metadata.distribution(name).locate_file(relative)))
    if not path.is_file():
        raise ModuleNotFoundError(f"{name}=={version} has no {relative}")
    return path


def _exec(name: str, path: Path, stubs: dict[str, types.ModuleType]) -> types.ModuleType:
    """Execute `path` as module `name` (kept in sys.modules under that private name, so that
    relative imports and dataclasses work) with `stubs` in sys.modules while it loads."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    saved = {key: sys.modules.get(key) for key in stubs}
    sys.modules.update(stubs)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:  # put back exactly the names stubbed; what the load imported for real stays
        for key, before in saved.items():
            if before is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = before
    return module


def _package(name: str) -> types.ModuleType:
    pkg = types.ModuleType(name)
    pkg.__path__ = []
    sys.modules.setdefault(name, pkg)
    return sys.modules[name]


@dataclass
class References:
    skyrl: types.ModuleType  # skyrl_train/utils/ppo_utils.py
    openrlhf_utils: types.ModuleType  # openrlhf/models/utils.py
    openrlhf_loss: types.ModuleType  # openrlhf/models/loss.py
    openrlhf_maker: types.ModuleType  # openrlhf/trainer/ppo_utils/experience_maker.py

    def openrlhf_advantages(self, estimator: str, rewards: Any, masks: Any, n_samples: int, *,
                            values: Any = None, kl: Any = None, kl_coef: float = 0.0,
                            gamma: float = 1.0, lambd: float = 1.0) -> tuple[Any, Any]:
        """OpenRLHF's own `RemoteExperienceMaker.compute_advantages_and_returns` on one
        experience holding the whole batch: `rewards[n]`, `masks[n, T]` (the action mask),
        `values[n, T]` for gae, `kl[n, T]` for a KL penalty in the reward. Returns its
        (advantages, returns), both [n, T]."""
        import torch

        n = rewards.shape[0]
        experience = types.SimpleNamespace(
            rewards=rewards.clone(), index=list(range(n)), action_mask=masks,
            kl=torch.zeros_like(masks, dtype=torch.float32) if kl is None else kl,
            values=values, info={}, advantages=None, returns=None)
        args = types.SimpleNamespace(
            rollout=types.SimpleNamespace(n_samples_per_prompt=n_samples),
            reward=types.SimpleNamespace(clip_range=None),
            algo=types.SimpleNamespace(advantage=types.SimpleNamespace(
                estimator=estimator, gamma=gamma, lambd=lambd, no_std_norm=False)))
        maker = self.openrlhf_maker.RemoteExperienceMaker
        this = types.SimpleNamespace(strategy=types.SimpleNamespace(args=args),
                                     advantage_estimator=estimator,
                                     kl_ctl=types.SimpleNamespace(value=kl_coef))
        this.get_advantages_and_returns = types.MethodType(maker.get_advantages_and_returns,
                                                           this)
        this.get_cumulative_returns = types.MethodType(maker.get_cumulative_returns, this)
        (out,) = maker.compute_advantages_and_returns(this, [experience])
        return out.advantages, out.returns


_LOADED: References | None = None


def load() -> References:
    """Load (once) the reference modules. Raises ModuleNotFoundError, saying how to install
    them, when skyrl-train 0.3.1 or openrlhf 0.11.2 is missing."""
    global _LOADED
    if _LOADED is not None:
        return _LOADED
    skyrl_path = _source(SKYRL, "skyrl_train/utils/ppo_utils.py")
    orl = {rel: _source(OPENRLHF, f"openrlhf/{rel}") for rel in (
        "models/utils.py", "models/loss.py", "trainer/ppo_utils/length_penalty.py",
        "trainer/ppo_utils/experience_maker.py")}

    import logging

    class Float:  # jaxtyping's annotation type, subscripted in signatures only
        def __class_getitem__(cls, item: Any) -> Any:
            return Any

    skyrl = _exec("_reference_skyrl_ppo_utils", skyrl_path, {
        # the registries' decorators ask ray whether it runs, at import
        "ray": _stub("ray", is_initialized=lambda: False),
        "jaxtyping": _stub("jaxtyping", Float=Float, Integer=Float),
        "omegaconf": _stub("omegaconf", DictConfig=dict),
        "skyrl_train": _stub("skyrl_train"),
        "skyrl_train.training_batch": _stub("skyrl_train.training_batch",
                                            TrainingInputBatch=dict),
    })

    _package("_reference_openrlhf")
    _package("_reference_openrlhf.models")
    logging_stub = _stub("openrlhf.utils.logging_utils",
                         init_logger=lambda name: logging.getLogger(name))
    utils = _exec("_reference_openrlhf.models.utils", orl["models/utils.py"],
                  {"deepspeed": _stub("deepspeed")})
    loss = _exec("_reference_openrlhf.models.loss", orl["models/loss.py"], {})
    penalties = _exec("_reference_openrlhf_length_penalty",
                      orl["trainer/ppo_utils/length_penalty.py"],
                      {"openrlhf": _stub("openrlhf"), "openrlhf.utils": _stub("openrlhf.utils"),
                       "openrlhf.utils.logging_utils": logging_stub})
    maker = _exec("_reference_openrlhf_experience_maker",
                  orl["trainer/ppo_utils/experience_maker.py"], {
                      "ray": _stub("ray"),
                      "openrlhf": _stub("openrlhf"),
                      "openrlhf.models": _stub("openrlhf.models"),
                      "openrlhf.models.utils": utils,
                      "openrlhf.trainer": _stub("openrlhf.trainer"),
                      "openrlhf.trainer.ppo_utils": _stub("openrlhf.trainer.ppo_utils"),
                      "openrlhf.trainer.ppo_utils.experience": _stub("experience"),
                      "openrlhf.trainer.ppo_utils.length_penalty": penalties,
                      "openrlhf.trainer.ray": _stub("openrlhf.trainer.ray"),
                      "openrlhf.trainer.ray.launcher": _stub("launcher"),
                      "openrlhf.utils": _stub("openrlhf.utils"),
                      "openrlhf.utils.logging_utils": logging_stub,
                      "openrlhf.utils.seqlen_balancing": _stub("seqlen_balancing"),
                  })
    _LOADED = References(skyrl, utils, loss, maker)
    return _LOADED
