"""The engine contract: what the rollout, the loop and the weight sync need from an LLM
inference engine, and `submitter`, per-request futures over an engine that only batches.

Two implementations (see `skyhub.trainer.inference`):

- `hf` (`inference/hf.py`): transformers with a KV cache, continuously batched (requests join
  at each decoding step); runs on CPU and GPU; the tests' engine.
- `vllm` (`inference/vllm.py`): vLLM's AsyncLLM with live weight sync and in-flight updates.

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
  ones, or keeps it with `keep_kv_cache=True` (prefix caching then off). Either way each
  token's version says which weights sampled it, and the learner's truncated importance
  sampling corrects for the difference.
- `generate(prompts, params, seeds)`: prompt i is sampled with its own seed, so a completion
  does not depend on which other prompts shared its batch (exact resume relies on it).
- `submit(prompt, params, seed)`: one request, returns a `Future` at once; the future is done
  when that request's completion is, whatever else the engine is serving. The rollout plays
  every episode on its own through it (`skyhub.trainer.rollout`), so a short request never
  waits for a long one. An engine that only has `generate` still works: `submitter(engine)`
  serves it through `generate` (`BatchSubmitter`), batching what is pending.
- `score(token_ids)`: the logprob of each token after the first under the engine's current
  weights at temperature 1 (a weight sync's canary compares it with the learner's).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
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

    def submit(self, prompt: Sequence[int], params: SamplingParams, seed: int
               ) -> Future[Completion]:
        """Start one request and return at once; the future completes with its completion
        (or its error). Optional: see `submitter`."""
        ...

    def update_weights(self, weights: Mapping[str, Tensor] | Iterable[tuple[str, Tensor]],
                       version: int) -> None:
        """Load new policy weights (names as in the HF model's state_dict) and tag what is
        generated from now on with `version`."""
        ...

    def close(self) -> None: ...


#: What `submitter` returns: `submit(prompt, params, seed) -> Future[Completion]`.
Submit = Callable[[Sequence[int], SamplingParams, int], "Future[Completion]"]


def submitter(engine: Any) -> Submit:
    """The engine's per-request `submit`, or, for an engine without one, a `BatchSubmitter`
    over its `generate`.

    A subclass that overrides `generate` below the class that defines `submit` (a test's
    recording engine, say) is served through its `generate` too: its `submit` would bypass
    the override, and the override is what its author meant to run."""
    submit = getattr(engine, "submit", None)
    if submit is None:
        return BatchSubmitter(engine).submit
    mro = type(engine).__mro__
    if "generate" in getattr(engine, "__dict__", {}):  # an instance's own wins over any class's
        return BatchSubmitter(engine).submit
    depth = {name: next((k for k, c in enumerate(mro) if name in vars(c)), len(mro))
             for name in ("generate", "submit")}
    if depth["generate"] < depth["submit"]:
        return BatchSubmitter(engine).submit
    return submit


class BatchSubmitter:
    """Per-request futures over an engine that only has the batch `generate`.

    One worker thread at a time calls `engine.generate` with every request pending when it
    looks (one call per distinct `SamplingParams`, seeds per prompt), then looks again; it
    exits when nothing is pending, and the next `submit` starts another. So the engine is
    called from one thread at a time, as the old batch rollout called it, and requests that
    arrive during a call wait for the next one: the batch barrier this interface removes
    for engines that implement `submit` themselves.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._pending: list[tuple[Sequence[int], SamplingParams, int, Future[Completion]]] = []
        self._lock = threading.Lock()
        self._running = False

    def submit(self, prompt: Sequence[int], params: SamplingParams, seed: int
               ) -> Future[Completion]:
        future: Future[Completion] = Future()
        with self._lock:
            self._pending.append((prompt, params, int(seed), future))
            start, self._running = not self._running, True
        if start:
            threading.Thread(target=self._work, name="skyhub-batch-submitter",
                             daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            with self._lock:
                batch, self._pending = self._pending, []
                if not batch:
                    self._running = False
                    return
            groups: dict[SamplingParams, list[int]] = {}
            for k, (_p, params, _s, _f) in enumerate(batch):
                groups.setdefault(params, []).append(k)
            for params, idx in groups.items():
                futures = [batch[k][3] for k in idx]
                try:
                    outs = list(self.engine.generate([batch[k][0] for k in idx], params,
                                                     seeds=[batch[k][2] for k in idx]))
                    if len(outs) != len(idx):
                        raise RuntimeError(f"{type(self.engine).__name__}.generate returned "
                                           f"{len(outs)} completions for {len(idx)} prompts")
                except Exception as e:  # each caller's future carries it
                    for f in futures:
                        f.set_exception(e)
                    continue
                for f, c in zip(futures, outs, strict=True):
                    f.set_result(c)


__all__ = ["BatchSubmitter", "Completion", "Engine", "SamplingParams", "Submit", "submitter"]
