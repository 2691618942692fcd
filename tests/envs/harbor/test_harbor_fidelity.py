"""Harbor's own example tasks, and one task per feature of Harbor's format, run as Harbor runs
them: the oracle (solution/solve.sh) scores 1, doing nothing scores 0, none is an infra error.

Harbor's examples (harbor-examples/, Apache-2.0, see its SOURCE.md) had their FROM lines
changed to images present here, since no registry is reachable; `test_base_images_are_local`
records each task's FROM line and that it names a local image. hello-healthcheck keeps
`FROM python:3.13-slim`: the fixture tags a stand-in under that name (debian:bookworm-slim with
`python` -> python3) when the daemon has no such image.
The feature tasks (tasks/ and tasks-slow/, see tasks/README.md) are ours.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import skyhub

HERE = Path(__file__).parent
EXAMPLES = HERE / "harbor-examples"
FEATURES = HERE / "tasks"
SLOW = HERE / "tasks-slow"  # python-long: a solve.sh that runs past the old 60 s command cap
STAND_INS = {"python:3.13-slim": "FROM debian:bookworm-slim\n"
                                 "RUN ln -s /usr/bin/python3 /usr/local/bin/python\n"}

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def task_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir()
                  if p.is_dir() and ((p / "task.toml").is_file() or (p / "task.yaml").is_file()))


ALL = [*task_dirs(EXAMPLES), *task_dirs(FEATURES), *task_dirs(SLOW)]


@pytest.fixture(scope="module")
def stand_ins(docker_daemon: None) -> Iterator[None]:
    """Local images under the names Harbor's examples start FROM (removed afterwards when
    this test made them)."""
    import docker

    client = docker.from_env()
    made = []
    for name, dockerfile in STAND_INS.items():
        try:
            client.images.get(name)
        except docker.errors.ImageNotFound:
            client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=name, rm=True,
                                pull=False)
            made.append(name)
    yield
    for name in made:
        with contextlib.suppress(docker.errors.APIError):  # used by a task image: kept
            client.images.remove(name)


def test_base_images_are_local(stand_ins: None) -> None:
    """Each task's FROM line, recorded, names an image this daemon has (nothing is pulled)."""
    import docker

    client = docker.from_env()
    froms = {}
    for d in ALL:
        for dockerfile in d.rglob("Dockerfile"):
            for line in dockerfile.read_text().splitlines():
                if line.strip().upper().startswith("FROM "):
                    froms[str(dockerfile.relative_to(HERE))] = line.split()[1]
    assert froms["harbor-examples/hello-user/environment/Dockerfile"] == "debian:bookworm-slim"
    assert froms["harbor-examples/hello-workdir/environment/Dockerfile"] == \
        "debian:bookworm-slim"
    assert froms["harbor-examples/hello-healthcheck/environment/Dockerfile"] == \
        "python:3.13-slim"
    missing = []
    for where, image in froms.items():
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            missing.append(f"{where}: {image}")
    assert not missing, missing


def oracle(env: Any) -> tuple[float, dict[str, Any]]:
    """The oracle agent's loop: reference actions until the episode ends."""
    for _ in range(40):
        _, reward, terminated, truncated, info = env.step(env.reference_action())
        if terminated or truncated:
            return reward, info
    raise AssertionError("the oracle did not finish in 40 steps")


def nop(env: Any) -> tuple[float, dict[str, Any]]:
    """An agent that does nothing: `<done/>` at every step (multi-step tasks ask again)."""
    for _ in range(40):
        _, reward, terminated, truncated, info = env.step("<done/>")
        if terminated or truncated:
            return reward, info
    raise AssertionError("nop did not finish in 40 steps")


@pytest.mark.parametrize("task_dir", ALL, ids=[p.name for p in ALL])
def test_oracle_scores_one_and_nop_zero(stand_ins: None, task_dir: Path) -> None:
    kwargs: dict[str, Any] = {}
    if (task_dir / "skyhub-test.toml").is_file():  # what a feature task asks of the caller
        import tomllib

        kwargs = tomllib.loads((task_dir / "skyhub-test.toml").read_text()).get("kwargs", {})
    with skyhub.make("harbor", data_dir=str(task_dir), **kwargs) as env:
        env.reset()
        reward, info = oracle(env)
        assert (reward, info["outcome"], info["infra_error"]) == (1.0, "success", False), \
            (task_dir.name, info.get("why"), info.get("verifier_output"))
        assert not info.get("sandbox_broken"), info
        env.reset()
        reward, info = nop(env)
        assert (reward, info["infra_error"]) == (0.0, False), (task_dir.name, info)
        assert info["outcome"] == "failure" and info["why"], info
