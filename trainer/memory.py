"""Memory before anything loads: where the learner's ranks and the rollout engine go, and what
each device holds, estimated from the model's config alone (`skyhub train --dry-run`).

    plan = placement(load_config("sql-grpo-653"), parse_devices("8x80GB"))
    print(plan.report())          # refuses (UsageError) a config that does not fit: plan.check()

Per learner rank, with N ranks (FSDP2) and P parameters:
- kept across steps: float32 weights 4P/N, float32 gradients 4P/N (from the first backward
  to the optimiser step), AdamW's two float32 moments 8P/N; a KL reference 4P/N more;
- the working set of one micro-batch of T tokens (rows x width): the weights FSDP has
  gathered in the compute dtype (the root group, LM head and tied embeddings, for the whole
  pass; two decoder layers at a time) and their gradients before the reduce-scatter
  (unsharded: the autocast copies of every weight instead); the activations backward needs
  (with activation checkpointing each layer's input plus one layer's recomputed internals,
  else every layer's internals); the LM head's chunk of logits (`policy.py`: never the
  whole sequence's); the dense block mask a packed row gives SDPA (width x width per row).
The coefficients are counted from what autograd saves in a Qwen2-style decoder layer and
checked against peaks measured on CPU (tests/trainer/test_dry_run.py). The rollout engines
go where `skyhub.trainer.placement` puts them (engines x tensor parallel, colocated or
split): each takes `gpu_memory_utilization` of its GPUs and needs at least its bf16 weights
(over its TP group) and the KV cache of one longest episode in it. A GPU that holds a learner
rank and an engine is counted in both phases of a step: generating (the rank holds what it
keeps between steps, the engine its share) and training (the rank at its peak; a sleeping
engine holds only its process's context).

Host memory, per node (node 0's, the one with rank 0), at the peak of a step (the learner's
step, then the whole weights gathered while the engines still sleep): rank 0's whole float32
copy of the model (sharded with vLLM: kept on the CPU for the engines and evaluation), the
state dict gathered to rank 0's CPU after each step (float32, transient), the sleeping
engines' bf16 weights (vLLM's sleep level 1 moves them to host memory: every engine's), the
shared-memory buckets of a weight sync "in memory" (vLLM on a CPU), and each process's
runtime (`RUNTIME` per learner rank and engine worker). It is checked against `--host-mem`
(default: this machine's RAM).

The model-shape arithmetic (`ModelShape`, `learner_estimate`, `vllm_min_bytes`) and the peak
measurements the coefficients are checked with live in `skyhub.trainer.model_memory`.

Over ~400 lines, for a reason: one estimate (what `--dry-run` prints): the rows of every
device and of the host, the fixes each misfit suggests and the report are read together,
since each row's parts are the report's lines and the fixes' reasons.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from typing import Any

from skyhub.errors import UsageError
from skyhub.trainer.model_memory import (
    Estimate,
    GiB,
    ModelShape,
    learner_estimate,
    model_shape,
    vllm_min_bytes,
)
from skyhub.trainer.placement import RolloutPlan, check_rollout_settings, rollout_plan


# ------------------------------------------------------------------------------ devices
@dataclass(frozen=True)
class Devices:
    """The devices of one node: `count` GPUs of `memory` bytes, or the CPU (one memory all
    ranks share)."""

    kind: str  # "gpu" or "cpu"
    count: int
    memory: float
    local: bool = False  # this machine's (its RAM is then the host memory)

    def describe(self) -> str:
        if self.kind == "cpu":
            return f"CPU, {self.memory / GiB:.0f} GiB of RAM shared by every rank"
        return f"{self.count} x {self.memory / GiB:.0f} GiB GPUs"


def parse_devices(spec: str | None) -> Devices:
    """`8x80GB`, `4x24GB`, `1x141GB`, `cpu`; None: this machine's."""
    if spec is None:
        return local_devices()
    if spec.strip().lower() == "cpu":
        return Devices("cpu", 1, _ram(), local=True)
    m = re.fullmatch(r"\s*(\d+)\s*[x*]\s*(\d+(?:\.\d+)?)\s*(gb|gib|g)?\s*", spec, re.I)
    if not m or int(m.group(1)) < 1:
        raise UsageError(f"--devices {spec!r}: write COUNTxMEMORY, e.g. 8x80GB (GPUs per node "
                         "and each one's memory), or cpu")
    return Devices("gpu", int(m.group(1)), float(m.group(2)) * GiB)


