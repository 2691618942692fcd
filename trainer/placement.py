"""Where the rollout engines go on a node's GPUs, beside the learner's ranks.

    plan = rollout_plan(cfg, parse_devices("8x80GB"), learner_resident=..., learner_peak=...)
    plan.engines      # [EngineSlot(index=0, node=0, gpus=(0, 1, 2, 3)), ...]
    plan.engine_kwargs()  # what each VLLMEngine gets: tensor_parallel_size, ...

`dist.rollout_engines` engines of `dist.rollout_tp` GPUs each, in one of two layouts:

- **colocated** (the default, SkyRL's `colocate_all=true`): the engines take the learner's own
  GPUs, engine k on GPUs k*tp .. (k+1)*tp - 1 of its node. In a synchronous loop they sleep
  (vLLM's sleep mode, level 1: weights offloaded to the CPU, KV cache dropped) while the
  learner trains, and the order of a step is generate, sleep, train, wake up, sync weights:
  SkyRL's colocated trainer does the same (`inference_engine_client.sleep()` after
  generation; `wake_up` then broadcast before the next generation). So an awake engine shares
  its GPU only with the learner's between-step state (float32 weights, gradients, AdamW
  moments), and a sleeping one leaves the learner its peak; the default
  `gpu_memory_utilization` is what the between-step state leaves. In `loop.mode=async`
  generation overlaps training, so nothing sleeps and the default leaves the learner's peak.
- **split**: the learner's ranks take GPUs 0 .. L-1 of each node, the engines the GPUs after
  them; nothing sleeps, `gpu_memory_utilization` defaults to vLLM's 0.9.

A tensor-parallel group never crosses a node (vLLM's multiprocess executor runs it on one
node, as SkyRL also requires), so `rollout_tp` must divide the GPUs the layout gives the
engines on each node, and the model's attention heads. With one node the engines start in
rank 0's process tree, each with `CUDA_VISIBLE_DEVICES` set to its GPUs (vLLM's workers are
child processes and see only those). With more than one node they are placed through Ray:
one placement group per engine (a bundle of `tp` GPUs, STRICT_PACK: on one node) and an actor
holding a `VLLMEngine` (`RayEngine`), as SkyRL and OpenRLHF place theirs.

Misfits are `UsageError`s that say what to change; the memory of each GPU is checked by the
dry run (`skyhub.trainer.memory`, whose `run_plan` is this plan on this machine's devices),
which prints this plan. `skyhub.trainer.inference.startup` starts the engines where it says.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from skyhub.errors import UsageError

#: vLLM's own default share of a GPU, used in the split layout unless the config sets one.
SPLIT_UTILIZATION = 0.9
#: The most a colocated engine is given by default (vLLM's default), and the step it is
#: rounded down to (a share that follows the estimate to the byte would fit by luck).
MAX_UTILIZATION = 0.9
UTILIZATION_STEP = 0.05
#: A colocated engine's share when the learner's memory cannot be estimated.
UNKNOWN_UTILIZATION = 0.5


@dataclass(frozen=True)
class EngineSlot:
    """One engine: its index, the node it runs on and that node's GPUs it holds."""

    index: int
    node: int
    gpus: tuple[int, ...]

    @property
    def tp(self) -> int:
        return len(self.gpus)

    def describe(self) -> str:
        g = self.gpus
        where = f"GPU {g[0]}" if len(g) == 1 else (
            f"GPUs {g[0]}-{g[-1]}" if g == tuple(range(g[0], g[-1] + 1))
            else "GPUs " + ",".join(map(str, g)))
        return where if self.node == 0 else f"node {self.node} {where}"


