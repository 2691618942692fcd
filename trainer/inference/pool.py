"""`EnginePool`: several rollout engines behind the one `Engine` interface.

    pool = EnginePool([engine_a, engine_b])     # e.g. two vLLM engines of TP 4 each
    future = pool.submit(prompt_ids, params, seed=7)   # to the least-loaded engine
    pool.update_weights(state_dict, version=3)         # every engine

Why results do not depend on routing: every request carries its own seed to whichever
engine serves it, and the engines hold the same weights, so a request's completion is the
one any engine would sample for it (the rollout's exact-resume guarantee holds with any number
of engines). `generate` fixes each prompt's seed before it splits the batch, as one engine
would have numbered them (`params.seed + i`).

A pool of one engine is that engine: every call goes straight to it, arguments unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from skyhub.errors import UsageError
from skyhub.trainer.inference.engine import Completion, SamplingParams, submitter

if TYPE_CHECKING:
    from torch import Tensor


class EnginePool:
    """Engines that hold the same policy, used as one (see the module docstring)."""

    def __init__(self, engines: Sequence[Any]) -> None:
        if not engines:
            raise UsageError("EnginePool needs at least one engine")
        self.engines = list(engines)
        self._submit = [submitter(e) for e in self.engines]
        self._load = [0] * len(self.engines)  # requests in flight per engine
        self._served = [0] * len(self.engines)  # requests routed to each, ever
        self._lock = threading.Lock()
        self._closed = False

    @property
    def version(self) -> int:
        """The oldest policy version any engine holds (what a new request may be sampled
        with; the loop waits on it in async mode)."""
        return min(e.version for e in self.engines)

    @property
    def load(self) -> list[int]:
        """Requests in flight on each engine."""
        with self._lock:
            return list(self._load)

    @property
    def served(self) -> list[int]:
        """Requests each engine has been given so far."""
        with self._lock:
            return list(self._served)

    # -- generation --------------------------------------------------------------------------
    def submit(self, prompt: Sequence[int], params: SamplingParams, seed: int
               ) -> Future[Completion]:
        """Send one request to the engine with the fewest in flight (ties: the lowest index)
        and return its future; the seed goes with it."""
        if len(self.engines) == 1:
            return self._submit[0](prompt, params, seed)
        with self._lock:
            k = min(range(len(self.engines)), key=lambda i: (self._load[i], i))
            self._load[k] += 1
            self._served[k] += 1
        try:
            future = self._submit[k](prompt, params, seed)
        except BaseException:
            self._done(k)
            raise
        future.add_done_callback(lambda _f, k=k: self._done(k))
        return future

    def _done(self, k: int) -> None:
        with self._lock:
            self._load[k] -= 1

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        """One completion per prompt, in order: the batch is cut into one contiguous share per
        engine (sizes differing by at most one, the larger shares to the least-loaded
        engines), the shares generated at once."""
        if len(self.engines) == 1:
            return self.engines[0].generate(prompts, params, seeds)
        if seeds is None and params.seed is not None:
            seeds = [params.seed + i for i in range(len(prompts))]
        n, m = len(prompts), len(self.engines)
        with self._lock:
            order = sorted(range(m), key=lambda i: (self._load[i], i))
        sizes = [0] * m
        for rank, k in enumerate(order):
            sizes[k] = n // m + (rank < n % m)
        shares, start = [], 0
        for k in range(m):
            shares.append((k, start, start + sizes[k]))
            start += sizes[k]

        def run(k: int, a: int, b: int) -> list[Completion]:
            if a == b:
                return []
            with self._lock:
                self._load[k] += b - a
                self._served[k] += b - a
            try:
                return list(self.engines[k].generate(
                    prompts[a:b], params, None if seeds is None else list(seeds[a:b])))
            finally:
                with self._lock:
                    self._load[k] -= b - a

        parts = self._all(run, shares)
        return [c for part in parts for c in part]

    # -- weights and memory ------------------------------------------------------------------
    def update_weights(self, weights: Mapping[str, Tensor] | Iterable[tuple[str, Tensor]],
                       version: int) -> None:
        """Every engine gets the weights (at once; an iterator is read once, here)."""
        if len(self.engines) == 1:
            self.engines[0].update_weights(weights, version)
            return
        if not isinstance(weights, Mapping):
            weights = dict(weights)
        self._all(lambda k: self.engines[k].update_weights(weights, version),
                  [(k,) for k in range(len(self.engines))])

    def sleep(self, level: int = 1) -> None:
        """Every engine sleeps (vLLM's sleep mode: level 1 offloads the weights to the CPU and
        drops the KV cache)."""
        self._all(lambda k: self.engines[k].sleep(level=level),
                  [(k,) for k in range(len(self.engines))])

    def wake_up(self) -> None:
        self._all(lambda k: self.engines[k].wake_up(), [(k,) for k in range(len(self.engines))])

    def score(self, *args: Any, **kwargs: Any) -> Any:
        """The first engine's score (the engines hold the same weights; a sync check of each
        engine calls each one's own `score`)."""
        return self.engines[0].score(*args, **kwargs)

    def close(self) -> None:
        """Close every engine, even when one fails (the first error is raised after)."""
        if self._closed:
            return
        self._closed = True
        errors = []
        for e in self.engines:
            try:
                e.close()
            except Exception as err:
                errors.append(err)
        if errors:
            raise errors[0]

    def _all(self, fn: Callable[..., Any], calls: list[tuple[Any, ...]]) -> list[Any]:
        """`fn(*args)` for every args at once (engines wait on their own processes, so
        threads suffice); results in order; the first error is raised once all are done."""
        if len(calls) == 1:
            return [fn(*calls[0])]
        with ThreadPoolExecutor(max_workers=len(calls),
                                thread_name_prefix="skyhub-pool") as ex:
            futures = [ex.submit(fn, *args) for args in calls]
        return [f.result() for f in futures]

    def __enter__(self) -> EnginePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["EnginePool"]
