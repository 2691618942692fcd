"""Sandbox tests use the `docker_daemon` and `bwrap` fixtures of tests/conftest.py."""
