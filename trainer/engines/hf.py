"""`hf` engine: batched sampling with a KV cache over a transformers causal LM.

The tests' engine and the CPU engine. Prompts of different lengths are left-padded into one
batch; each decoding step feeds one token per row with the cache. Rows that finish are
dropped from the batch (and the cache), so a long completion does not make short ones pay.

Sampling is per row: each prompt gets its own `torch.Generator` seeded from `seeds[i]`, so a
completion depends on its seed and weights, not on which other prompts shared its batch
(the rollout relies on that for exact checkpoint resume).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from skyhub.trainer.engines import Completion, SamplingParams


class HFEngine:
    """Generation with a transformers model.

    Args:
        model: the policy. With `copy_weights=False` (synchronous training) the engine samples
            from the learner's own module, so a weight sync is only a version bump. With
            `copy_weights=True` (asynchronous training) it keeps its own copy, updated by
            `update_weights` between two decoding steps, while the learner trains its module.
        tokenizer: decodes completions (for `Completion.text` and stop strings).
        max_batch: prompts decoded together at most.
    """

    def __init__(self, model: Any, tokenizer: Any, *, copy_weights: bool = False,
                 max_batch: int = 256, seed: int = 0) -> None:
        self.model = copy.deepcopy(model) if copy_weights else model
        self.tokenizer = tokenizer
        self.copy_weights = copy_weights
        self.max_batch = max_batch
        self.seed = seed
        self.version = 0
        self._lock = threading.Lock()
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    # ------------------------------------------------------------------ weights
    def update_weights(self, weights: Mapping[str, Tensor] | Iterable[tuple[str, Tensor]],
                       version: int) -> None:
        """Load new weights now, or, while `generate` runs in another thread, between two of
        its decoding steps (the lock is held for each step's forward pass). The KV cache of
        the tokens so far is kept, as with vLLM's `pause_generation(mode="keep")`."""
        if not self.copy_weights:
            self.version = version  # same module as the learner: already up to date
            return
        state = {k: v.detach().to(self._device(), copy=True) for k, v in dict(weights).items()}
        with self._lock:
            self.model.load_state_dict(state, strict=False)
            self.version = version

    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        if not prompts:
            return []
        if seeds is None:
            base = self.seed if params.seed is None else params.seed
            seeds = [base + i for i in range(len(prompts))]
        out: list[Completion] = []
        for start in range(0, len(prompts), self.max_batch):
            out += self._generate_batch(prompts[start:start + self.max_batch], params,
                                        seeds[start:start + self.max_batch])
        return out

    def _generate_batch(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                        seeds: Sequence[int]) -> list[Completion]:
        from transformers import DynamicCache

        was_training = self.model.training
        self.model.eval()
        device = self._device()
        n = len(prompts)
        width = max(len(p) for p in prompts)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        ids, mask = ids.to(device), mask.to(device)
        gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
        results = [Completion([], [], [], "length") for _ in range(n)]
        rows = list(range(n))  # which prompt each batch row is
        stop_ids = set(params.stop_token_ids)
        cache = DynamicCache()
        step_ids, positions = ids, (mask.cumsum(-1) - 1).clamp(min=0)
        cache_kw = {_cache_arg(self.model): cache}
        for _ in range(params.max_tokens):
            with self._lock:  # weights change only between steps
                version = self.version
                logits = self.model(input_ids=step_ids, attention_mask=mask,
                                    position_ids=positions, use_cache=True,
                                    **cache_kw).logits[:, -1, :].float()
            tokens, logps = _sample(logits, params, [gens[r] for r in rows])
            keep: list[int] = []
            for b, r in enumerate(rows):
                c, tok = results[r], int(tokens[b])
                c.token_ids.append(tok)
                c.logprobs.append(float(logps[b]))
                c.versions.append(version)
                if tok in stop_ids or (params.stop and self._hit_stop(c, params.stop)):
                    c.finish_reason = "stop"
                else:
                    keep.append(b)
            if not keep:
                break
            if len(keep) < len(rows):
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                tokens, mask, positions = tokens[index], mask[index], positions[index]
                rows = [rows[b] for b in keep]
            step_ids = tokens.view(-1, 1).to(device)
            mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
            positions = positions[:, -1:] + 1
        for c in results:
            c.text = self.tokenizer.decode(c.token_ids, skip_special_tokens=True)
        self.model.train(was_training)
        return results

    def _hit_stop(self, c: Completion, stop: tuple[str, ...]) -> bool:
        # Only the tail can hold a stop string that the newest token completed.
        tail = self.tokenizer.decode(c.token_ids[-8:], skip_special_tokens=False)
        return any(s in tail for s in stop)

    def close(self) -> None:
        pass


def _cache_arg(model: Any) -> str:
    """The forward argument that takes the KV cache: `cache` in newer transformers,
    `past_key_values` before (vLLM pins such a version). Passing the wrong one is silently
    swallowed by `**kwargs`, and every step would then see only its newest token."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _sample(logits: Tensor, params: SamplingParams, gens: list[torch.Generator]
            ) -> tuple[Tensor, Tensor]:
    """One token per row, and its logprob under softmax(logits / temperature).

    Greedy when temperature is 0 (logprob then at temperature 1). Top-p restricts which tokens
    can be drawn, without renormalising the reported logprob. Each row draws from its own
    generator (Gumbel-max), so rows do not affect each other's randomness.
    """
    if params.temperature <= 0:
        logp = torch.log_softmax(logits, dim=-1)
        tokens = logits.argmax(dim=-1)
        return tokens.cpu(), logp.gather(-1, tokens.view(-1, 1)).squeeze(-1).cpu()
    logp = torch.log_softmax(logits / params.temperature, dim=-1).cpu()
    allowed = logp
    if params.top_p < 1.0:
        sorted_lp, order = logp.sort(dim=-1, descending=True)
        cum = sorted_lp.exp().cumsum(dim=-1)
        drop_sorted = (cum - sorted_lp.exp()) >= params.top_p  # keep the token crossing top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        allowed = logp.masked_fill(drop, float("-inf"))
    noise = torch.stack([torch.rand(logp.shape[-1], generator=g) for g in gens])
    gumbel = -torch.log(-torch.log(noise.clamp(1e-20, 1.0 - 1e-7)))
    tokens = (allowed + gumbel).argmax(dim=-1)
    return tokens, logp.gather(-1, tokens.view(-1, 1)).squeeze(-1)