@dataclass
class RolloutPlan:
    """Where the rollout engines go and how each is started (see the module docstring)."""

    layout: str  # "colocated" or "split"
    kind: str  # "gpu" or "cpu"
    engine: str  # "vllm" or "hf"
    nnodes: int
    gpus_per_node: int
    learner_gpus: tuple[int, ...]  # on every node (GPU kind); () on a CPU
    engines: list[EngineSlot] = field(default_factory=list)
    tp: int = 1
    gpu_memory_utilization: float | None = None
    utilization_source: str = ""
    sleep: bool = False
    through_ray: bool = False

    def engine_kwargs(self) -> dict[str, Any]:
        """The keyword arguments every `VLLMEngine` of this plan gets (`AsyncEngineArgs`
        names); a recipe's `rollout.engine_kwargs` are applied over them by the loop."""
        if self.engine != "vllm" or self.kind != "gpu":
            return {}  # vLLM's CPU build: no tensor parallelism, no sleep mode, no GPU share
        # weights from the learner: CUDA IPC handles where the engine shares its GPUs, an
        # NCCL broadcast where it has its own (vLLM's weight-transfer API, engines/vllm.py)
        return {"tensor_parallel_size": self.tp,
                "gpu_memory_utilization": self.gpu_memory_utilization,
                "enable_sleep_mode": self.sleep,
                "weight_sync": "ipc" if self.layout == "colocated" else "nccl"}

    def engines_on(self, gpu: int, node: int = 0) -> list[EngineSlot]:
        return [e for e in self.engines if e.node == node and gpu in e.gpus]

    def describe(self) -> list[str]:
        """The placement lines of the dry run."""
        pad = " " * len("rollout: ")
        if self.engine == "hf":
            return []  # memory.py says where the hf engine runs
        n = len(self.engines)
        head = (f"rollout: {n} vLLM engine{'s' if n > 1 else ''} x tensor parallel {self.tp}, "
                + ("colocated with the learner" if self.layout == "colocated" else
                   "split from the learner"))
        if self.kind == "cpu":
            return [head.replace(", colocated with the learner", "").replace(
                ", split from the learner", "") + ", on the CPU"]
        lines = [head]
        if self.through_ray:
            lines.append(f"{pad}placed through Ray: a placement group per engine (a bundle of "
                         f"{self.tp} GPU{'s' if self.tp > 1 else ''}, STRICT_PACK on one node)")
        per_line = 4
        slots = [f"engine {e.index} on {e.describe()}" for e in self.engines]
        for i in range(0, len(slots), per_line):
            lines.append(pad + ", ".join(slots[i:i + per_line]))
        lines.append(f"{pad}gpu_memory_utilization {self.gpu_memory_utilization:g} "
                     f"({self.utilization_source})")
        if self.sleep:
            lines.append(f"{pad}sleep mode level 1 while the learner trains")
            lines.append(f"{pad}each step: generate, sleep, train, wake up, sync weights")
        elif self.layout == "colocated":
            lines.append(f"{pad}no sleep (loop.mode=async: generation overlaps training)")
        return lines

    # -- starting engines on this node ------------------------------------------------------
    @contextlib.contextmanager
    def visible_devices(self, slot: EngineSlot) -> Iterator[None]:
        """`CUDA_VISIBLE_DEVICES` set to `slot`'s GPUs (indices into what this process sees)
        while an engine starts: vLLM's engine core and TP workers are child processes and
        inherit it. Nothing changes on a CPU."""
        if self.kind != "gpu" or self.engine != "vllm":
            yield
            return
        before = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = before.split(",") if before else [str(i) for i in range(self.gpus_per_node)]
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids[g] for g in slot.gpus)
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = before


# ------------------------------------------------------------------------------ planning
def check_rollout_settings(cfg: Any) -> None:
    """What is wrong in the config whatever the devices (the loop and the dry run call it;
    `load_config` does not, so `--print-config` shows any config)."""
    d, r = cfg.dist, cfg.rollout
    if d.rollout_engines < 1 or d.rollout_tp < 1:
        raise UsageError(f"dist.rollout_engines ({d.rollout_engines}) and dist.rollout_tp "
                         f"({d.rollout_tp}) must be >= 1")
    if r.engine == "hf" and (d.rollout_engines > 1 or d.rollout_tp > 1):
        raise UsageError("the hf engine runs inside rank 0's process, one of it: "
                         "dist.rollout_engines and dist.rollout_tp above 1 need "
                         "rollout.engine=vllm (or set both to 1)")
    u = r.gpu_memory_utilization
    if u is not None and not 0 < u <= 1:
        raise UsageError(f"rollout.gpu_memory_utilization must be in (0, 1] (a share of each "
                         f"rollout GPU's memory), or null to let the layout choose; not {u}")
    ku = r.engine_kwargs.get("gpu_memory_utilization")
    if u is not None and ku is not None and float(ku) != u:
        raise UsageError(f"rollout.gpu_memory_utilization ({u}) and "
                         f"rollout.engine_kwargs.gpu_memory_utilization ({ku}) disagree: set "
                         "one of them")


