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

Over ~400 lines, for a reason: one estimate (what `--dry-run` prints): placement and each
device's memory come from the same model-shape arithmetic.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from skyhub.errors import UsageError

GiB = 2**30

#: Shapes of models the recipes name, for a dry run on a machine that cannot fetch their
#: config (values from the models' config.json on the Hugging Face hub).
KNOWN = {
    "qwen2.5-0.5b": dict(vocab=151936, hidden=896, layers=24, heads=14, kv_heads=2,
                         intermediate=4864, tied=True),
    "qwen2.5-1.5b": dict(vocab=151936, hidden=1536, layers=28, heads=12, kv_heads=2,
                         intermediate=8960, tied=True),
    "qwen2.5-3b": dict(vocab=151936, hidden=2048, layers=36, heads=16, kv_heads=2,
                       intermediate=11008, tied=True),
    "qwen2.5-7b": dict(vocab=152064, hidden=3584, layers=28, heads=28, kv_heads=4,
                       intermediate=18944, tied=False),
    "qwen2.5-14b": dict(vocab=152064, hidden=5120, layers=48, heads=40, kv_heads=8,
                        intermediate=13824, tied=False),
    "qwen2.5-32b": dict(vocab=152064, hidden=5120, layers=64, heads=40, kv_heads=8,
                        intermediate=27648, tied=False),
}


@dataclass(frozen=True)
class ModelShape:
    """What memory depends on, for a Qwen2/Llama-style decoder."""

    name: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    tied: bool
    head_dim: int = 0  # 0: hidden // heads
    qkv_bias: bool = True

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def head_params(self) -> int:
        return 0 if self.tied else self.vocab * self.hidden

    @property
    def layer_params(self) -> int:
        q, kv = self.heads * self.hd, self.kv_heads * self.hd
        attn = self.hidden * (q + 2 * kv) + q * self.hidden
        bias = (q + 2 * kv) if self.qkv_bias else 0
        return attn + bias + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def params(self) -> int:
        return (self.embed_params + self.head_params + self.layers * self.layer_params
                + self.hidden)

    @classmethod
    def from_config(cls, config: Any, name: str = "") -> ModelShape:
        """From a transformers config (Qwen2, Llama, Mistral, ...)."""
        return cls(name=name or getattr(config, "_name_or_path", "") or config.model_type,
                   vocab=config.vocab_size, hidden=config.hidden_size,
                   layers=config.num_hidden_layers, heads=config.num_attention_heads,
                   kv_heads=getattr(config, "num_key_value_heads", None)
                   or config.num_attention_heads,
                   intermediate=config.intermediate_size,
                   tied=bool(getattr(config, "tie_word_embeddings", False)),
                   head_dim=getattr(config, "head_dim", None) or 0,
                   qkv_bias=bool(getattr(config, "attention_bias",
                                         config.model_type == "qwen2")))


def model_shape(cfg: Any) -> tuple[ModelShape, str]:
    """The shape of `cfg.model`, and where it came from: the tiny model's settings; a local
    directory's or the hub cache's config.json (nothing is downloaded); else `KNOWN`."""
    m = cfg.model
    if m.name_or_path == "tiny":
        from skyhub.trainer.tiny import VOCAB_SIZE

        return (ModelShape("tiny", vocab=VOCAB_SIZE, hidden=m.tiny_hidden, layers=m.tiny_layers,
                           heads=4, kv_heads=2, intermediate=2 * m.tiny_hidden, tied=True),
                "the tiny model's settings")
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(m.name_or_path, local_files_only=True)
        return ModelShape.from_config(config, m.name_or_path), "its config.json"
    except Exception:  # not on this machine: the built-in table
        pass
    key = m.name_or_path.rsplit("/", 1)[-1].lower()
    key = re.sub(r"-(instruct|chat|base)$", "", key).replace("-coder", "").replace("-math", "")
    if key in KNOWN:
        return ModelShape(m.name_or_path, **KNOWN[key]), f"the built-in {key} shape"
    raise UsageError(f"--dry-run: no config for model.name_or_path={m.name_or_path!r} on this "
                     "machine (nothing is downloaded for a dry run); pass a local model "
                     f"directory, or a model of a known shape ({', '.join(KNOWN)})")


# ------------------------------------------------------------------------------ estimates
def layer_activation_bytes(s: ModelShape, c: int) -> int:
    """Bytes per token that backward needs from one decoder layer, computing in `c`-byte
    floats: two RMSNorms (float32 input, normalised output), the q/k/v outputs before and
    after the rotary embedding, v, SDPA's output, and the MLP's gate, activation, up and
    product (SwiGLU)."""
    q, kv = s.heads * s.hd, s.kv_heads * s.hd
    norms = 2 * (4 * s.hidden + c * s.hidden)
    attn = c * (2 * q + 3 * kv + q)
    mlp = 4 * c * s.intermediate
    return norms + attn + mlp