def local_devices() -> Devices:
    import torch

    if torch.cuda.is_available():
        return Devices("gpu", torch.cuda.device_count(),
                       float(torch.cuda.get_device_properties(0).total_memory), local=True)
    return Devices("cpu", 1, _ram(), local=True)


def _ram() -> float:
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


# ------------------------------------------------------------------------------ the plan
CUDA_CONTEXT = 1.5 * GiB  # CUDA context, NCCL buffers, allocator slack, per GPU process
RUNTIME = 2 * GiB  # host memory of one process's Python, torch and CUDA libraries
SYNC_BUCKET = 256 * 2**20  # VLLMEngine's sync_bucket_mb: a weight sync "in memory"

#: The parts of `learner_estimate` kept across steps (what a rank holds while engines
#: generate); the rest is the working set of a micro-batch, freed after the step.
RESIDENT = ("weights (float32)", "gradients (float32)", "AdamW moments (float32)",
            "KL reference (float32)", "critic and its AdamW")


@dataclass
class Row:
    """The peak of some devices in one phase of a step: named parts, in bytes."""

    gpus: str  # "GPUs 0-7", "GPU 0", "host RAM"
    phase: str  # "generating", "training", "" (one phase)
    parts: list[tuple[str, float]]
    capacity: float | None = None  # None: one device's memory (host rows: --host-mem)

    @property
    def total(self) -> float:
        return sum(v for _, v in self.parts)


@dataclass
class Plan:
    """Placement and per-device memory of a config on some devices."""

    cfg: Any
    devices: Devices
    shape: ModelShape
    shape_source: str
    learner: Estimate
    rollout: float  # bytes on each rollout device: the engine's share of its GPU(s)
    rollout_min: float
    rollout_note: str
    placement: list[str]
    problems: list[str]
    rows: list[Row] = field(default_factory=list)
    rollout_plan: RolloutPlan | None = None
    host_memory: float = 0.0  # bytes of RAM per node (--host-mem, or this machine's)
    host_source: str = ""

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def resident(self) -> float:
        """One learner rank's bytes between steps."""
        return sum(v for k, v in self.learner.parts.items() if k in RESIDENT)

    def device_totals(self) -> dict[str, float]:
        """Each group of devices' peak over the phases of a step, in bytes (not the
        host's rows)."""
        out: dict[str, float] = {}
        for row in self.rows:
            if row.capacity is not None and self.devices.kind == "gpu":
                continue  # the host's, not a device's
            out[row.gpus] = max(out.get(row.gpus, 0.0), row.total)
        return out

    def report(self) -> str:
        d, s, cfg = self.devices, self.shape, self.cfg
        size = f"{s.params / 1e9:.2f}B" if s.params >= 1e8 else f"{s.params / 1e6:.2f}M"
        lines = [f"dry run: recipe {cfg.recipe or '(none)'}, model {cfg.model.name_or_path}",
                 f"  {size} parameters, shape from {self.shape_source}",
                 f"devices: {d.describe()}" + (f" per node, {cfg.dist.nnodes} nodes"
                                               if cfg.dist.nnodes > 1 else ""),
                 "placement:", *(f"  {line}" for line in self.placement),
                 "memory per learner rank (GiB, estimated from the model's config):"]
        width = max(len(k) for k in self.learner.parts)
        for k, v in self.learner.parts.items():
            lines.append(f"  {k:<{width}}  {v / GiB:8.2f}")
        lines.append(f"  {'learner rank total':<{width}}  {self.learner.total / GiB:8.2f}")
        if self.rollout_plan is not None and self.rollout_plan.sleep:
            lines.append(f"  {'kept between steps':<{width}}  {self.resident / GiB:8.2f}")
        note = self.rollout_note if ")" in self.rollout_note else f"{self.rollout_note})"
        per = " per GPU" if self.rollout_plan is not None and d.kind == "gpu" else ""
        lines.append(f"{self.rollout_label()}: {self.rollout / GiB:.2f} GiB{per} ({note}")
        lines.append("per device, GiB" + (f" (each process on a GPU also "
                                          f"{CUDA_CONTEXT / GiB:.1f} for the CUDA context and "
                                          "NCCL)" if d.kind == "gpu" else "") + ":")
        for row in self.rows:
            if row.capacity is not None and d.kind == "gpu":
                continue  # host rows below
            lines.append(_row_line(row, d.memory))
        host = [row for row in self.rows if row.capacity is not None and d.kind == "gpu"]
        if host:
            lines.append(f"host memory per node, GiB ({self.host_source}):")
            for row in host:
                cap = row.capacity or 0.0
                head = f"{row.gpus} {row.phase}" if row.phase else row.gpus
                lines.append(f"  {head}: {row.total / GiB:.1f} of {cap / GiB:.0f} "
                             f"({'fits' if row.total <= cap else 'DOES NOT FIT'})")
                width = max(len(k) for k, _ in row.parts)
                lines.extend(f"    {k:<{width}}  {v / GiB:8.2f}" for k, v in row.parts)
        lines.append("fits: yes" if self.fits else "fits: NO")
        return "\n".join(lines)

    def rollout_label(self) -> str:
        if self.rollout_plan is None:
            return "rollout engine"
        return "rollout engines" if len(self.rollout_plan.engines) > 1 else "rollout engine"

    def check(self) -> None:
        """Raise a UsageError that says what to change when the config does not fit."""
        if not self.fits:
            raise UsageError("this config does not fit the devices it is given:\n"
                             + "\n".join(f"  - {p}" for p in self.problems))


