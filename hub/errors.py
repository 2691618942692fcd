"""Exceptions for misuse of the API and broken infrastructure: the base classes every skyhub
error derives from, and core's own errors. Every public exception of skyhub, its families and
its trainer is a `SkyhubError` (tests/core/test_errors.py checks it), so `except SkyhubError`
catches them all.

Agent mistakes (malformed actions, bad SQL, crashing code) are never exceptions: they become
observations. Everything here is for the *user* of skyhub or its operator, and every message
says what went wrong, where, and what to do next. The kinds:
- `UsageError` (a `ValueError`): the API was called in a way that cannot work; the message
  says how to call it instead;
- `MissingDependency` (an `ImportError`): a package an env, command or backend needs is not
  installed; the message names what to install;
- `DataNotFound`, `EnvNotFound`: something to read or make is not there;
- `InfraError` (and `SandboxUnavailable`): the infrastructure failed, not the agent.

A family or the trainer defines its own exceptions in its own package, subclasses of these
(tests/core/test_layering.py checks where they live), so a new family never edits core:
`skyhub.envs.sql.errors` (`WorkerLost`, `UnverifiedDownload`), `skyhub.envs.harbor.errors`
(`Tampered`, `BadReward`), `skyhub.trainer.errors` (`WeightSyncError`) and
`skyhub.trainer.tinker.exceptions` (`Unsupported`, `BodyTooLarge`).

The second part of this module is the errors of particular core layers (sandboxes, vector
workers, checks, downloads); each keeps the builtin base class it had, so what catches it is
unchanged.
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
    a step sent to a busy env, a kwarg value the env refuses, a task or dataset file it cannot
    read); the message says what to do instead."""


class RegistrationError(UsageError):
    """An env id registered twice, a malformed id or entry point."""


class MissingDependency(SkyhubError, ImportError):
    """An optional dependency is not installed; the message names the extra to install.

    Raised by `make` (and the env's constructor), a command or a backend when an import it
    needs fails: every missing package is reported as this. Fix: `pip install 'skyhub[EXTRA]'`
    with the extra the message names."""


# ------------------------------------------------------------------------------- sandboxes
class SandboxSDKMissing(MissingDependency, SandboxUnavailable):
    """A sandbox backend's SDK (docker, e2b) is not installed.

    Raised when the backend is first used. A `MissingDependency`, and a `SandboxUnavailable`
    too, so an env that reports an unreachable sandbox as an infra error still does. Fix:
    `pip install 'skyhub[docker]'` (or `[e2b]`), as the message says."""


class ChannelBroken(SkyhubError):
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
class CheckFailed(SkyhubError):
    """A check's verdict (not a crash): its message goes into the report as is.

    Raised inside `skyhub.eval.checks` by one contract check and caught by `check_env`, which
    records it as that check's FAIL; it never reaches the caller. Fix: what the message says
    the env does wrong."""


# ------------------------------------------------------------------------------------- forks
class ForkUnavailable(SkyhubError, RuntimeError):
    """An env could not be forked (`env.fork`, `VectorEnv.fork`); nothing was left open.

    Raised by `skyhub.fork`: the env was never reset, is closed or its episode has ended; or a
    fork by replay could not make a fresh env (no `skyhub.make` spec) or got back something
    other than the episode's results (the message shows the first difference). Fix: fork an
    episode that is still running; pass `factory=`; make the env deterministic under replay
    (`replay_ignore`) or give it a state copy (`fork_state`)."""


# --------------------------------------------------------------------------------- downloads
class DownloadError(SkyhubError, RuntimeError):
    """A file could not be fetched or unpacked; the message says what to try instead.

    Raised by `skyhub sql data get` (`skyhub.envs.sql.datasets.download`) and `skyhub install`
    (`skyhub.share.install`). Fix: retry, pass `--url` to a mirror or a file downloaded by
    hand, or unpack it under the data root."""


class ChecksumMismatch(DownloadError):
    """A file does not hash to the pinned SHA-256 (nothing was unpacked or installed).

    Raised by `skyhub sql data get` and by `skyhub install` for a hub's file changed after it
    was published. Fix: download again (a truncated or changed file); if the release itself
    changed, check it and pass its hash with `--sha256` (or publish the package again)."""


__all__ = [
    "AgentError",
    "ChannelBroken",
    "ChannelTimeout",
    "CheckFailed",
    "ChecksumMismatch",
    "DataNotFound",
    "DownloadError",
    "EnvNotFound",
    "ForkUnavailable",
    "InfraError",
    "MissingDependency",
    "RegistrationError",
    "RemoteEnvError",
    "ReplyTooLarge",
    "SandboxSDKMissing",
    "SandboxUnavailable",
    "SkyhubError",
    "UsageError",
    "WorkerDied",
]
