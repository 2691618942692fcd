"""Multi-container Harbor tasks: the compose file's services besides `main` (harbor-cookbook's
multi-container recipe shape) started per episode on a network of their own, under their
service names, after what they depend on, healthy before the agent starts; new with each
reset, removed with the episode. The crafted task's test talks to a sidecar, which itself
read its value from another sidecar at start (service names as hostnames between sidecars,
depends_on, environment, healthcheck)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

import skyhub
from skyhub.envs.harbor import sidecars
from skyhub.errors import SandboxUnavailable, UsageError

TOML = """schema_version = "1.1"
[agent]
timeout_sec = 120.0
[verifier]
timeout_sec = 60.0
[environment]
memory_mb = 512
"""
# store serves $TOKEN; web (built from ./web, as harbor-cookbook's multi-container recipe
# builds its api-server) fetches it from store at start (store's name as its hostname) and
# serves it on 8000; main waits for web to be healthy
COMPOSE = """services:
  main:
    depends_on:
      web:
        condition: service_healthy
  store:
    image: debian:bookworm-slim
    environment:
      TOKEN: token-${GREETING:-from-store}
    command:
      - sh
      - -c
      - mkdir -p /srv && echo $$TOKEN > /srv/token && cd /srv && exec python3 -m http.server 8001
  web:
    build:
      context: ./web
    expose:
      - "8000"
    depends_on: [store]
    healthcheck:
      test:
        - CMD
        - python3
        - -c
        - import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/token', timeout=1)
      interval: 500ms
      timeout: 2s
      retries: 60
      start_period: 1s
"""
WEB_DOCKERFILE = ('FROM debian:bookworm-slim\nCOPY server.py /server.py\n'
                  'CMD ["python3", "/server.py"]\n')
WEB_SERVER = """import http.server, os, time, urllib.request
os.makedirs("/srv", exist_ok=True)
for _ in range(300):
    try:
        body = urllib.request.urlopen("http://store:8001/token", timeout=2).read()
        break
    except OSError:
        time.sleep(0.1)
open("/srv/token", "wb").write(body)
os.chdir("/srv")
http.server.test(http.server.SimpleHTTPRequestHandler, port=8000, bind="0.0.0.0")
"""
FETCH = ("python3 -c \"import urllib.request; open('/app/token.txt', 'wb').write("
         "urllib.request.urlopen('http://web:8000/token', timeout=5).read())\"")
SOLVE = f"#!/bin/bash\n{FETCH}\n"
TEST = """#!/bin/bash
got=$(python3 -c "import urllib.request; print(urllib.request.urlopen(
    'http://web:8000/token', timeout=5).read().decode().strip())" 2>&1)
