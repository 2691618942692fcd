"""Moved to `skyhub.tags` (tag parsing); kept so old imports work."""

from skyhub.tags import *  # noqa: F403
from skyhub.tags import __all__  # noqa: F401