def _row_line(row: Row, capacity: float) -> str:
    sums = " + ".join(f"{k} {v / GiB:.1f}" for k, v in row.parts)
    head = f"{row.gpus} {row.phase}" if row.phase else row.gpus
    return (f"  {head}: {sums} = {row.total / GiB:.1f} of {capacity / GiB:.0f} "
            f"({'fits' if row.total <= capacity else 'DOES NOT FIT'})")


def parse_host_mem(spec: str | None, devices: Devices | None = None) -> tuple[float, str]:
    """`--host-mem 512GB` (per node): bytes and where the figure came from. None: this
    machine's RAM, or for GPUs described with --devices (another machine) a stated
    assumption, twice their memory (an 8 x 80 GB node with 1.25 TiB: what such servers
    ship with, or more)."""
    if spec is None:
        if devices is not None and devices.kind == "gpu" and not devices.local:
            return (2 * devices.count * devices.memory,
                    "assumed: twice the GPUs' memory; say --host-mem for this node's")
        return _ram(), "this machine's RAM"
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(gb|gib|g)?\s*", spec, re.I)
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"--host-mem {spec!r}: write the RAM of one node, e.g. 512GB")
    return float(m.group(1)) * GiB, f"--host-mem {spec.strip()}"


def _host(plan: Plan) -> None:
    """Node 0's host memory at the peak of a step (see the module's doc), as a row checked
    against `plan.host_memory`."""
    cfg, p, rp = plan.cfg, plan.shape.params, plan.rollout_plan
    d, r = cfg.dist, cfg.rollout
    per_node = d.learner_ranks // d.nnodes
    sharded = d.learner_ranks > 1
    engines = len(rp.engines) if rp is not None else 0
    parts: list[tuple[str, float]] = []
    if sharded and r.engine == "vllm":
        parts.append(("rank 0's float32 copy", 4.0 * p))
    if sharded:
        parts.append(("gathered state dict", 4.0 * p))
    if rp is not None and rp.sleep:
        parts.append((f"{engines} sleeping engines' weights" if engines > 1 else
                      "sleeping engine's weights", 2.0 * p * engines))
    if rp is not None and rp.engine_kwargs().get("weight_sync", "memory") == "memory":
        parts.append(("weight-sync buffer", float(SYNC_BUCKET * max(engines, 1))))
    workers = per_node + (engines * rp.tp if rp is not None else 0)
    parts.append((f"runtimes ({workers} processes)", RUNTIME * workers))
    plan.rows.append(Row("host RAM, node 0", "training" if rp is not None and rp.sleep
                         else "", parts, capacity=plan.host_memory))


