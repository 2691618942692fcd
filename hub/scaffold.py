"""Moved to skyhub.share.scaffold; kept so old imports (`skyhub.scaffold`) work. No logic here."""

from __future__ import annotations

from skyhub.share.scaffold import DOCKER_SECTION, TEMPLATES, EnvNames, env_names, render, scaffold

__all__ = ["DOCKER_SECTION", "TEMPLATES", "EnvNames", "env_names", "render", "scaffold"]
