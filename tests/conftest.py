"""Shared fixtures for the whole suite. Keep this small: fixtures a single file needs live there."""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

_counter = itertools.count()


@pytest.fixture
def repo_root() -> Path:
    """The repository root (where pyproject.toml is)."""
    return REPO_ROOT


@pytest.fixture
def tmp_env_id() -> Iterator[str]:
    """A fresh env id, unregistered after the test whatever the test registered under it."""
    from skyhub.registry import unregister

    env_id = f"testtmp-env{next(_counter)}"
    yield env_id
    unregister(env_id)


# -- services: skip where missing, fail where CI requires them (SKYHUB_REQUIRE_*=1 in .ci/run)
def need_service(what: str, env_var: str, reason: str) -> None:
    if os.environ.get(env_var) == "1":
        pytest.fail(f"{what} is required here ({env_var}=1) but {reason}")
    pytest.skip(f"{what}: {reason} (bash scripts/services.sh installs and starts it)")


@pytest.fixture(scope="session")
def docker_daemon() -> Iterator[None]:
    """A Docker daemon that answers, and a check after the session that no container with
    skyhub's labels and this process as owner is left behind."""
    from skyhub.sandbox.docker_client import docker_available

    if not docker_available():
        need_service("Docker", "SKYHUB_REQUIRE_DOCKER", "no Docker daemon answers")
    yield
    import docker

    client = docker.from_env()
    left = client.containers.list(all=True, ignore_removed=True, filters={
        "label": ["skyhub.sandbox=1", f"skyhub.owner_pid={os.getpid()}"]})
    names = [c.name for c in left]
    for c in left:
        c.remove(force=True)
    assert not names, f"tests left sandbox containers behind: {names}"


@pytest.fixture(scope="session")
def bwrap() -> str:
    path = shutil.which("bwrap")
    if path is None:
        need_service("bubblewrap", "SKYHUB_REQUIRE_BWRAP", "bwrap is not on the PATH")
    return path


@pytest.fixture(scope="session")
def need() -> Callable[[str, str, str], None]:
    """`need(what, env_var, reason)`: skip, or fail when `env_var`=1 (CI)."""
    return need_service


# -- sandbox backends: one fixture parametrised over them, for the test files of every family
@pytest.fixture(scope="module")
def local_backend(bwrap: str) -> str:
    """"local", once bubblewrap is there (a family's conftest may ask for more: override it)."""
    return "local"


@pytest.fixture(scope="module")
def docker_backend(docker_daemon: None) -> str:
    """"docker", once a daemon answers (a family's conftest may ask for its image: override it)."""
    return "docker"


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> str:
    """Each sandbox backend in turn, skipped (or failed in CI) where its service is missing:
    what "missing" means is `local_backend`'s and `docker_backend`'s to say."""
    return request.getfixturevalue(f"{request.param}_backend")


# -- order: the longest files first -------------------------------------------------------
#: The files that take minutes (from `--durations`), longest first. scripts/test.sh runs the
#: suite on parallel workers, a file at a time, in collection order: started last, one of
#: these would run alone at the end while the other workers sit idle.
LONGEST_FILES = (
    "tests/trainer/test_learning.py",
    "tests/envs/python/test_python_tools.py",
    "tests/test_docs.py",
    "tests/envs/test_eval_oracles.py",
    "tests/envs/python/test_python_envs.py",
    "tests/trainer/test_determinism.py",
    "tests/trainer/test_fsdp_learner.py",
    "tests/harness/test_terminus.py",
    "tests/harness/test_mini_swe_agent.py",
    "tests/envs/swe/test_synth.py",
    "tests/trainer/test_tool_learning.py",
    "tests/core/share/test_scaffold_publish.py",
    "tests/trainer/test_tinker_parts.py",
    "tests/envs/harbor/test_harbor_fidelity.py",
    "tests/trainer/test_reference_losses.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the tests of `LONGEST_FILES` first, in that order (the rest keep theirs)."""
    rank = {path: i for i, path in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
