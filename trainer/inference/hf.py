"""`hf` engine: continuously batched sampling with a KV cache over a transformers causal LM.

The tests' engine and the CPU engine; it also runs on a GPU. Requests (`submit`, or `generate`
for a batch) are served by one scheduler thread. At each decoding step, the requests that
arrived since the last step are left-padded into a new *cohort* (a batch with its own KV
cache) and prefilled, while the running batch decodes its next token; then the new cohort
is merged into the running batch. A request's future completes the moment its row stops,
and rows that stop are dropped from the batch (and its cache), so a short request never
waits for a long one, and a new one never waits for the running ones to finish (continuous
refill).

Why prefill apart and merge after: a prompt and a one-token step have different shapes, so
they take separate forward passes anyway; merging then costs one copy of the cache (the
shorter cohort's keys and values are left-padded, masked out, to the longer one's length),
about what one step's attention reads, and keeps decoding at one forward pass per step
however requests arrive. The merge needs transformers' plain `DynamicCache` layers (what
both transformers versions we support use for these models); a cache of any other kind
(sliding-window layers, say) is not merged, and its cohort decodes in turn with the others,
which is correct, only slower.

Sampling is per row: each request gets its own `torch.Generator` on the model's device,
seeded from its seed, so a completion depends on its seed and weights, not on which other
requests shared its batch (the rollout relies on that for exact checkpoint resume).
Sampling and logprobs run on the model's device; the only copy to the host per step is the
chosen token ids and their logprobs (a few bytes per row, not the vocabulary).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from skyhub.errors import UsageError
from skyhub.trainer.inference.engine import Completion, SamplingParams


@dataclass(eq=False)  # compared by identity (fields hold tensors)
class _Request:
    prompt: list[int]
    params: SamplingParams
    future: Future[Completion]
    gen: torch.Generator
    out: Completion = field(default_factory=lambda: Completion([], [], [], "length"))


@dataclass(eq=False)
class _Cohort:
    """Requests prefilled together: one KV cache, one row each."""

    rows: list[_Request]
    cache: Any
    step_ids: Tensor  # what the next forward feeds: the prompts, then one token per row
    mask: Tensor
    positions: Tensor
    temperature: Tensor  # per row, on the device
    top_p: Tensor | None  # per row (inf: the whole vocabulary); None: no row uses top-p
    forward_kw: dict[str, Any]  # the KV cache under the forward's name for it, and more


class HFEngine:
    """Generation with a transformers model.

    Args:
        model: the policy. With `copy_weights=False` (synchronous training) the engine samples
            from the learner's own module, so a weight sync is only a version bump. With
            `copy_weights=True` (asynchronous training) it keeps its own copy, updated by
            `update_weights` between two decoding steps, while the learner trains its module.
        tokenizer: decodes completions (for `Completion.text` and stop strings).
        max_batch: rows decoded at once at most, over all cohorts; requests beyond it wait
            for rows to finish.
    """

    def __init__(self, model: Any, tokenizer: Any, *, copy_weights: bool = False,
                 max_batch: int = 256, seed: int = 0) -> None:
        self.model = copy.deepcopy(model) if copy_weights else model
        self.tokenizer = tokenizer
        self.copy_weights = copy_weights
        self.max_batch = max_batch
        self.seed = seed
        self.version = 0
        self._lock = threading.Lock()  # held for each forward pass: weights change between
        self._queue = threading.Lock()  # guards _pending, _running, the train/eval switch
        self._pending: list[_Request] = []
        self._running = False
        self._was_training = False
        self._closed = False
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    # ------------------------------------------------------------------ weights
    def update_weights(self, weights: Mapping[str, Tensor] | Iterable[tuple[str, Tensor]],
                       version: int) -> None:
        """Load new weights now, or, while requests are being decoded, between two decoding
        steps (the lock is held for each step's forward pass). The KV cache of the tokens so
        far is kept, as with vLLM's `pause_generation(mode="keep")`."""
        if not self.copy_weights:
            self.version = version  # same module as the learner: already up to date
            return
        state = {k: v.detach().to(self._device(), copy=True) for k, v in dict(weights).items()}
        with self._lock:
            self.model.load_state_dict(state, strict=False)
            self.version = version

    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def score(self, token_ids: Sequence[int]) -> list[float]:
        """log p(token_i | tokens before it) for every token after the first, under the
        current weights at temperature 1: what a weight sync's canary compares with the
        learner's own logprobs of the same sequence."""
        if len(token_ids) < 2:
            raise UsageError(f"score() needs at least 2 token ids, got {len(token_ids)}")
        ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self._device())
        with self._lock:
            was_training = self.model.training
            self.model.eval()
            try:
                logits = self.model(input_ids=ids, use_cache=False).logits[0, :-1].float()
            finally:
                self.model.train(was_training)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
        return logp.cpu().tolist()

    # ------------------------------------------------------------------ requests
    def submit(self, prompt: Sequence[int], params: SamplingParams, seed: int
               ) -> Future[Completion]:
        """Queue one request; it joins the running batch at the next decoding step."""
        if self._closed:
            raise UsageError("this HFEngine is closed; make a new one with make_engine('hf', ...)")
        if not prompt:
            raise UsageError("submit() needs a non-empty prompt (at least one token id)")
        future: Future[Completion] = Future()
        if params.max_tokens <= 0:
            future.set_result(Completion([], [], [], "length"))
            return future
        gen = torch.Generator(device=self._device()).manual_seed(int(seed))
        request = _Request([int(t) for t in prompt], params, future, gen)
        with self._queue:
            self._pending.append(request)
            start, self._running = not self._running, True
        if start:
            threading.Thread(target=self._serve, name="skyhub-hf-engine", daemon=True).start()
        return future

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        """One completion per prompt: `submit` for each, then wait for all of them."""
        if not prompts:
            return []
        if seeds is None:
            base = self.seed if params.seed is None else params.seed
            seeds = [base + i for i in range(len(prompts))]
        futures = [self.submit(p, params, s) for p, s in zip(prompts, seeds, strict=True)]
        return [f.result() for f in futures]

    def close(self) -> None:
        self._closed = True

    # ------------------------------------------------------------------ the scheduler
    def _serve(self) -> None:
        """The scheduler thread (see `_decode`). Should it break, every request it holds or
        that waits gets the error, and the next `submit` starts a new one."""
        cohorts: list[_Cohort] = []
        try:
            self._decode(cohorts)
        except BaseException as e:
            with self._queue:
                waiting, self._pending = self._pending, []
                self._running = False
                self.model.train(self._was_training)
            error = e if isinstance(e, Exception) else RuntimeError(f"hf engine stopped: {e!r}")
            _fail([r for c in cohorts for r in c.rows] + waiting, error)
            raise

    @torch.no_grad()
    def _decode(self, cohorts: list[_Cohort]) -> None:
        """Admit what is pending, decode one step of every cohort, complete the rows that
        stopped; return when nothing is left (the next `submit` starts another thread)."""
        with self._queue:
            self._was_training = self.model.training
            self.model.eval()
        while True:
            with self._queue:
                active = sum(len(c.rows) for c in cohorts)
                room = max(0, self.max_batch - active)
                admitted, self._pending = self._pending[:room], self._pending[room:]
                if not admitted and not cohorts:  # idle: hand the module back as it was
                    self._running = False
                    self.model.train(self._was_training)
                    return
            done: list[_Request] = []
            if admitted:
                try:
                    cohorts.append(self._cohort(admitted))
                except Exception as e:
                    _fail(admitted, e)
            for c in list(cohorts):
                try:
                    done += self._step(c)
                except Exception as e:  # that cohort's callers get the error; others go on
                    _fail(c.rows, e)
                    c.rows = []
                if not c.rows:
                    cohorts.remove(c)
            if len(cohorts) > 1:
                cohorts[:] = _merge(cohorts)
            idle = False
            if done and not cohorts:
                with self._queue:  # the module's mode is back before any caller hears
                    if not self._pending:
                        idle, self._running = True, False
                        self.model.train(self._was_training)
            for r in done:
                r.out.text = self.tokenizer.decode(r.out.token_ids, skip_special_tokens=True)
                r.future.set_result(r.out)
            if idle:
                return

    def _cohort(self, rows: list[_Request]) -> _Cohort:
        from transformers import DynamicCache

        device = self._device()
        n, width = len(rows), max(len(r.prompt) for r in rows)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r.prompt):] = torch.tensor(r.prompt, dtype=torch.long)
            mask[i, width - len(r.prompt):] = 1
        top_p = [r.params.top_p if r.params.top_p < 1.0 else float("inf") for r in rows]
        ids, mask = ids.to(device), mask.to(device)
        cache = DynamicCache()
        return _Cohort(rows, cache, ids, mask, (mask.cumsum(-1) - 1).clamp(min=0),
                       torch.tensor([float(r.params.temperature) for r in rows], device=device),
                       torch.tensor(top_p, device=device) if min(top_p) < 1.0 else None,
                       {_cache_arg(self.model): cache, **_forward_kw(self.model)})

    def _step(self, c: _Cohort) -> list[_Request]:
        """One forward pass and one sampled token per row of `c`; returns the rows that
        stopped (removed from `c`)."""
        with self._lock:  # weights change only between steps
            version = self.version
            logits = self.model(input_ids=c.step_ids, attention_mask=c.mask,
                                position_ids=c.positions, use_cache=True,
                                **c.forward_kw).logits[:, -1, :].float()
        tokens, logps = _sample(logits, c.temperature, c.top_p,
                                [r.gen for r in c.rows],
                                [r.params.temperature <= 0 for r in c.rows])
        # the one copy to the host: a token id and a logprob per row
        host = torch.stack((tokens.to(torch.float64), logps.to(torch.float64))).cpu().tolist()
        keep, done = [], []
        for b, r in enumerate(c.rows):
            tok, out = int(host[0][b]), r.out
            out.token_ids.append(tok)
            out.logprobs.append(host[1][b])
            out.versions.append(version)
            p = r.params
            if tok in p.stop_token_ids or (p.stop and self._hit_stop(out, p.stop)):
                out.finish_reason = "stop"
                done.append(r)
            elif len(out.token_ids) >= p.max_tokens:
                done.append(r)  # finish_reason stays "length"
            else:
                keep.append(b)
        if len(keep) < len(c.rows):
            c.rows = [c.rows[b] for b in keep]
            if not keep:
                return done
            index = torch.tensor(keep, device=tokens.device)
            c.cache.batch_select_indices(index)
            tokens, c.mask, c.positions = tokens[index], c.mask[index], c.positions[index]
            c.temperature = c.temperature[index]
            c.top_p = None if c.top_p is None else c.top_p[index]
        c.step_ids = tokens.view(-1, 1)
        c.mask = torch.cat([c.mask, c.mask.new_ones((len(c.rows), 1))], dim=1)
        c.positions = c.positions[:, -1:] + 1
        return done

    def _hit_stop(self, c: Completion, stop: tuple[str, ...]) -> bool:
        # Only the tail can hold a stop string that the newest token completed.
        tail = self.tokenizer.decode(c.token_ids[-8:], skip_special_tokens=False)
        return any(s in tail for s in stop)