def _gpu_list(gpus: list[int]) -> str:
    if len(gpus) == 1:
        return f"GPU {gpus[0]}"
    if gpus == list(range(gpus[0], gpus[-1] + 1)):
        return f"GPUs {gpus[0]}-{gpus[-1]}"
    return "GPUs " + ",".join(map(str, gpus))


def placement(cfg: Any, devices: Devices, host_mem: str | None = None) -> Plan:
    """Where `cfg`'s learner ranks and rollout engines go on `devices` (one node's; every
    node is alike), and how much memory each device, and node 0's host, needs at its peak
    (`host_mem`: one node's RAM, e.g. "512GB"; default this machine's)."""
    from skyhub.trainer.policy import default_chunk  # torch: not for --help

    check_rollout_settings(cfg)
    shape, source = model_shape(cfg)
    d, r, o = cfg.dist, cfg.rollout, cfg.optim
    per_node = d.learner_ranks // d.nnodes
    gpu = devices.kind == "gpu"
    dtype = cfg.model.dtype if cfg.model.dtype != "auto" else ("bfloat16" if gpu else "float32")
    c = 4 if dtype == "float32" else 2
    longest = r.max_input_tokens + r.max_tokens_per_turn
    tokens = max(o.micro_batch_tokens, longest)
    width = min(longest, tokens)
    learner = learner_estimate(
        shape, ranks=d.learner_ranks, compute_bytes=c, tokens=tokens, width=width,
        checkpointing=cfg.model.gradient_checkpointing, chunk=default_chunk(shape.vocab),
        kl=cfg.algo.kl_coef > 0, critic=cfg.algo.advantage == "gae", packed=o.pack)
    problems: list[str] = []
    where = "GPU" if gpu else "CPU process"
    if gpu and per_node > devices.count:
        problems.append(f"dist.learner_ranks={d.learner_ranks} puts {per_node} ranks on each "
                        f"node, which has {devices.count} GPUs: one rank per GPU")
    ranks_txt = (f"ranks 0-{d.learner_ranks - 1}" if d.learner_ranks > 1 else "rank 0")
    pad = " " * len("learner: ")
    lines = [f"learner: {ranks_txt}, " + (f"FSDP2 over {d.learner_ranks} ranks, rank r on "
                                          f"{where} r" if d.learner_ranks > 1 else
                                          f"one {where}, unsharded")
             + (f" ({per_node} per node)" if d.nnodes > 1 else ""),
             f"{pad}float32 masters, {dtype} compute"
             + (", activation checkpointing per layer" if cfg.model.gradient_checkpointing
                else ""),
             f"{pad}micro-batches of {tokens} tokens (rows up to {width})"]
    host, host_source = parse_host_mem(host_mem, devices)
    if not gpu and host_mem is not None:  # on a CPU the devices' memory is the host's
        devices = plan_devices = Devices("cpu", devices.count, host)
    else:
        plan_devices = devices
    plan = Plan(cfg, plan_devices, shape, source, learner, 0.0, 0.0, "", lines, problems,
                host_memory=host, host_source=host_source)
    if r.engine == "vllm" and not (gpu and per_node > devices.count):
        _vllm(plan, rollout_plan, longest)
    else:
        _hf(plan, where)
    if gpu:
        _host(plan)
    lines.append(f"rank 0 also runs {cfg.env.num_envs} envs ({cfg.env.id}), evaluation and "
                 "logging")
    for row in plan.rows:
        capacity = devices.memory if row.capacity is None else row.capacity
        if row.total > capacity:
            fixes = _host_fixes(plan) if row.capacity is not None else _fixes(plan, row, tokens)
            problems.append(f"{row.gpus}" + (f" ({row.phase})" if row.phase else "")
                            + f" needs {row.total / GiB:.1f} GiB of {capacity / GiB:.0f}; "
                            "try " + ";\n    or ".join(fixes))
    return plan


