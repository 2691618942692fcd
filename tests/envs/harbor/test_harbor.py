"""Harbor tasks: the loader (no Docker) and whole episodes in real containers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import skyhub
from skyhub.envs.harbor.env import EXAMPLES
from skyhub.envs.harbor.image import image_tag
from skyhub.envs.harbor.task import load_task, load_tasks
from skyhub.errors import DataNotFound, UsageError

TOML = """version = "1.0"
[metadata]
difficulty = "easy"
[verifier]
timeout_sec = 30.0
env = {{ MODE = "strict" }}
[agent]
timeout_sec = 120.0
[environment]
build_timeout_sec = 200.0
cpus = 2
memory_mb = 512
{extra}
"""


def make_task(root: Path, name: str = "t1", *, test_sh: str = "echo 1 > "
              "/logs/verifier/reward.txt\n", extra: str = "", dockerfile: bool = True) -> Path:
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "task.toml").write_text(TOML.format(extra=extra))
    (d / "instruction.md").write_text("Do the thing.\n")
    (d / "tests" / "test.sh").write_text(test_sh)
    if dockerfile:
        (d / "environment").mkdir()
        (d / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    return d


def test_task_toml_is_read(tmp_path: Path) -> None:
    t = load_task(make_task(tmp_path, extra='network_mode = "public"'))
    cfg = t.meta["config"]
    assert (t.id, t.prompt, t.answer) == ("t1", "Do the thing.", None)
    assert (cfg["agent_timeout_s"], cfg["verifier_timeout_s"], cfg["build_timeout_s"]) == (
        120.0, 30.0, 200.0)
    assert (cfg["cpus"], cfg["memory_mb"], cfg["network"]) == (2.0, 512, True)
    assert cfg["environment"]["network_mode"] == "public"
    assert cfg["verifier_env"] == {"MODE": "strict"} and t.meta["metadata"]["difficulty"] == "easy"
    assert t.meta["timeout_s"] == 120.0


def test_datasets_and_bad_tasks(tmp_path: Path) -> None:
    make_task(tmp_path, "a")
    make_task(tmp_path, "b")
    (tmp_path / "notes").mkdir()
    (tmp_path / "dataset.toml").write_text('[dataset]\nname = "mini"\n')
    ts = load_tasks(tmp_path)
    assert [t.id for t in ts] == ["a", "b"] and ts.name == "mini"
    with pytest.raises(DataNotFound, match="no Harbor task"):
        load_tasks(tmp_path / "notes")
    with pytest.raises(DataNotFound):
        load_tasks(tmp_path / "missing")
    broken = make_task(tmp_path / "x", dockerfile=False)
    with pytest.raises(ValueError, match="neither environment/Dockerfile nor"):
        load_task(broken)
    (broken / "task.toml").write_text("not = [toml")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_task(broken)


def test_bundled_examples_load_and_image_tags_follow_content(tmp_path: Path) -> None:
    ts = load_tasks(EXAMPLES)
    assert len(ts) >= 3 and all(t.answer for t in ts)
    d = make_task(tmp_path)
    before = image_tag(d)
    assert image_tag(d) == before
    (d / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /srv\n")
    assert image_tag(d) != before


def test_harbor_without_a_path_says_how_to_fix() -> None:
    with pytest.raises(UsageError, match="harbor-examples"):
        skyhub.make("harbor")


# ------------------------------------------------------------------------------ in Docker
@pytest.fixture(scope="module")
def docker_ok(docker_daemon: None) -> None:
    """Harbor runs on Docker only."""


@pytest.fixture(scope="module")
def examples(docker_ok: None) -> Iterator[skyhub.TextEnv]:
    env = skyhub.make("harbor-examples")
    yield env
    env.close()


@pytest.mark.docker
@pytest.mark.slow
def test_every_bundled_task_oracle_one_nop_zero(examples: skyhub.TextEnv) -> None:
    for task in examples.tasks:
        examples.reset(options={"task_id": task.id})
        assert examples.step("<bash>ls /solution /tests 2>&1</bash>")[0].count(
            "No such file") == 2  # neither the solution nor the tests are there to peek at
        examples.reset(options={"task_id": task.id})
        examples.step(examples.reference_action())
        _, reward, terminated, _, info = examples.step(examples.reference_action())
        assert (reward, terminated, info["outcome"], info["infra_error"]) == (
            1.0, True, "success", False), (task.id, info)
        examples.reset(options={"task_id": task.id})
        _, reward, _, _, info = examples.step("<done/>")
        assert (reward, info["outcome"], info["infra_error"]) == (0.0, "failure", False), task.id


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("test_sh", [
    "exit 0\n",                                             # writes no reward at all
    "echo 'not a number' > /logs/verifier/reward.txt\n",   # unreadable reward
    "echo '{\"score\": \"high\"}' > /logs/verifier/reward.json\n", # a name, no number
    "this-command-does-not-exist\n",
])
def test_a_test_script_that_leaves_no_usable_reward_is_a_flagged_failure(
        docker_ok: None, tmp_path: Path, test_sh: str) -> None:
    """The agent can make any test script fail to write its reward (delete what it needs,
    fill the disk), so no usable reward is scored 0, flagged, never a masked infra error
    (hub/env.py's infra-error rule: what the agent can cause is never an infra error)."""
    with skyhub.make("harbor", data_dir=str(make_task(tmp_path, test_sh=test_sh))) as env:
        env.reset()
        _, reward, terminated, _, info = env.step("<done/>")
    assert (reward, terminated, info["outcome"], info["infra_error"]) == (
        0.0, True, "failure", False)
    assert info["sandbox_broken"] is True and "reward" in info["error"]


@pytest.mark.docker
@pytest.mark.slow
def test_reward_json_breakdown_and_agent_state(docker_ok: None, tmp_path: Path) -> None:
    test_sh = ('n=$(cat /app/n 2>/dev/null || echo 0)\n'
               'echo "{\\"reward\\": $n, \\"seen\\": 7}" > /logs/verifier/reward.json\n')
    with skyhub.make("harbor", data_dir=str(make_task(tmp_path, test_sh=test_sh))) as env:
        obs, _ = env.reset()
        assert obs == "Do the thing."
        obs, *_ = env.step("<bash>cd /app && echo 1 > n && pwd</bash>")
        assert "/app" in obs
        _, reward, _, _, info = env.step("<done/>")
    assert reward == 1.0 and info["reward_breakdown"]["seen"] == 7.0