def rollout_plan(cfg: Any, devices: Any, *, learner_resident: float = 0.0,
                 learner_peak: float = 0.0, heads: int | None = None,
                 context: float = 0.0) -> RolloutPlan:
    """The plan for `cfg` on `devices` (one node's, `skyhub.trainer.memory.Devices`).

    `learner_resident` / `learner_peak`: one learner rank's bytes between steps and at its
    peak (memory.py's estimate), which a colocated engine's default share leaves free, with
    `context` bytes per process on a GPU. `heads`: the model's attention heads, which the
    tensor-parallel size must divide (vLLM shards them)."""
    check_rollout_settings(cfg)
    d, r = cfg.dist, cfg.rollout
    layout, tp, n = d.rollout_layout, d.rollout_tp, d.rollout_engines
    if devices.kind != "gpu":
        if tp > 1:
            raise UsageError(f"dist.rollout_tp={tp}: tensor parallelism needs GPUs; on a CPU "
                             "set dist.rollout_tp=1")
        return RolloutPlan(layout, "cpu", r.engine, d.nnodes, 0, (),
                           [EngineSlot(i, 0, ()) for i in range(n)], tp)
    per_node = d.learner_ranks // d.nnodes
    g = devices.count
    if per_node > g:
        raise UsageError(f"dist.learner_ranks={d.learner_ranks} puts {per_node} ranks on each "
                         f"node, which has {g} GPUs: one rank per GPU, so at most "
                         f"dist.learner_ranks={g * d.nnodes}")
    learner = tuple(range(per_node))
    if r.engine == "hf":
        return RolloutPlan(layout, "gpu", "hf", d.nnodes, g, learner, [EngineSlot(0, 0, (0,))])
    if layout == "split":
        free = tuple(range(per_node, g))
        if not free:
            need = n * tp
            fix = (f"set dist.learner_ranks={(g - need) * d.nnodes} (leaving {need} GPUs per "
                   f"node for {n} engine{'s' if n > 1 else ''} x TP {tp})" if need < g else
                   f"{n} engine{'s' if n > 1 else ''} x TP {tp} need all {g}: use fewer or "
                   "smaller engines")
            raise UsageError(f"dist.rollout_layout=split gives the engines the GPUs the learner "
                             f"leaves, and its {per_node} ranks per node take all {g}: {fix}; "
                             "or dist.rollout_layout=colocated")
    else:
        free = learner
    other = (", or dist.rollout_layout=colocated" if layout == "split" else
             f", or dist.learner_ranks={g * d.nnodes} (colocated engines take the learner's "
             "GPUs)" if per_node < g else "")
    if tp > len(free):
        raise UsageError(f"dist.rollout_tp={tp}: a tensor-parallel group stays on one node, "
                         f"and the {layout} layout gives the engines {len(free)} GPUs per node "
                         f"({_gpus(free)}): set dist.rollout_tp to at most {len(free)}{other}")
    if heads is not None and heads % tp:
        fits = [t for t in range(1, len(free) + 1) if heads % t == 0 and len(free) % t == 0]
        raise UsageError(f"dist.rollout_tp={tp} does not divide the model's {heads} attention "
                         f"heads (vLLM shards them over the group): use one of {fits}")
    if len(free) % tp:
        fits = [t for t in range(1, len(free) + 1) if len(free) % t == 0]
        raise UsageError(f"dist.rollout_tp={tp} does not divide the {len(free)} GPUs per node "
                         f"the {layout} layout gives the engines ({_gpus(free)}), so a group "
                         f"would straddle two nodes or leave GPUs idle: use one of {fits}")
    per_node_engines = len(free) // tp
    if n > per_node_engines * d.nnodes:
        most = per_node_engines * d.nnodes
        raise UsageError(f"dist.rollout_engines={n} x dist.rollout_tp={tp} needs {n * tp} GPUs "
                         f"and the {layout} layout gives the engines {len(free)} per node on "
                         f"{d.nnodes} node{'s' if d.nnodes > 1 else ''}: at most "
                         f"dist.rollout_engines={most} at this TP{other}")
    slots = [EngineSlot(k, k // per_node_engines,
                        free[(k % per_node_engines) * tp:(k % per_node_engines + 1) * tp])
             for k in range(n)]
    sleep = layout == "colocated" and cfg.loop.mode == "sync"
    util, source = _utilization(cfg, devices.memory, layout, sleep, learner_resident,
                                learner_peak, context)
    return RolloutPlan(layout, "gpu", "vllm", d.nnodes, g, learner, slots, tp, util, source,
                       sleep, through_ray=d.nnodes > 1)


def _utilization(cfg: Any, memory: float, layout: str, sleep: bool, resident: float,
                 peak: float, context: float) -> tuple[float, str]:
    r = cfg.rollout
    if r.gpu_memory_utilization is not None:
        return r.gpu_memory_utilization, "rollout.gpu_memory_utilization"
    if "gpu_memory_utilization" in r.engine_kwargs:
        return float(r.engine_kwargs["gpu_memory_utilization"]), "the recipe's engine_kwargs"
    if layout == "split":
        return SPLIT_UTILIZATION, "vLLM's default, on GPUs of its own"
    if not peak:  # no estimate (the model's config is not on this machine)
        return UNKNOWN_UTILIZATION, ("no memory estimate here, so half; set "
                                     "rollout.gpu_memory_utilization")
    left = resident if sleep else peak
    share = (memory - left - 2 * context) / memory  # the learner's and the engine's context
    share = math.floor(share / UTILIZATION_STEP + 1e-9) * UTILIZATION_STEP
    share = round(min(MAX_UTILIZATION, share), 2)
    what = "between-step state" if sleep else "peak"
    if share <= 0:
        raise UsageError(f"colocated engines get no memory: the learner's {what} "
                         f"({left / 2**30:.1f} GiB per GPU) leaves nothing of "
                         f"{memory / 2**30:.0f} GiB; use more learner ranks, or "
                         "dist.rollout_layout=split")
    return share, f"what the learner's {what} leaves"


def _gpus(gpus: Sequence[int]) -> str:
    if not gpus:
        return "none"
    return f"GPU {gpus[0]}" if len(gpus) == 1 else f"GPUs {gpus[0]}-{gpus[-1]}"


__all__ = ["EngineSlot", "RolloutPlan", "check_rollout_settings", "rollout_plan"]