def run_plan(cfg: Any) -> RolloutPlan:
    """The plan on this machine's devices (torch.cuda), for `train`: the memory estimate
    chooses a colocated engine's default share when the model's config can be read here."""
    devices = local_devices()
    if devices.kind == "gpu" and cfg.rollout.engine == "vllm":
        with contextlib.suppress(UsageError):  # no config.json here: the plan without it
            return placement(cfg, devices).rollout_plan
    return rollout_plan(cfg, devices)


def _hf(plan: Plan, where: str) -> None:
    """The hf engine in rank 0's process, on its device."""
    cfg, shape, gpu = plan.cfg, plan.shape, plan.devices.kind == "gpu"
    d, r = cfg.dist, cfg.rollout
    longest = r.max_input_tokens + r.max_tokens_per_turn
    kv = 2 * shape.layers * shape.kv_heads * shape.hd * 4 * longest * min(
        256, cfg.env.num_envs * max(1, r.samples_per_prompt))
    copies = (d.learner_ranks > 1) + (cfg.loop.mode == "async")
    plan.rollout = plan.rollout_min = 4 * shape.params * copies + kv
    plan.placement.append(f"rollout: the {r.engine} engine on rank 0's {where}"
                          + (", with a whole float32 copy of the weights" if copies else
                             ", sharing the learner's weights"))
    plan.rollout_note = "float32 weight copies, the KV cache of one generation batch"
    ranks = d.learner_ranks // d.nnodes
    if not gpu:
        plan.rows.append(Row("host RAM", "", [("learner", plan.learner.total * ranks),
                                              ("engine", plan.rollout)]))
        return
    plan.rows.append(Row("GPU 0", "", [("learner", plan.learner.total),
                                       ("engine", plan.rollout), ("context", CUDA_CONTEXT)]))
    if ranks > 1:
        plan.rows.append(Row(_gpu_list(list(range(1, ranks))), "",
                             [("learner", plan.learner.total), ("context", CUDA_CONTEXT)]))


def _vllm(plan: Plan, rollout_plan: Any, longest: int) -> None:
    """vLLM engines as `skyhub.trainer.placement` places them, and each GPU's two phases:
    generating (a learner rank holds what it keeps between steps; an engine is awake) and
    training (a learner rank at its peak; a sleeping engine holds only its context)."""
    cfg, shape, devices = plan.cfg, plan.shape, plan.devices
    d, r = cfg.dist, cfg.rollout
    gpu = devices.kind == "gpu"
    rp = rollout_plan(cfg, devices, learner_resident=plan.resident,
                      learner_peak=plan.learner.total, heads=shape.heads,
                      context=CUDA_CONTEXT)
    plan.rollout_plan = rp
    plan.placement.extend(rp.describe())
    max_len = int(r.engine_kwargs.get("max_model_len", longest))
    need = vllm_min_bytes(shape, max_len, rp.tp)
    plan.rollout_min = need
    what = (f"bf16 weights{f' / TP {rp.tp}' if rp.tp > 1 else ''} and the KV cache of one "
            f"{max_len}-token episode")
    if not gpu:
        plan.rollout = need * len(rp.engines)
        plan.rollout_note = f"at least: {what}, per engine"
        ranks = d.learner_ranks // d.nnodes
        plan.rows.append(Row("host RAM", "", [("learner", plan.learner.total * ranks),
                                              ("engines", plan.rollout)]))
        return
    util = rp.gpu_memory_utilization
    plan.rollout = share = util * devices.memory
    plan.rollout_note = (f"gpu_memory_utilization {util:g}), at least {need / GiB:.1f} GiB "
                         f"per GPU each:\n  {what}")
    if share < need:
        plan.problems.append(
            f"vLLM gets {share / GiB:.1f} GiB per GPU (gpu_memory_utilization {util:g}) but "
            f"needs at least {need / GiB:.1f} GiB: raise rollout.gpu_memory_utilization or "
            "dist.rollout_tp")
    ctx = CUDA_CONTEXT
    groups: dict[tuple[bool, bool], list[int]] = {}
    for g in range(devices.count):
        groups.setdefault((g in rp.learner_gpus, bool(rp.engines_on(g))), []).append(g)
    for (has_learner, has_engine), gpus in groups.items():
        name = _gpu_list(gpus)
        if has_learner and has_engine:
            if rp.sleep:
                plan.rows.append(Row(name, "generating", [
                    ("learner", plan.resident), ("engine", share), ("contexts", 2 * ctx)]))
                plan.rows.append(Row(name, "training", [
                    ("learner", plan.learner.total), ("engine asleep", 0.0),
                    ("contexts", 2 * ctx)]))
            else:
                plan.rows.append(Row(name, "", [("learner", plan.learner.total),
                                                ("engine", share), ("contexts", 2 * ctx)]))
        elif has_learner:
            plan.rows.append(Row(name, "", [("learner", plan.learner.total), ("context", ctx)]))
        elif has_engine:
            plan.rows.append(Row(name, "", [("engine", share), ("context", ctx)]))


