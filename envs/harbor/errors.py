"""The Harbor family's exceptions, subclasses of `skyhub.errors.SkyhubError`: the verifier's
two ways of having no reward to give. Both are caught by the env and become the episode's
info (`error`, `sandbox_broken`); they reach a user only who calls the verifier directly."""

from __future__ import annotations

from skyhub.errors import SkyhubError


class Tampered(SkyhubError):
    """The agent left the container so that the verifier cannot be run faithfully.

    Raised by the Harbor verifier (`skyhub.envs.harbor.verifier`); the env catches it: the
    episode gets no verifier reward, and its info says why (`error`, `sandbox_broken`). The
    agent's doing, not the user's."""


class BadReward(SkyhubError):
    """No usable reward: missing, not a regular file, too big, or not a number.

    Raised by the Harbor verifier when tests/test.sh did not write a reward it can read; the
    env catches it, and the episode's info says why (`error`). Fix (for a task author): make
    tests/test.sh write a number to /logs/verifier/reward.txt (or reward.json)."""


__all__ = ["BadReward", "Tampered"]
