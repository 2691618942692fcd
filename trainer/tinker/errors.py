"""The two ways a Tinker request fails, as the SDK tells them apart.

`Unsupported` is the caller's to fix (an unknown loss, a wrong shape, a missing checkpoint):
its future fails with category "user", and the SDK raises `RequestFailedError` with this
message. Anything else raised while running a request fails it with category "server".
"""

from __future__ import annotations


class Unsupported(ValueError):
    """A request this server cannot carry out; the message says what and how to fix it."""