def _mergeable(c: _Cohort) -> bool:
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    layers = getattr(c.cache, "layers", None)
    return (type(c.cache) is DynamicCache and bool(layers)
            and all(type(x) is DynamicLayer and x.is_initialized for x in layers))


def _merge(cohorts: list[_Cohort]) -> list[_Cohort]:
    """One cohort from every mergeable one (see the module's doc), the others as they are.

    Each cohort's cache holds `length` positions and its mask `length + 1` (the token that
    its next step feeds); shorter ones are left-padded to the longest, with mask 0, which
    attention ignores (positions are explicit, so padding does not shift them)."""
    import torch.nn.functional as F

    group = [c for c in cohorts if _mergeable(c)]
    if len(group) < 2:
        return cohorts
    lengths = [c.cache.layers[0].keys.shape[-2] for c in group]
    longest = max(lengths)
    base = group[0]
    for j, layer in enumerate(base.cache.layers):
        for name in ("keys", "values"):
            setattr(layer, name, torch.cat(
                [F.pad(getattr(c.cache.layers[j], name), (0, 0, longest - n, 0))
                 for c, n in zip(group, lengths, strict=True)], dim=0))
    top_p = None if all(c.top_p is None for c in group) else torch.cat(
        [c.top_p if c.top_p is not None else torch.full_like(c.temperature, float("inf"))
         for c in group])
    base.mask = torch.cat([F.pad(c.mask, (longest - n, 0))
                           for c, n in zip(group, lengths, strict=True)], dim=0)
    base.rows = [r for c in group for r in c.rows]
    base.step_ids = torch.cat([c.step_ids for c in group], dim=0)
    base.positions = torch.cat([c.positions for c in group], dim=0)
    base.temperature = torch.cat([c.temperature for c in group], dim=0)
    base.top_p = top_p
    return [base] + [c for c in cohorts if not any(c is g for g in group)]


