"""Starting the rollout engines where a `RolloutPlan` (`skyhub.trainer.placement`) puts them.

    engine = build_engines(plan, model, tokenizer, seed=0)   # one engine, or an EnginePool

With one node the engines start in this process tree, each with `CUDA_VISIBLE_DEVICES` set to
its GPUs (vLLM's workers are child processes and see only those). With more than one node
they are placed through Ray: one placement group per engine (a bundle of `tp` GPUs,
STRICT_PACK: on one node) and an actor holding a `VLLMEngine` (`RayEngine`), as SkyRL and
OpenRLHF place theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from skyhub.errors import UsageError
from skyhub.trainer.inference import make_engine
from skyhub.trainer.inference.pool import EnginePool
from skyhub.trainer.placement import RolloutPlan


def build_engines(plan: RolloutPlan, model: Any, tokenizer: Any, *, seed: int = 0,
                  copy_weights: bool = False, **engine_kwargs: Any) -> Any:
    """The plan's engines, each as `make_engine` builds it with the plan's kwargs under
    `engine_kwargs` (the recipe's win); one engine is returned as it is, more behind an
    `EnginePool`. Through Ray (more than one node) each is a `RayEngine`."""
    kwargs = {**plan.engine_kwargs(), **engine_kwargs}
    if plan.through_ray:
        engines: list[Any] = start_ray_engines(plan, _model_source(model, tokenizer),
                                               seed=seed, **kwargs)
    else:
        engines = []
        try:
            for slot in plan.engines:
                with plan.visible_devices(slot):
                    engines.append(make_engine(plan.engine, model, tokenizer, seed=seed,
                                               copy_weights=copy_weights, **kwargs))
        except BaseException:
            for e in engines:
                with contextlib.suppress(Exception):
                    e.close()
            raise
    return engines[0] if len(engines) == 1 else EnginePool(engines)


def _model_source(model: Any, tokenizer: Any) -> str:
    """A path the engines on other nodes can load: the model's own (a hub id or a shared
    directory) when it has one."""
    path = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
    if not path:
        raise UsageError("engines on other nodes load the model by name: model.name_or_path "
                         "must be a hub id or a directory every node sees (not 'tiny')")
    return path


class _EngineHost:
    """The body of a Ray engine actor (async, so many `submit`s wait at once): builds the
    engine with `factory(model, **kwargs)` on the GPUs Ray gave it and serves calls."""

    def __init__(self, factory: Any, model: str, kwargs: dict[str, Any]) -> None:
        self.engine = factory(model, **kwargs)

    def where(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}

    async def submit(self, prompt: list[int], params: Any, seed: int | None) -> Any:
        submit = getattr(self.engine, "submit", None)
        if submit is not None:
            return await asyncio.wrap_future(submit(prompt, params, seed))
        out = await asyncio.to_thread(self.engine.generate, [prompt], params,
                                      None if seed is None else [seed])
        return out[0]

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self.engine, method), *args, **kwargs)

    async def version(self) -> int:
        return self.engine.version


def vllm_factory(model: str, **kwargs: Any) -> Any:
    """What a Ray engine actor builds in production: a `VLLMEngine` on the actor's GPUs."""
    from skyhub.trainer.inference.vllm import VLLMEngine

    return VLLMEngine(model, **kwargs)


class RayEngine:
    """An engine in a Ray actor, behind the `Engine` interface (see `start_ray_engines`).

    Weights travel through Ray's object store as CPU tensors (one `ray.put` per update, read
    by the actor's node); the engines' own transfer path across GPUs is
    `skyhub.trainer.weight_sync`'s."""

    def __init__(self, actor: Any, pg: Any, where: dict[str, Any]) -> None:
        self.actor, self.pg, self.where = actor, pg, where
        self.version = 0

    def _get(self, ref: Any) -> Any:
        import ray

        return ray.get(ref)

    def submit(self, prompt: Sequence[int], params: Any, seed: int | None = None
               ) -> Future[Any]:
        return self.actor.submit.remote(list(prompt), params, seed).future()

    def generate(self, prompts: Sequence[Sequence[int]], params: Any,
                 seeds: Sequence[int] | None = None) -> list[Any]:
        return self._get(self.actor.call.remote("generate", [list(p) for p in prompts],
                                                params, None if seeds is None else list(seeds)))

    def update_weights(self, weights: Mapping[str, Any] | Iterable[tuple[str, Any]],
                       version: int) -> None:
        import ray

        items = weights.items() if isinstance(weights, Mapping) else weights
        ref = ray.put({k: v.detach().to("cpu") for k, v in items})
        self._get(self.actor.call.remote("update_weights", ref, version))
        self.version = version

    def sleep(self, level: int = 1) -> None:
        self._get(self.actor.call.remote("sleep", level=level))

    def wake_up(self) -> None:
        self._get(self.actor.call.remote("wake_up"))

    def score(self, *args: Any, **kwargs: Any) -> Any:
        return self._get(self.actor.call.remote("score", *args, **kwargs))

    def close(self) -> None:
        import ray

        try:
            self._get(self.actor.call.remote("close"))
        finally:
            ray.kill(self.actor, no_restart=True)
            ray.util.remove_placement_group(self.pg)


