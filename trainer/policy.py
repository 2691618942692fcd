"""The policy as the learner runs it: float32 master weights, compute in a lower precision,
per-token logprobs without the full-vocabulary log-softmax, and FSDP2 sharding.

Precision. The parameters the optimiser updates stay float32 (so are its moments and the
gradients it reads); forward and backward run in `compute_dtype` (bf16 on a GPU). An update of
lr 1e-6 on a weight of magnitude 1e-2 is below bf16's resolution (8 bits of mantissa, a step
of ~4e-5 there), so with bf16 masters most of it is rounded away; float32 keeps it. Unsharded,
the cast is `torch.autocast`; sharded, it is FSDP2's `MixedPrecisionPolicy(param_dtype=compute,
reduce_dtype=float32)`: each rank all-gathers its layers' weights in the compute dtype and
reduce-scatters gradients in float32.

Memory. `PolicyLogprobs` runs the causal LM's body and then, instead of the LM head over the
whole sequence (a [tokens, vocab] float32 log-softmax kept for backward: 1.2 GiB per 1k tokens
at Qwen's 152k vocabulary), takes the head chunk by chunk of tokens under activation
checkpointing: each chunk's logits exist only while that chunk is computed, in forward and
again in backward. What backward keeps is the final hidden states ([tokens, hidden]).

Sharding. `shard_policy` builds an empty (meta-device) twin of the model on every rank, wraps
each decoder layer (and an untied input embedding) and then the whole `PolicyLogprobs` in
`fully_shard` (final norm and LM head, tied embeddings with it, form the root group),
materialises each rank's shards and fills them from rank 0's weights
(`set_model_state_dict(..., broadcast_from_rank0=True)`): no rank but 0 ever holds the full
model, and only rank 0 has to load it.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor

from skyhub.errors import UsageError

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def compute_dtype(name: str, device: torch.device | str) -> torch.dtype:
    """`model.dtype` as the compute precision: "auto" is bf16 on a GPU, float32 on a CPU."""
    if name == "auto":
        return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    return DTYPES[name]


def default_chunk(vocab: int, budget: int = 2**28) -> int:
    """Tokens per chunk of the LM head: about `budget` bytes of float32 logits (256 MiB: 384
    tokens at Qwen's 152k vocabulary), between 128 and 4096 tokens."""
    return max(128, min(4096, budget // (4 * vocab) // 64 * 64))


def token_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0,
                   chunk: int = 1024) -> Tensor:
    """log softmax(logits / temperature)[target] per position, in chunks of positions, for
    logits already computed (the Tinker server's path); the learner's own path,
    `PolicyLogprobs`, never materialises the logits of a whole sequence."""
    out = []
    for s in range(0, logits.shape[-2], chunk):
        lg = logits[..., s:s + chunk, :].float()
        if temperature != 1.0:
            lg = lg / temperature
        tg = targets[..., s:s + chunk]
        out.append(lg.gather(-1, tg.unsqueeze(-1)).squeeze(-1) - lg.logsumexp(-1))
    return torch.cat(out, dim=-1)


def _head_chunk(h: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor,
                temperature: float) -> tuple[Tensor, Tensor]:
    """(logprob of each target, entropy) for one chunk of hidden states [n, hidden]."""
    logits = torch.nn.functional.linear(h, weight, bias).float()
    if temperature != 1.0:
        logits = logits / temperature
    lse = logits.logsumexp(-1)
    lp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    with torch.no_grad():  # a metric: no gradient, nothing kept for backward, one [n, V]
        probs = (logits - lse.unsqueeze(-1)).exp_()
        entropy = lse - torch.bmm(probs.unsqueeze(-2), logits.unsqueeze(-1)).view(-1)
    return lp, entropy


def chunked_logprobs(hidden: Tensor, head: torch.nn.Module, targets: Tensor,
                     temperature: float = 1.0, chunk: int = 1024) -> tuple[Tensor, Tensor]:
    """Logprobs of `targets` and the policy's entropy at each position, from the final hidden
    states `hidden` [..., L, H] and the LM head, `chunk` tokens at a time. With gradients on,
    each chunk runs under activation checkpointing, so no chunk's logits outlive it."""
    shape = hidden.shape[:-1]
    h = hidden.reshape(-1, hidden.shape[-1])
    tg = targets.reshape(-1)
    weight, bias = head.weight, getattr(head, "bias", None)
    lps, ents = [], []
    for s in range(0, h.shape[0], chunk):
        args = (h[s:s + chunk], weight, bias, tg[s:s + chunk], temperature)
        if torch.is_grad_enabled() and h.requires_grad:
            lp, ent = torch.utils.checkpoint.checkpoint(_head_chunk, *args, use_reentrant=False)
        else:
            lp, ent = _head_chunk(*args)
        lps.append(lp)
        ents.append(ent)
    # clone: a view out of an FSDP module's forward would lose its pre-backward hook if
    # anyone changed it in place
    return torch.cat(lps).reshape(shape).clone(), torch.cat(ents).reshape(shape).clone()


class PolicyLogprobs(torch.nn.Module):
    """A causal LM whose forward returns, per position t, log p(token t+1 | tokens <= t) and
    the entropy there, computed chunk-wise from the hidden states (see the module docstring).
    `lm` is the transformers model itself: its parameter names are the checkpoint's, under
    the prefix `lm.`."""

    def __init__(self, lm: Any, chunk: int | None = None) -> None:
        super().__init__()
        self.lm = lm
        self.chunk = chunk or default_chunk(lm.config.vocab_size)

    def forward(self, input_ids: Tensor, position_ids: Tensor, attention_mask: Tensor | None,
                targets: Tensor, temperature: float = 1.0) -> tuple[Tensor, Tensor]:
        body = self.lm.get_decoder()
        hidden = body(input_ids=input_ids, position_ids=position_ids,
                      attention_mask=attention_mask, use_cache=False).last_hidden_state
        return chunked_logprobs(hidden, self.lm.get_output_embeddings(), targets, temperature,
                                self.chunk)


Gap = tuple[float, float, float]  # sum of |delta logp|, tokens, max |delta logp|


def logprob_gap(acc: Gap, learner: Tensor, engine: Tensor, mask: Tensor) -> Gap:
    """`acc` plus this batch's engine-vs-learner gap: |learner - engine| logprob on the
    tokens the engine sampled (mask 1; a token the engine did not sample, such as the EOS
    that closes an assistant-message episode, has engine logprob exactly 0.0 and is left
    out). The train/inference mismatch every RL stack watches: float rounding (~1e-6) when
    the engine holds the learner's own weights, far more for bf16 vLLM or stale weights."""
    with torch.no_grad():
        keep = (mask > 0) & (engine != 0.0)
        delta = (learner.detach() - engine).abs_().mul_(keep)  # 0 where not kept
        total, n, top = torch.stack((delta.sum(), keep.sum(), delta.max())).tolist()
        if not n:
            return acc
        return (acc[0] + total, acc[1] + n, max(acc[2], top))


def gap_metrics(parts: list[Gap]) -> dict[str, float]:
    """Ranks' (or passes') gaps combined: `logp_gap_mean`, `logp_gap_max` per token."""
    total, n = sum(g[0] for g in parts), sum(g[1] for g in parts)
    if not n:
        return {}
    return {"logp_gap_mean": total / n, "logp_gap_max": max(g[2] for g in parts)}


def autocast(device: torch.device, dtype: torch.dtype) -> Any:
    """The compute precision of an unsharded policy (float32 masters stay as they are)."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def decoder_layers(lm: Any) -> list[torch.nn.Module]:
    """The repeated blocks FSDP shards one by one (`model.layers` in transformers' causal LMs)."""
    layers = getattr(lm.get_decoder(), "layers", None)
    if layers is None:
        raise UsageError(f"{type(lm).__name__}: no decoder layers at model.layers to shard; "
                         "dist.learner_ranks > 1 needs a transformers causal LM with them")
    return list(layers)


def empty_twin(lm: Any) -> Any:
    """The same architecture on the meta device (no memory), float32, with the same
    activation-checkpointing setting."""
    with torch.device("meta"):
        twin = type(lm)(lm.config).float()
    on = (lm.is_activation_checkpointing if hasattr(lm, "is_activation_checkpointing")
          else getattr(lm, "is_gradient_checkpointing", False))
    if on:
        enable_checkpointing(twin)
    return twin


def enable_checkpointing(model: Any) -> None:
    """Gradient (activation) checkpointing, under the name this transformers version uses."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    (enable or model.gradient_checkpointing_enable)()


def shard_policy(lm: Any, device: torch.device, dtype: torch.dtype, chunk: int | None = None
                 ) -> PolicyLogprobs:
    """A sharded `PolicyLogprobs` over the default process group, holding `lm`'s weights as
    rank 0 has them (a collective: every rank calls it; ranks other than 0 may pass a
    meta-device model). `lm` itself is left untouched."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = PolicyLogprobs(empty_twin(lm), chunk)
    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for layer in decoder_layers(policy.lm):
        fully_shard(layer, mp_policy=mp)
    embed = policy.lm.get_input_embeddings()
    if embed.weight is not policy.lm.get_output_embeddings().weight:
        # untied: the input embedding is gathered only around its own use (a module call),
        # not for the whole pass like the root group, which holds the LM head we call by
        # its weight
        fully_shard(embed, mp_policy=mp)
    fully_shard(policy, mp_policy=mp)
    policy.to_empty(device=device)
    rank0 = dist.get_rank() == 0
    # broadcast_from_rank0 replaces the dict's values in place: give it a dict of its own
    full = {f"lm.{k}": v for k, v in lm.state_dict().items()} if rank0 else {}
    set_model_state_dict(policy, full, options=StateDictOptions(full_state_dict=True,
                                                                broadcast_from_rank0=True))
    # Buffers outside the state dict (rotary inverse frequencies) come from rank 0 as well.
    persistent = set(policy.state_dict())
    buffers = [{n: b.cpu() for n, b in PolicyLogprobs(lm).named_buffers() if n not in persistent}
               if rank0 else None]
    dist.broadcast_object_list(buffers, src=0)
    for name, value in buffers[0].items():
        owner, _, leaf = name.rpartition(".")
        policy.get_submodule(owner)._buffers[leaf] = value.to(device)
    return policy


__all__ = ["PolicyLogprobs", "chunked_logprobs", "compute_dtype", "default_chunk",
           "enable_checkpointing", "gap_metrics", "logprob_gap", "shard_policy", "token_logprobs"]