def _fail(rows: list[_Request], error: Exception) -> None:
    for r in rows:
        if not r.future.done():
            r.future.set_exception(error)


def _forward_kw(model: Any) -> dict[str, Any]:
    """What a cohort passes its forward besides ids, mask, positions and its cache: where
    the forward takes it, `logits_to_keep=1`, so a prefill projects only each row's last
    position onto the vocabulary (rows x vocab, not rows x prompt length x vocab: 39 GB in
    float32 for 64 prompts of 1,000 tokens at Qwen2.5's 152k vocabulary)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return {"logits_to_keep": 1} if "logits_to_keep" in params else {}


def _cache_arg(model: Any) -> str:
    """The forward argument that takes the KV cache: `cache` in newer transformers,
    `past_key_values` before (vLLM pins such a version). Passing the wrong one is silently
    swallowed by `**kwargs`, and every step would then see only its newest token."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _sample(logits: Tensor, temperature: Tensor, top_p: Tensor | None,
            gens: list[torch.Generator],
            greedy: list[bool]) -> tuple[Tensor, Tensor]:
    """One token per row, and its logprob under softmax(logits / temperature), all on the
    logits' device.

    Greedy rows (temperature 0) take the argmax, with the logprob at temperature 1. Top-p
    (per row; inf: off; None: off for all) restricts which tokens can be drawn, without
    renormalising the reported logprob. Each sampled row draws its noise from its own
    generator (Gumbel-max), so rows do not affect each other's randomness; greedy rows draw
    none.
    """
    t = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    logp = torch.log_softmax(logits / t[:, None], dim=-1)
    if all(greedy):
        tokens = logits.argmax(dim=-1)
        return tokens, logp.gather(-1, tokens[:, None])[:, 0]
    allowed = logp
    if top_p is not None:
        sorted_lp, order = logp.sort(dim=-1, descending=True)
        p = sorted_lp.exp()
        drop_sorted = (p.cumsum(dim=-1) - p) >= top_p[:, None]  # keep the token crossing top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        allowed = logp.masked_fill(drop, float("-inf"))
    vocab, device = logp.shape[-1], logp.device
    noise = torch.stack([torch.zeros(vocab, device=device) if g0 else
                         torch.rand(vocab, generator=g, device=device)
                         for g, g0 in zip(gens, greedy, strict=True)])
    gumbel = -torch.log(-torch.log(noise.clamp(1e-20, 1.0 - 1e-7)))
    tokens = (allowed + gumbel).argmax(dim=-1)
    if any(greedy):
        tokens = torch.where(temperature > 0, tokens, logits.argmax(dim=-1))
    return tokens, logp.gather(-1, tokens[:, None])[:, 0]
