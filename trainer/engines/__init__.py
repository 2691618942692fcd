"""Rollout engines: what turns token ids into sampled continuations for the rollout.

Two implementations behind one small interface:

- `hf` (`engines/hf.py`): transformers with a KV cache, batched; runs on CPU and GPU; the
  tests' engine.
- `vllm` (`engines/vllm.py`): vLLM's AsyncLLM with live weight sync and in-flight updates.

The contract a rollout relies on:

- Token in, token out: `generate` takes prompt token ids and returns the sampled token ids
  themselves, never text to re-tokenize. `Completion.text` is only for the env.
- `Completion.logprobs[i]` is log p(token_i) under softmax(logits / temperature) of the
  weights that sampled it (top-p only decides which tokens may be drawn; it does not
  renormalise the logprob), so the learner can recompute the same quantity with the same
  temperature and compare.
- `Completion.versions[i]` is the policy version that produced token i: an in-flight update
  can land in the middle of a completion.
- `update_weights(state_dict, version)` may be called from another thread while `generate`
  runs; the new weights apply between two decoding steps and the running completions go on.
  What happens to the prefix's KV cache differs: `hf` keeps the cache the old weights built;
  `vllm` (`pause_generation(mode="keep", clear_cache=True)`) re-prefills it with the new
  ones. Either way each token's version says which weights sampled it, and the learner's
  truncated importance sampling corrects for the difference.
- `generate(prompts, params, seeds)`: prompt i is sampled with its own seed, so a completion
  does not depend on which other prompts shared its batch (exact resume relies on it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from torch import Tensor


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()  # text that ends a turn; kept in the output (like `</sql>`)
    stop_token_ids: tuple[int, ...] = ()  # e.g. EOS / end-of-turn; kept in the output
    seed: int | None = None


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[float]
    versions: list[int]
    finish_reason: str  # "stop" (a stop string or stop token) or "length"
    text: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


class Engine(Protocol):
    """What the rollout and the loop need from an engine."""

    version: int

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        """One completion per prompt (prompts may have different lengths)."""
        ...

    def update_weights(self, weights: Mapping[str, Tensor] | Iterable[tuple[str, Tensor]],
                       version: int) -> None:
        """Load new policy weights (names as in the HF model's state_dict) and tag what is
        generated from now on with `version`."""
        ...

    def close(self) -> None: ...


def make_engine(kind: str, model: Any, tokenizer: Any, *, copy_weights: bool = False,
                seed: int = 0, **kwargs: Any) -> Engine:
    """`kind` "hf" or "vllm"; heavy imports happen here, not at package import.

    `copy_weights`: the engine must not share the learner's module (asynchronous training).
    vLLM always holds its own copy, so it ignores this."""
    if kind == "hf":
        from skyhub.trainer.engines.hf import HFEngine

        return HFEngine(model, tokenizer, copy_weights=copy_weights, seed=seed, **kwargs)
    if kind == "vllm":
        try:
            from skyhub.trainer.engines.vllm import VLLMEngine
        except ImportError as e:
            from skyhub.errors import UsageError

            raise UsageError(f"rollout.engine=vllm needs vLLM ({e}); on a CPU machine run "
                             "in the virtualenv `bash scripts/vllm-venv.sh` makes, on a GPU "
                             "machine pip install vllm (the version in that script)") from None
        return VLLMEngine(model, tokenizer, seed=seed, **kwargs)
    from skyhub.errors import UsageError

    raise UsageError(f"rollout.engine must be 'hf' or 'vllm', not {kind!r}")


__all__ = ["Completion", "Engine", "SamplingParams", "make_engine"]
