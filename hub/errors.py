"""Exceptions for misuse of the API and broken infrastructure: every exception class of
skyhub, its families and its trainer is defined here (tests/core/test_layering.py checks it,
and lists the few exemptions with their reasons).

Agent mistakes (malformed actions, bad SQL, crashing code) are never exceptions: they become
observations. Everything here is for the *user* of skyhub or its operator, and every message
says what went wrong, where, and what to do next.

The first part is the API's errors, all `SkyhubError`s. The second part is the errors of
particular layers (sandboxes, vector workers, checks, families, the Tinker server); each kept
the base classes it had in its old module (which re-exports it, so old imports keep working),
so what catches it is unchanged.
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


class MissingDependency(SkyhubError, ImportError):
    """An env's optional dependency is not installed; the message names the extra to install.

    Raised by `make` (and the env's constructor) when an import the env needs fails. Fix:
    `pip install 'skyhub[EXTRA]'` with the extra the message names."""


# ------------------------------------------------------------------------------- sandboxes
class ChannelBroken(Exception):
    """A channel's process ended or its stream failed (killed, container stopped...).

    Raised by `Channel.request`/`recv` (`skyhub.sandbox`): the process behind the channel is
    gone, so the channel is unusable. Fix: spawn a new channel (the families do so, and report
    the episode as an infra error); if it keeps happening, read the sandbox's log."""


class ChannelTimeout(ChannelBroken):
    """The process did not answer in time.

    Raised by `Channel.request` past its timeout; the channel is then broken. Fix: give the
    request a longer timeout, or find out why the process hangs."""


class ReplyTooLarge(ChannelBroken):
    """A reply (or a stream frame) over the channel's byte budget: refused unread, so the
    channel is broken (the rest of it is still in the stream).

    Raised by the Docker channel. Fix: raise the channel's byte limit, or make the process
    answer with less."""


# ---------------------------------------------------------------------------- vector workers
class WorkerDied(InfraError):
    """The process (or actor) holding an env is gone; the env must be recreated.

    Raised by `VectorEnv` executors (subprocess, Ray) when a worker exits or is killed. The
    vector env replaces the worker; an episode hit by it is an infra error."""


class RemoteEnvError(InfraError):
    """An env raised inside a worker process; carries the remote traceback text.

    Raised by `VectorEnv` executors in the parent for an exception of the env in a worker
    (`type_name`, `remote_traceback`). Fix: the env's bug, which `remote_traceback` shows."""

    def __init__(self, type_name: str, message: str, remote_traceback: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.remote_traceback = remote_traceback


# ------------------------------------------------------------------------------------ checks
class CheckFailed(Exception):
    """A check's verdict (not a crash): its message goes into the report as is.

    Raised inside `skyhub.eval.checks` by one contract check and caught by `check_env`, which
    records it as that check's FAIL; it never reaches the caller. Fix: what the message says
    the env does wrong."""


# ------------------------------------------------------------------------------ SQL family
class WorkerLost(Exception):
    """The child died or was killed before it answered; `timed_out` when past its deadline.

    Raised by the SQL engines' query workers (DuckDB, PostgreSQL: `skyhub.envs.sql.engines`)
    and turned by the engine into a timeout or error observation for the agent's query; a
    new child is started for the next one."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class DownloadError(SkyhubError, RuntimeError):
    """A release could not be fetched or unpacked; the message says what to try instead.

    Raised by `skyhub data get` (`skyhub.envs.sql.datasets.download`). Fix: retry, pass
    `--url` to a mirror or a file downloaded by hand, or unpack it under the data root."""


class ChecksumMismatch(DownloadError):
    """A downloaded file does not hash to the pinned SHA-256 (nothing was unpacked).

    Fix: download again (a truncated or changed file); if the release itself changed, check
    it and pass its hash with `--sha256`."""


class UnverifiedDownload(DownloadError):
    """A release has no pinned SHA-256 and the user has not accepted the computed one yet.

    Fix: rerun with the `--sha256` the message prints, or `--no-verify`."""


# --------------------------------------------------------------------------- Harbor family
class Tampered(Exception):
    """The agent left the container so that the verifier cannot be run faithfully.

    Raised by the Harbor verifier (`skyhub.envs.harbor.verifier`); the env catches it: the
    episode gets no verifier reward, and its info says why (`error`, `sandbox_broken`). The
    agent's doing, not the user's."""


class BadReward(Exception):
    """No usable reward: missing, not a regular file, too big, or not a number.

    Raised by the Harbor verifier when tests/test.sh did not write a reward it can read; the
    env catches it, and the episode's info says why (`error`). Fix (for a task author): make
    tests/test.sh write a number to /logs/verifier/reward.txt (or reward.json)."""


# --------------------------------------------------------------------- training
class WeightSyncError(InfraError):
    """A rollout engine's weights are not the learner's after a sync: its logprobs of a fixed
    probe sequence differ from the learner's (`skyhub.trainer.weight_sync.check_sync`).

    Raised right after `update_weights`, so no sample comes from stale weights. Fix: check
    that the engine's weight names match the model's state_dict and that the transport
    (`weight_sync=` of the vLLM engine) reaches its workers."""


# --------------------------------------------------------------------- Tinker-compatible server
class Unsupported(ValueError):
    """A Tinker request this server cannot carry out; the message says what and how to fix it.

    Raised by `skyhub.trainer.tinker` (an unknown loss, a wrong shape, a missing checkpoint):
    its future fails with category "user", and the SDK raises `RequestFailedError` with this
    message. Fix: what the message says (a supported loss, the right shapes...)."""


class BodyTooLarge(ValueError):
    """A request body (after decompression) over the Tinker server's limit.

    Raised while reading a request; answered 413. Fix: send smaller requests, or start the
    server with a larger `--max-body-mb`."""


__all__ = [
    "AgentError",
    "BadReward",
    "BodyTooLarge",
    "ChannelBroken",
    "ChannelTimeout",
    "CheckFailed",
    "ChecksumMismatch",
    "DataNotFound",
    "DownloadError",
    "EnvNotFound",
    "InfraError",
    "MissingDependency",
    "RegistrationError",
    "RemoteEnvError",
    "ReplyTooLarge",
    "SandboxUnavailable",
    "SkyhubError",
    "Tampered",
    "Unsupported",
    "UnverifiedDownload",
    "UsageError",
    "WeightSyncError",
    "WorkerDied",
    "WorkerLost",
]
