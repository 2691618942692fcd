"""The SQL family's exceptions, subclasses of `skyhub.errors`' base classes (so `except
SkyhubError` catches them): the query workers' lost child, and a dataset release without a
pinned hash. The download errors every download shares (`DownloadError`, `ChecksumMismatch`)
are core's, in `skyhub.errors`."""

from __future__ import annotations

from skyhub.errors import DownloadError, SkyhubError


class WorkerLost(SkyhubError):
    """The child died or was killed before it answered; `timed_out` when past its deadline.

    Raised by the SQL engines' query workers (DuckDB, PostgreSQL: `skyhub.envs.sql.engines`)
    and turned by the engine into a timeout or error observation for the agent's query; a
    new child is started for the next one."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class UnverifiedDownload(DownloadError):
    """A release has no pinned SHA-256 and the user has not accepted the computed one yet.

    Raised by `skyhub sql data get` (`skyhub.envs.sql.datasets.download`). Fix: rerun with
    the `--sha256` the message prints, or `--no-verify`."""


__all__ = ["UnverifiedDownload", "WorkerLost"]
