"""Moved to skyhub.share.publish (publishing) and skyhub.share.install (installing); kept so old
imports (`skyhub.publish`) work. No logic here.
"""

from __future__ import annotations

from skyhub.share.install import (
    InstallResult,
    distribution_candidates,
    hub_projects,
    install,
    parse_requirement,
    pip_install_command,
)
from skyhub.share.publish import (
    DIST_SUFFIXES,
    REGISTRY_ENV,
    TWINE_HINT,
    Package,
    PublishPlan,
    PublishResult,
    build,
    build_command,
    dist_project,
    image_commands,
    image_ref,
    is_url,
    normalize,
    plan_publish,
    publish,
    publish_to_dir,
    read_package,
    twine_command,
    write_index,
)

__all__ = [
    "DIST_SUFFIXES",
    "REGISTRY_ENV",
    "TWINE_HINT",
    "InstallResult",
    "Package",
    "PublishPlan",
    "PublishResult",
    "build",
    "build_command",
    "dist_project",
    "distribution_candidates",
    "hub_projects",
    "image_commands",
    "image_ref",
    "install",
    "is_url",
    "normalize",
    "parse_requirement",
    "pip_install_command",
    "plan_publish",
    "publish",
    "publish_to_dir",
    "read_package",
    "twine_command",
    "write_index",
]
