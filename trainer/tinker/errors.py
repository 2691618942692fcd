"""Moved to `skyhub.errors` (every exception of skyhub is defined there); kept so old imports
work.

`Unsupported` is the caller's to fix (an unknown loss, a wrong shape, a missing checkpoint):
its future fails with category "user", and the SDK raises `RequestFailedError` with this
message. Anything else raised while running a request fails it with category "server".
"""

from skyhub.errors import Unsupported

__all__ = ["Unsupported"]
