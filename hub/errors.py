"""Exceptions for misuse of the API and broken infrastructure.

Agent mistakes (malformed actions, bad SQL, crashing code) are never exceptions: they become
observations. Everything here is for the *user* of skyhub or its operator, and every message
says what went wrong, where, and what to do next.
"""

from __future__ import annotations


class SkyhubError(Exception):
    """Base class of every skyhub error, so callers can catch them all at once."""


class EnvNotFound(SkyhubError, KeyError):
    """An env id that is not registered (raised by `make`, `spec`, `make_vec`)."""

    def __init__(self, message: str, *, env_id: str = "", suggestions: tuple[str, ...] = ()):
        super().__init__(message)
        self.env_id = env_id
        self.suggestions = suggestions

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class DataNotFound(SkyhubError, FileNotFoundError):
    """A dataset or file the env needs is missing; the message says how to get it."""


class SandboxUnavailable(SkyhubError, RuntimeError):
    """A sandbox backend or service cannot be reached (no Docker daemon, no API key, ...)."""


class InfraError(SkyhubError, RuntimeError):
    """The environment's infrastructure failed (not the agent). Episodes hit by it are marked
    `infra_error` so that a trainer masks them instead of scoring them 0."""


class AgentError(InfraError):
    """The agent's model could not answer (its server kept failing, rate-limited or timed out
    after every retry). The episode is recorded as an infra error, never as a wrong answer."""


class UsageError(SkyhubError, ValueError):
    """The API was called in a way that cannot work (a snapshot restored on another sandbox,
    a step sent to a busy env...); the message says what to do instead."""


class RegistrationError(UsageError):
    """An env id registered twice, a malformed id or entry point."""


__all__ = [
    "AgentError",
    "DataNotFound",
    "EnvNotFound",
    "InfraError",
    "RegistrationError",
    "SandboxUnavailable",
    "SkyhubError",
    "UsageError",
]
