"""What training a model needs, from its config alone: the model's shape (`ModelShape`: a
local config.json, or the built-in table of the recipes' models), one learner rank's peak by
component (`learner_estimate`), the least a vLLM engine runs with (`vllm_min_bytes`); and
measuring a real peak (`measure_peak`, `tensor_bytes`) to check the estimates against.

`skyhub.trainer.memory` places these numbers on devices (`skyhub train --dry-run`); its
docstring says what each part counts and why.
"""

from __future__ import annotations

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
        vocab = m.tiny_vocab + len(m.tiny_words)
        return (ModelShape("tiny", vocab=vocab, hidden=m.tiny_hidden, layers=m.tiny_layers,
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


__all__ = ["KNOWN", "Estimate", "GiB", "ModelShape", "layer_activation_bytes", "learner_estimate",
           "measure_peak", "model_shape", "tensor_bytes", "vllm_min_bytes"]