def _host_fixes(plan: Plan) -> list[str]:
    """What lowers node 0's host memory, biggest first."""
    cfg, rp = plan.cfg, plan.rollout_plan
    fixes = [f"--host-mem with this node's RAM if it has more than "
             f"{plan.host_memory / GiB:.0f} GiB ({plan.host_source})"]
    if rp is not None and rp.sleep:
        fixes.append("dist.rollout_layout=split (engines on GPUs of their own never sleep, "
                     "so their weights stay off the host)")
        if len(rp.engines) > 1:
            fixes.append(f"fewer engines (dist.rollout_engines={len(rp.engines) // 2}, "
                         f"dist.rollout_tp={rp.tp * 2}): each sleeping engine's weights go "
                         "to the host")
    if cfg.dist.learner_ranks > 1:
        fixes.append("a smaller model: rank 0 holds its whole float32 copy and gathers the "
                     "state dict on the host after every step")
    return fixes


def _fixes(plan: Plan, row: Row, tokens: int) -> list[str]:
    cfg, devices = plan.cfg, plan.devices
    d, rp = cfg.dist, plan.rollout_plan
    per_node = d.learner_ranks // d.nnodes
    gpu = devices.kind == "gpu"
    names = [k for k, _ in row.parts]
    fixes = []
    if "learner" in names:
        if gpu and per_node < devices.count and (rp is None or rp.layout == "colocated"):
            fixes.append(f"dist.learner_ranks={devices.count * d.nnodes} (one per GPU)")
        elif row.phase == "generating":  # what a rank keeps between steps: 16 bytes/param/N
            fixes.append("more learner ranks (dist.nnodes, one rank per GPU)")
        if row.phase != "generating":
            if not cfg.model.gradient_checkpointing:
                fixes.append("model.gradient_checkpointing=true")
            fixes.append(f"a shorter rollout.max_input_tokens or optim.micro_batch_tokens "
                         f"(micro-batches are {tokens} tokens)")
    if "engine" in names and rp is not None and gpu:
        fixes.append(f"a lower rollout.gpu_memory_utilization (engines take "
                     f"{plan.rollout / GiB:.1f} GiB per GPU; each needs "
                     f"{plan.rollout_min / GiB:.1f})")
        if rp.layout == "colocated" and not rp.sleep:
            fixes.append("loop.mode=sync (colocated engines then sleep while the learner "
                         "trains)")
    return fixes


__all__ = ["Devices", "Plan", "Row", "local_devices", "parse_devices", "parse_host_mem",
           "placement", "run_plan"]