if [ "$got" = token-from-store ] && [ "$(cat /app/token.txt 2>/dev/null)" = "$got" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "web said: $got; /app/token.txt: $(cat /app/token.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
"""


def make_task(root: Path, compose: str = COMPOSE, name: str = "sidecar-token") -> Path:
    d = root / name
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True)
    (d / "task.toml").write_text(TOML)
    (d / "instruction.md").write_text("Save what http://web:8000/token says to "
                                      "/app/token.txt.\n")
    (d / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (d / "environment" / "docker-compose.yaml").write_text(compose)
    (d / "environment" / "web").mkdir()
    (d / "environment" / "web" / "Dockerfile").write_text(WEB_DOCKERFILE)
    (d / "environment" / "web" / "server.py").write_text(WEB_SERVER)
    (d / "tests" / "test.sh").write_text(TEST)
    (d / "solution" / "solve.sh").write_text(SOLVE)
    return d


# -- reading the compose file, without Docker --------------------------------------------------
def read(tmp_path: Path, compose: str) -> tuple[list[sidecars.Sidecar], dict[str, str]]:
    (tmp_path / "docker-compose.yaml").write_text(compose)
    (tmp_path / "web").mkdir(exist_ok=True)
    (tmp_path / "web" / "Dockerfile").write_text(WEB_DOCKERFILE)
    return sidecars.read(tmp_path, {"GREETING": "hi"})


def test_services_are_read_in_dependency_order(tmp_path: Path) -> None:
    services, main_deps = read(tmp_path, COMPOSE)
    assert [s.name for s in services] == ["store", "web"]
    assert main_deps == {"web": "service_healthy"}
    store, web = services
    assert store.environment == {"TOKEN": "token-hi"}
    assert "echo $TOKEN > /srv/token" in store.command[2]  # $$ is a literal $
    assert (store.image, store.build_dir) == ("debian:bookworm-slim", None)
    assert (web.image, web.build_dir) == ("", (tmp_path / "web").resolve())
    assert web.depends_on == {"store": "service_started"}
    assert web.healthcheck["interval"] == 500_000_000 and web.healthcheck["retries"] == 60
    assert web.healthcheck["test"][0] == "CMD"


@pytest.mark.parametrize(("compose", "match"), [
    ("services:\n  db:\n    build: ./db\n", "has no Dockerfile"),
    ("services:\n  db:\n    build: {context: ./web, args: {A: 1}}\n", "build sets args"),
    ("services:\n  db:\n    build: {context: ./web, dockerfile: Other}\n",
     "build sets dockerfile"),
    ("services:\n  db:\n    image: x\n    volumes: [data:/data]\n", "sets volumes"),
    ("services:\n  db:\n    image: x\n    ports: ['5432:5432']\n", "sets ports"),
    ("services:\n  db:\n    image: x\n    privileged: true\n", "sets privileged"),
    ("services:\n  db:\n    command: x\n", "has no `image` or `build`"),
    ("services:\n  main:\n    depends_on: [db]\n", "depends on 'db'"),
    ("services:\n  a:\n    image: x\n    depends_on: [b]\n  b:\n    image: x\n"
     "    depends_on: [a]\n", "cycle: a -> b -> a"),
    ("services:\n  a:\n    image: x\n    depends_on: {b: {condition: service_ready}}\n"
     "  b:\n    image: x\n", "not one of"),
    ("services:\n  a:\n    image: x\n    healthcheck: {test: [CMD, 'true'], interval: 5 s}\n",
     "not a duration"),
])
def test_what_escapes_the_episode_or_is_malformed_is_refused(tmp_path: Path, compose: str,
                                                             match: str) -> None:
    with pytest.raises(UsageError, match=match):
        read(tmp_path, compose)


def test_no_compose_file_means_no_sidecars(tmp_path: Path) -> None:
    assert sidecars.read(tmp_path, {}) == ([], {})


# -- episodes, in Docker -----------------------------------------------------------------------
def episode(env: Any, agent: str) -> tuple[float, dict[str, Any]]:
    env.reset()
    for _ in range(10):
        action = env.reference_action() if agent == "oracle" else "<done/>"
        _, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return reward, info
    raise AssertionError("the episode did not end")


def episode_containers(client: Any, env: Any) -> tuple[str, list[str]]:
    running = env.unwrapped._sidecars
    return running.network.name, sorted(c.id for c in running.containers.values())


@pytest.mark.docker
@pytest.mark.slow
def test_the_tests_talk_to_a_sidecar_oracle_one_nop_zero(docker_daemon: None,
                                                         tmp_path: Path) -> None:
    """Oracle 1, nop 0, no infra error; each reset starts new sidecars on a new network and
    removes the last episode's; close removes everything."""
    import docker

    client = docker.from_env()
    with skyhub.make("harbor", data_dir=str(make_task(tmp_path))) as env:
        reward, info = episode(env, "oracle")
        assert (reward, info["outcome"], info["infra_error"]) == (1.0, "success", False), \
            (info.get("why"), info.get("verifier_output"))
        first_net, first = episode_containers(client, env)
        assert len(first) == 2
        reward, info = episode(env, "nop")
        assert (reward, info["outcome"], info["infra_error"]) == (0.0, "failure", False), info
        net, now = episode_containers(client, env)
        assert net != first_net and not set(now) & set(first)
        assert not client.containers.list(all=True, ignore_removed=True, filters={"id": first[0]})
        assert not client.networks.list(names=[first_net])
    assert not client.networks.list(names=[net])
    for cid in now:
        assert not client.containers.list(all=True, ignore_removed=True, filters={"id": cid})


@pytest.mark.docker
@pytest.mark.slow
def test_a_sidecar_that_never_gets_healthy_is_an_infra_error_with_its_logs(
        docker_daemon: None, tmp_path: Path) -> None:
    compose = ("services:\n  main:\n    depends_on:\n      web:\n        condition: "
               "service_healthy\n  web:\n    image: debian:bookworm-slim\n"
               "    command: [sh, -c, 'echo starting up; exec sleep infinity']\n"
               "    healthcheck:\n      test: [CMD, 'false']\n      interval: 200ms\n"
               "      retries: 2\n")
    import docker

    client = docker.from_env()
    before = {n.name for n in client.networks.list()}
    with skyhub.make("harbor", data_dir=str(make_task(tmp_path, compose))) as env, \
            pytest.raises(SandboxUnavailable, match=r"sidecar service web unhealthy: "
                                                    r"starting up"):
        env.reset()
    assert {n.name for n in client.networks.list()} == before  # nothing left behind


@pytest.mark.docker
@pytest.mark.slow
def test_training_isolation_refuses_sidecars(docker_daemon: None, tmp_path: Path) -> None:
    with skyhub.make("harbor", data_dir=str(make_task(tmp_path)), isolation="training") as env, \
            pytest.raises(UsageError, match=r"\(store, web\).*isolation='harbor'"):
        env.reset()


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("code", [0, 3])
def test_a_one_shot_dependency_must_complete_successfully(docker_daemon: None, tmp_path: Path,
                                                          code: int) -> None:
    """depends_on `service_completed_successfully`: main starts once the one-shot exited 0;
    exiting 3 is an infra error that says so."""
    compose = ("services:\n  main:\n    depends_on:\n      seed:\n        condition: "
               "service_completed_successfully\n  seed:\n    image: debian:bookworm-slim\n"
               f"    command: [sh, -c, 'echo seeding; exit {code}']\n")
    with skyhub.make("harbor", data_dir=str(make_task(tmp_path, compose))) as env:
        if code:
            with pytest.raises(SandboxUnavailable, match="sidecar service seed exited 3: "
                                                         "seeding"):
                env.reset()
            return
        env.reset()
        seed = env.unwrapped._sidecars.containers["seed"]
        seed.reload()
        assert (seed.status, seed.attrs["State"]["ExitCode"]) == ("exited", 0)


@pytest.mark.docker
@pytest.mark.slow
def test_a_dead_owners_network_and_sidecars_are_swept(docker_daemon: None) -> None:
    """What an env killed before close left (a network and a sidecar labelled with its owner's
    pid) goes at the next start; a live owner's stays."""
    import subprocess

    import docker

    from skyhub.sandbox.base import LABEL_OWNER_PID, owner_labels

    client = docker.from_env()
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = {**owner_labels(sidecars.POOL), LABEL_OWNER_PID: str(gone.pid)}
    made = []
    try:
        for labels in (dead, owner_labels(sidecars.POOL)):
            net = client.networks.create(f"skyhub-harbor-test-{len(made)}", labels=labels)
            c = client.containers.create("debian:bookworm-slim", ["sleep", "infinity"],
                                         labels=labels, network=net.name)
            made.append((net, c))
        assert made[0][0].name in sidecars.sweep(client)
        assert not client.networks.list(names=[made[0][0].name])
        assert not client.containers.list(all=True, ignore_removed=True,
                                          filters={"id": made[0][1].id})
        assert client.networks.list(names=[made[1][0].name])  # its owner (this test) lives
    finally:
        for net, c in made:
            with contextlib.suppress(docker.errors.APIError):
                c.remove(force=True)
            with contextlib.suppress(docker.errors.APIError):
                net.remove()
