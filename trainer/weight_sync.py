"""A weight sync's canary: after `engine.update_weights`, check that the engine samples from
the learner's weights.

Why: a sync can fail without an error. Names that match nothing in the engine's model are
skipped by vLLM's loader with a log line, a transport can land in the wrong buffer, an engine
can bump its version without loading anything. Training then goes on, with the rollout
sampling from a stale policy and the learner's importance weights quietly wrong. The check is
one short forward pass on each side: the log-probability of every token of a fixed probe
sequence under the learner's module (plain forward, temperature 1) against the engine's own
(`engine.score`, also temperature 1). If they differ by more than the precision of the two
models allows, the sync did not take and `check_sync` raises `WeightSyncError` (an `InfraError`).

What it can and cannot see: a sync that left the engine with other weights than the
learner's, as soon as those weights change the probe's logprobs by more than the tolerance.
Two weight sets whose logprobs agree within the tolerance are, for sampling, the same
policy, so a no-op sync after a step too small to move them is not caught, and need not be.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from skyhub.errors import UsageError
from skyhub.trainer.errors import WeightSyncError

if TYPE_CHECKING:
    import torch

#: Tokens in the default probe: enough positions that a stale engine shows, one short forward.
PROBE_LEN = 16


def tolerance(dtype: torch.dtype) -> float:
    """The largest mean |logprob difference| two correct copies of a model may show when the
    less precise of them computes in `dtype` (float32 engines agree with transformers to ~1e-5
    in the vLLM tests; bfloat16 keeps 8 bits of mantissa, so its logits move by ~1e-2)."""
    import torch

    return {torch.float64: 1e-4, torch.float32: 1e-3, torch.float16: 2e-2,
            torch.bfloat16: 5e-2}.get(dtype, 5e-2)


def default_probe(vocab_size: int, length: int = PROBE_LEN) -> list[int]:
    """A fixed token sequence spread over the vocabulary (the same for every run, so a run's
    canary values are comparable across steps)."""
    if vocab_size < 2:
        raise UsageError(f"a probe needs a vocabulary of at least 2 tokens, not {vocab_size}")
    return [(17 + 7919 * i) % vocab_size for i in range(length)]


def learner_logprobs(model: Any, probe: Sequence[int]) -> list[float]:
    """log p(token_i | tokens before it) for i >= 1 under `model` at temperature 1: one plain
    forward in eval mode (no dropout), the module's train/eval mode restored after."""
    import torch

    param = next(model.parameters())
    ids = torch.tensor([list(probe)], dtype=torch.long, device=param.device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(input_ids=ids, use_cache=False).logits[0, :-1].float()
    finally:
        model.train(was_training)
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None])[:, 0].cpu().tolist()


def engine_logprobs(engine: Any, probe: Sequence[int]) -> list[float]:
    """The engine's logprobs of `probe` at temperature 1: its `score` when it has one, else a
    forward of its `model` (an engine that samples from a transformers module)."""
    if hasattr(engine, "score"):
        return list(engine.score(list(probe)))
    if hasattr(engine, "model"):
        return learner_logprobs(engine.model, probe)
    raise UsageError(f"{type(engine).__name__} has neither score() nor a .model: the sync "
                     "canary cannot read its logprobs; give the engine a score(token_ids) "
                     "method (see skyhub.trainer.inference)")


def _dtype(obj: Any) -> torch.dtype | None:
    dtype = getattr(obj, "dtype", None)
    if dtype is not None:
        return dtype
    model = getattr(obj, "model", obj)
    params = getattr(model, "parameters", None)
    if params is None:
        return None
    return next(params()).dtype


def check_sync(engine: Any, model: Any, *, probe: Sequence[int] | None = None,
               atol: float | None = None) -> float:
    """Raise `WeightSyncError` (an `InfraError`) unless `engine`'s logprobs of `probe` match
    `model`'s.

    Call it after each `engine.update_weights(model.state_dict(), version)`. `probe`: token
    ids (default `default_probe(model.config.vocab_size)`). `atol`: the largest mean
    absolute logprob difference accepted (default `tolerance` of the less precise dtype of
    the two). Returns that mean difference (a number to log). Cost: one forward of the probe
    on each side. With a sharded (FSDP) learner the forward is a collective: call it on
    every rank, as the learner's own forward is.
    """
    import torch

    if probe is None:
        probe = default_probe(int(model.config.vocab_size))
    probe = [int(t) for t in probe]
    if len(probe) < 2:
        raise UsageError(f"the probe needs at least 2 tokens, got {len(probe)}")
    want = torch.tensor(learner_logprobs(model, probe))
    got = torch.tensor(engine_logprobs(engine, probe), dtype=torch.float32)
    if got.shape != want.shape:
        raise WeightSyncError(f"{type(engine).__name__}.score returned {got.numel()} logprobs for "
                         f"a probe of {len(probe)} tokens (expected {want.numel()})")
    if atol is None:
        dtypes = [d for d in (_dtype(engine), _dtype(model)) if d is not None]
        atol = max((tolerance(d) for d in dtypes), default=tolerance(torch.float32))
    diff = (got - want).abs()
    mean = float(diff.mean())
    if not mean <= atol:  # NaN fails too
        version = getattr(engine, "version", "?")
        raise WeightSyncError(
            f"weight sync to {type(engine).__name__} (version {version}) did not take: its "
            f"logprobs of a {len(probe)}-token probe differ from the learner's by {mean:.3g} "
            f"on average (max {float(diff.max()):.3g}; tolerance {atol:.3g}). The engine is "
            "sampling from other weights than the learner's: check that update_weights "
            "reached it (the names of model.state_dict() are the engine model's, the "
            "transport did not fail), or pass a larger atol= if the engine runs in a lower "
            "precision than its dtype says")
    return mean


__all__ = ["PROBE_LEN", "check_sync", "default_probe", "engine_logprobs", "learner_logprobs",
           "tolerance"]
