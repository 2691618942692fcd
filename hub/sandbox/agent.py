"""Moved to `skyhub.sandbox.guest` (the in-sandbox daemon); kept so old imports work."""

from skyhub.sandbox.guest import *  # noqa: F403
from skyhub.sandbox.guest import _Capped, tar_bytes  # noqa: F401
