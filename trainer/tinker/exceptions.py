"""The Tinker-compatible server's exceptions: `UsageError`s (so `ValueError`s too, as they
were), each answered to the client with its message instead of crashing the server."""

from __future__ import annotations

from skyhub.errors import UsageError


class Unsupported(UsageError):
    """A Tinker request this server cannot carry out; the message says what and how to fix it.

    Raised by `skyhub.trainer.tinker` (an unknown loss, a wrong shape, a missing checkpoint):
    its future fails with category "user", and the SDK raises `RequestFailedError` with this
    message. Fix: what the message says (a supported loss, the right shapes...)."""


class BodyTooLarge(UsageError):
    """A request body (after decompression) over the Tinker server's limit.

    Raised while reading a request; answered 413. Fix: send smaller requests, or start the
    server with a larger `--max-body-mb`."""


__all__ = ["BodyTooLarge", "Unsupported"]