def start_ray_engines(plan: RolloutPlan, model: str, *, factory: Any = None,
                      timeout_s: float = 600.0, seed: int = 0,
                      **kwargs: Any) -> list[RayEngine]:
    """Start the plan's engines as Ray actors: for each, a placement group of one bundle of
    `tp` GPUs (and a CPU) with STRICT_PACK, so its tensor-parallel group is on one node, and
    an actor reserving those GPUs (Ray sets its `CUDA_VISIBLE_DEVICES`) that builds
    `factory(model, seed=..., **kwargs)` (`vllm_factory` unless given). Joins the Ray cluster
    at `RAY_ADDRESS` (or `ray start`'s on this machine) unless Ray is initialised already.

    Ray does not know the learner's GPUs (torchrun starts its ranks): in the split layout,
    start Ray on each node with only the engines' GPUs visible
    (`CUDA_VISIBLE_DEVICES=4,5,6,7 ray start ...`); the engines are refused here if Ray put
    one on a learner GPU."""
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS", "auto"))
    factory = factory or vllm_factory
    actor_cls = ray.remote(max_restarts=0, max_task_retries=0)(_EngineHost)
    started: list[RayEngine] = []
    try:
        for slot in plan.engines:
            pg = placement_group([{"GPU": slot.tp, "CPU": 1}], strategy="STRICT_PACK",
                                 name=f"skyhub-engine-{slot.index}")
            try:
                ray.get(pg.ready(), timeout=timeout_s)
            except ray.exceptions.GetTimeoutError:
                ray.util.remove_placement_group(pg)
                raise UsageError(
                    f"Ray could not place engine {slot.index} ({slot.tp} GPUs on one node) in "
                    f"{timeout_s:.0f} s; free: {ray.available_resources()}. Check that every "
                    "node joined the Ray cluster with its GPUs (ray status)") from None
            actor = actor_cls.options(
                num_cpus=1, num_gpus=slot.tp, max_concurrency=4096,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=0),
            ).remote(factory, model, {**kwargs, "seed": seed})
            try:
                where = ray.get(actor.where.remote(), timeout=timeout_s)
            except BaseException:
                ray.kill(actor, no_restart=True)
                ray.util.remove_placement_group(pg)
                raise
            started.append(RayEngine(actor, pg, where))
        _check_ray_placement(plan, started)
    except BaseException:
        for e in started:
            with contextlib.suppress(Exception):
                e.close()
        raise
    return started


def _check_ray_placement(plan: RolloutPlan, engines: list[RayEngine]) -> None:
    """Distinct GPUs per engine on a node; in the split layout none of the learner's."""
    seen: dict[tuple[str, str], int] = {}
    engine_gpus = ",".join(map(str, range(len(plan.learner_gpus), plan.gpus_per_node)))
    for k, e in enumerate(engines):
        for gpu in e.where["gpu_ids"]:
            key = (e.where["node_id"], gpu)
            if key in seen:
                raise UsageError(f"Ray gave engines {seen[key]} and {k} the same GPU {gpu}")
            seen[key] = k
            if plan.layout == "split" and int(gpu) in plan.learner_gpus:
                raise UsageError(
                    f"Ray put engine {k} on GPU {gpu}, a learner GPU in the split layout: "
                    f"start Ray on each node with only the engines' GPUs visible "
                    f"(CUDA_VISIBLE_DEVICES={engine_gpus} "
                    "ray start ...), or use dist.rollout_layout=colocated")


__all__ = ["RayEngine", "build_engines", "start_ray_engines", "vllm_factory"]
