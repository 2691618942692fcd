"""The trainer's exceptions, subclasses of `skyhub.errors`' base classes (so `except
SkyhubError` catches them). The Tinker-compatible server's are in
`skyhub.trainer.tinker.exceptions`."""

from __future__ import annotations

from skyhub.errors import InfraError


class WeightSyncError(InfraError):
    """A rollout engine's weights are not the learner's after a sync: its logprobs of a fixed
    probe sequence differ from the learner's (`skyhub.trainer.weight_sync.check_sync`).

    Raised right after `update_weights`, so no sample comes from stale weights. Fix: check
    that the engine's weight names match the model's state_dict and that the transport
    (`weight_sync=` of the vLLM engine) reaches its workers."""


__all__ = ["WeightSyncError"]
