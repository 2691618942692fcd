"""Sharing envs: `scaffold` (`skyhub new`: a ready-to-publish env package), `publish`
(`skyhub publish`: build it, put it in a hub, push its image) and `install` (`skyhub install`:
pip-install it from a hub and register its envs). Import the module you need; this package
imports nothing.
"""