@dataclass
class Estimate:
    """Bytes on one device, by component (insertion order is the report's)."""

    parts: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.parts.values())


def learner_estimate(s: ModelShape, *, ranks: int = 1, compute_bytes: int = 4,
                     tokens: int = 8192, width: int = 1024, checkpointing: bool = False,
                     chunk: int = 1024, kl: bool = False, critic: bool = False,
                     sharded: bool | None = None, packed: bool = True) -> Estimate:
    """One learner rank's peak, for micro-batches of `tokens` positions in rows of `width`."""
    c, p, n = compute_bytes, s.params, ranks
    sharded = ranks > 1 if sharded is None else sharded
    e = Estimate()
    e.parts["weights (float32)"] = 4 * p / n
    e.parts["gradients (float32)"] = 4 * p / n
    e.parts["AdamW moments (float32)"] = 8 * p / n
    if kl:
        e.parts["KL reference (float32)"] = 4 * p / n
    if critic:
        e.parts["critic and its AdamW"] = 16 * (p - s.head_params)
    # the root group (LM head, and the embeddings when tied) stays gathered for the whole
    # pass and its gradient until the end of backward; decoder layers two at a time
    root = s.head_params or s.embed_params
    if sharded:  # gathered (compute dtype), gradients, float32 reduce-scatter buffers
        e.parts["gathered weights and gradients"] = (2 * c * root + 2 * c * s.layer_params
                                                     + (c + 4) * s.layer_params)
    elif c < 4:
        e.parts["autocast copies of the weights"] = c * p
    per_layer = layer_activation_bytes(s, c)
    if checkpointing:
        act = tokens * (s.layers * c * s.hidden + per_layer)
    else:
        act = tokens * s.layers * per_layer
    # final norm (float32 in, normalised out), the embedding output, gradient buffers
    act += tokens * s.hidden * (4 + 3 * c)
    e.parts["activations"] = act
    # one chunk of logits: compute-dtype out of the head, float32 copy, exp, softmax,
    # and in backward the recomputed chunk and its gradient
    e.parts["logits (one chunk)"] = min(chunk, tokens) * s.vocab * (c + 16)
    if packed:
        e.parts["attention mask (packed rows)"] = tokens * width
    return e


def vllm_min_bytes(s: ModelShape, max_model_len: int, tp: int = 1) -> float:
    """The least a vLLM engine can run with: bf16 weights and one longest sequence's KV cache
    (per GPU of its tensor-parallel group), plus ~1 GiB of workspace."""
    kv_per_token = 2 * s.layers * s.kv_heads * s.hd * 2
    return (2 * s.params + kv_per_token * max_model_len) / tp + GiB


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
    rollout_plan: Any = None  # skyhub.trainer.placement.RolloutPlan
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
    from skyhub.trainer.placement import check_rollout_settings, rollout_plan
    from skyhub.trainer.policy import default_chunk

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

# ------------------------------------------------------------------------------ measuring
def measure_peak(fn: Any) -> tuple[Any, float]:
    """(fn(), the peak of tensor memory allocated while it ran, in bytes above what was
    allocated when it started): on a GPU from CUDA's allocator statistics, on a CPU from the
    profiler's allocation trace (tracemalloc does not see torch's allocator)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = fn()
        torch.cuda.synchronize()
        return out, float(torch.cuda.max_memory_allocated() - start)
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == DeviceType.CPU)
    cur = peak = 0
    for _, n in events:
        cur += n
        peak = max(peak, cur)
    return out, float(peak)


def tensor_bytes(*objs: Any) -> float:
    """Bytes of the distinct tensors in `objs` (modules' parameters and gradients, optimisers'
    state, tensors), each storage counted once."""
    import torch

    seen: set[int] = set()
    total = 0

    def add(t: Any) -> None:
        nonlocal total
        if hasattr(t, "to_local"):  # a DTensor: this rank's shard
            t = t.to_local()
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            total += t.untyped_storage().nbytes()

    for obj in objs:
        if isinstance(obj, torch.nn.Module):
            for p in obj.parameters():
                add(p)
                add(p.grad)
        elif isinstance(obj, torch.optim.Optimizer):
            for state in obj.state.values():
                for v in state.values():
                    add(v)
        else:
            add(obj)
    return float(total)


__all__ = ["Devices", "Estimate", "ModelShape", "Plan", "Row", "learner_estimate",
           "measure_peak", "model_shape", "parse_devices", "parse_host_mem", "placement",
           "tensor_bytes"]
