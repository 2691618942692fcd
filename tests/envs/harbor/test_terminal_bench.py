"""The original Terminal-Bench format (task.yaml, docker-compose.yaml, solution.sh,
run-tests.sh, tests/) converted as Harbor's converter converts it, read directly by
`skyhub.make("harbor", data_dir=...)`, and `skyhub harbor convert`. No Docker."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import skyhub
from skyhub.envs.harbor.cli import harbor_app
from skyhub.envs.harbor.task import load_task, load_tasks
from skyhub.envs.harbor.terminal_bench import convert_dataset, convert_task
from skyhub.errors import UsageError

TASK_YAML = """\
instruction: |-
  Write the greeting to /app/hello.txt.
author_name: Ada
author_email: ada@example.com
difficulty: easy
category: file-operations
tags: [bash, files]
parser_name: pytest
max_agent_timeout_sec: 120
max_test_timeout_sec: 30
"""
COMPOSE = """\
services:
  client:
    build:
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
      - GREETING=hello
    volumes:
      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}
      - ${T_BENCH_TASK_AGENT_LOGS_PATH}:${T_BENCH_CONTAINER_AGENT_LOGS_PATH}
"""


def tb_task(root: Path, name: str = "tb-hello", *, compose: str | None = COMPOSE,
            task_yaml: str = TASK_YAML, dockerfile: str = "FROM debian:bookworm-slim\n"
            "WORKDIR /app\nCOPY data.txt /app/data.txt\n", files: dict[str, str] | None = None,
            solution: str | None = '#!/bin/bash\necho "$GREETING" > /app/hello.txt\n') -> Path:
    """A small Terminal-Bench task as its authors wrote them."""
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "task.yaml").write_text(task_yaml)
    if compose is not None:
        (d / "docker-compose.yaml").write_text(compose)
    (d / "Dockerfile").write_text(dockerfile)
    (d / "data.txt").write_text("data\n")
    if solution is not None:
        (d / "solution.sh").write_text(solution)
    (d / "run-tests.sh").write_text("#!/bin/bash\nbash $TEST_DIR/check.sh\n")
    (d / "tests" / "check.sh").write_text("grep -qx hello /app/hello.txt\n")
    for rel, text in (files or {}).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


def files_of(d: Path) -> list[str]:
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())


@pytest.fixture(autouse=True)
def cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Conversions made by load_tasks go under tmp_path, not the user's cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_task_converts_as_harbor_converts_it(tmp_path: Path) -> None:
    out, notes = convert_task(tb_task(tmp_path), tmp_path / "out" / "tb-hello")
    assert files_of(out) == ["environment/Dockerfile", "environment/data.txt",
                             "instruction.md", "solution/solve.sh", "task.toml",
                             "tests/check.sh", "tests/test.sh"]
    # one service with Terminal-Bench's defaults folds into the Dockerfile
    dockerfile = (out / "environment" / "Dockerfile").read_text()
    assert dockerfile.startswith("FROM debian:bookworm-slim\nWORKDIR /app\n")
    assert dockerfile.rstrip().endswith("ENV TEST_DIR=/tests\nENV GREETING=hello")
    assert any("GREETING=hello" in n for n in notes)
    test_sh = (out / "tests" / "test.sh").read_text()
    assert "bash /tests/check.sh" in test_sh and "$TEST_DIR" not in test_sh
    assert "/logs/verifier/reward.txt" in test_sh
    assert os.access(out / "tests" / "test.sh", os.X_OK)
    assert os.access(out / "solution" / "solve.sh", os.X_OK)
    assert (out / "instruction.md").read_text() == "Write the greeting to /app/hello.txt.\n"
    doc = tomllib.loads((out / "task.toml").read_text())
    assert doc["metadata"] == {"author_name": "Ada", "author_email": "ada@example.com",
                               "difficulty": "easy", "category": "file-operations",
                               "tags": ["bash", "files"]}
    t = load_task(out)
    cfg = t.meta["config"]
    assert (t.id, t.prompt, cfg["agent_timeout_s"], cfg["verifier_timeout_s"]) == (
        "tb-hello", "Write the greeting to /app/hello.txt.", 120.0, 30.0)
    assert cfg["schema_version"] == "1.4" and cfg["environment"]["network_mode"] == "public"


def test_harbors_defaults_for_a_bare_task_yaml(tmp_path: Path) -> None:
    out, _ = convert_task(tb_task(tmp_path, task_yaml="instruction: hi\n"), tmp_path / "o")
    cfg = load_task(out).meta["config"]
    assert (cfg["agent_timeout_s"], cfg["verifier_timeout_s"]) == (360.0, 60.0)
    assert load_task(out).meta["metadata"]["category"] == "software_engineering"


@pytest.mark.parametrize("last, reward", [("true", "1"), ("false", "0")])
def test_the_exit_status_of_run_tests_is_the_reward(tmp_path: Path, last: str, reward: str
                                                    ) -> None:
    src = tb_task(tmp_path)
    (src / "run-tests.sh").write_text(f"#!/bin/bash\necho testing $TEST_DIR\n{last}")
    out, _ = convert_task(src, tmp_path / "o")
    logs = tmp_path / "logs"
    logs.mkdir()
    script = (out / "tests" / "test.sh").read_text().replace("/logs/verifier", str(logs))
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert run.stdout == "testing /tests\n"
    assert run.returncode == (0 if reward == "1" else 1)
    assert (logs / "reward.txt").read_text().strip() == reward


def test_a_compose_file_with_a_sidecar_becomes_harbors(tmp_path: Path) -> None:
    compose = COMPOSE + """\
    depends_on: [db]
  db:
    build:
      context: ./db
    container_name: ${T_BENCH_TASK_DOCKER_NAME_PREFIX}__db
networks:
  default: {}
"""
    src = tb_task(tmp_path, compose=compose, files={"db/Dockerfile": "FROM postgres:16\n"})
    out, notes = convert_task(src, tmp_path / "o")
    doc = yaml.safe_load((out / "environment" / "docker-compose.yaml").read_text())
    main = doc["services"]["main"]
    assert main["build"] == {"context": "${CONTEXT_DIR}"} and main["image"] == \
        "${MAIN_IMAGE_NAME}"
    assert main["command"] == ["sh", "-c", "sleep infinity"]
    assert main["environment"] == ["TEST_DIR=${TEST_DIR}"]
    assert main["deploy"]["resources"]["limits"] == {"cpus": "${CPUS}", "memory": "${MEMORY}"}
    assert main["depends_on"] == ["db"] and "volumes" not in main
    assert doc["services"]["db"]["container_name"] == "hb__db"
    assert doc["networks"] == {"default": {}}
    assert (out / "environment" / "db" / "Dockerfile").is_file()
    assert (out / "environment" / "Dockerfile").is_file()
    assert any("docker-compose.yaml" in n for n in notes)
    assert load_task(out).meta["config"]["environment"]["build_dir"] == str(
        out / "environment")


def test_a_build_context_folder_is_the_environment(tmp_path: Path) -> None:
    compose = "services:\n  client:\n    build:\n      context: ./app\n" \
              "      dockerfile: Dockerfile.tb\n    working_dir: /srv\n    expose: 8080\n" \
              "    entrypoint: /start.sh\n    platform: linux/amd64\n"
    src = tb_task(tmp_path, compose=compose, files={
        "app/Dockerfile.tb": "FROM debian:bookworm-slim\n", "app/src/main.py": "print(1)\n"})
    out, _ = convert_task(src, tmp_path / "o")
    env = out / "environment"
    assert (env / "src" / "main.py").is_file() and (env / "Dockerfile.tb").is_file()
    assert (env / "data.txt").is_file()  # the rest of the root, as in Harbor
    dockerfile = (env / "Dockerfile").read_text()
    assert dockerfile.startswith("FROM --platform=linux/amd64 debian:bookworm-slim\n")
    for line in ("ENV TEST_DIR=/tests", "WORKDIR /srv", "EXPOSE 8080",
                 'ENTRYPOINT ["/start.sh"]'):
        assert line in dockerfile.splitlines()
    assert not (env / "docker-compose.yaml").exists()


def test_tests_go_into_the_image_only_when_the_dockerfile_copies_them(tmp_path: Path) -> None:
    src = tb_task(tmp_path, dockerfile="FROM debian:bookworm-slim\nCOPY tests /opt/tests\n"
                  "COPY solution.sh /opt/\n")
    out, _ = convert_task(src, tmp_path / "o")
    assert (out / "environment" / "tests" / "check.sh").is_file()
    assert (out / "environment" / "solution.sh").is_file()
    plain, _ = convert_task(tb_task(tmp_path / "b"), tmp_path / "p")
    assert not (plain / "environment" / "tests").exists()


def test_solution_yaml_of_whole_commands_becomes_solve_sh(tmp_path: Path) -> None:
    src = tb_task(tmp_path, solution=None, files={"solution.yaml": (
        "- command: cd /app\n  append_enter: true\n"
        "- command: echo hello > hello.txt\n  min_timeout_sec: 0.1\n  block: true\n"
        "  append_enter: true\n")})
    out, _ = convert_task(src, tmp_path / "o")
    solve = (out / "solution" / "solve.sh").read_text()
    assert solve.startswith("#!/bin/bash\n")
    assert solve.endswith("cd /app\necho hello > hello.txt\n")
    assert load_task(out).answer == solve


def test_keystrokes_in_solution_yaml_are_refused(tmp_path: Path) -> None:
    src = tb_task(tmp_path, solution=None, files={"solution.yaml": (
        "- command: vim notes.txt\n  append_enter: true\n- command: ihello\n")})
    with pytest.raises(UsageError, match=r"entry 2.*without Enter.*solution\.sh"):
        convert_task(src, tmp_path / "o")
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_older_descriptions_and_refusals(tmp_path: Path) -> None:
    old = tb_task(tmp_path, "old", task_yaml="descriptions:\n  - key: base\n"
                  "    description: Old style.\n")
    out, _ = convert_task(old, tmp_path / "o" / "old")
    assert load_task(out).prompt == "Old style."
    with pytest.raises(UsageError, match="already exists"):
        convert_task(old, out)
    (old / "run-tests.sh").unlink()
    with pytest.raises(UsageError, match=r"run-tests\.sh is missing"):
        convert_task(old, tmp_path / "o" / "x")
    with pytest.raises(UsageError, match="instruction is missing"):
        convert_task(tb_task(tmp_path, "bad", task_yaml="author_name: x\n"), tmp_path / "y")
    with pytest.raises(UsageError, match=r"neither docker-compose\.yaml nor Dockerfile"):
        d = tb_task(tmp_path, "noenv", compose=None)
        (d / "Dockerfile").unlink()
        convert_task(d, tmp_path / "z")


def test_a_dataset_converts_task_by_task(tmp_path: Path) -> None:
    tb_task(tmp_path / "ds", "a")
    tb_task(tmp_path / "ds", "b", task_yaml="difficulty: easy\n")
    (tmp_path / "ds" / "README.md").write_text("not a task\n")
    done, failed = convert_dataset(tmp_path / "ds", tmp_path / "out")
    assert [p.name for p in done] == ["a"]
    assert failed and failed[0][0] == "b" and "instruction is missing" in failed[0][1]


def test_load_tasks_reads_terminal_bench_through_a_content_cache(tmp_path: Path,
                                                                 cache_in_tmp: Path) -> None:
    tb_task(tmp_path / "ds", "a")
    tb_task(tmp_path / "ds", "b")
    ts = load_tasks(tmp_path / "ds")
    assert [t.id for t in ts] == ["a", "b"]
    a = ts[0]
    assert (a.meta["source"], a.meta["config"]["source_format"]) == ("terminal-bench",
                                                                     "terminal-bench")
    assert a.meta["converted_from"] == str(tmp_path / "ds" / "a")
    assert Path(a.meta["path"]).is_relative_to(cache_in_tmp)
    entries = sorted(p.name for p in (cache_in_tmp / "skyhub" / "harbor-tb").iterdir())
    assert len(entries) == 2  # one per task (same files, other names), no leftovers
    again = load_tasks(tmp_path / "ds")
    assert [t.meta["path"] for t in again] == [t.meta["path"] for t in ts]
    assert sorted(p.name for p in (cache_in_tmp / "skyhub" / "harbor-tb").iterdir()) == entries
    (tmp_path / "ds" / "a" / "data.txt").write_text("changed\n")
    changed = load_task(tmp_path / "ds" / "a")
    assert changed.meta["path"] != a.meta["path"]
    assert (Path(changed.meta["path"]) / "environment" / "data.txt").read_text() == "changed\n"


def test_make_harbor_takes_a_terminal_bench_task(tmp_path: Path) -> None:
    env = skyhub.make("harbor", data_dir=str(tb_task(tmp_path)))
    try:
        (t,) = env.tasks
        assert (t.id, t.meta["source"]) == ("tb-hello", "terminal-bench")
        assert t.answer.startswith("#!/bin/bash")
    finally:
        env.close()


def test_cli_converts_a_task_and_a_dataset(tmp_path: Path) -> None:
    runner = CliRunner()
    help_text = runner.invoke(harbor_app, ["convert", "--help"]).output
    assert "Terminal-Bench" in help_text and "Harbor" in help_text
    one = runner.invoke(harbor_app, ["convert", str(tb_task(tmp_path)), str(tmp_path / "o")])
    assert one.exit_code == 0, one.output
    assert f"converted tb-hello -> {tmp_path / 'o' / 'tb-hello'}" in one.output
    assert (tmp_path / "o" / "tb-hello" / "task.toml").is_file()
    tb_task(tmp_path / "ds", "good")
    tb_task(tmp_path / "ds", "bad", task_yaml="tags: []\n")
    many = runner.invoke(harbor_app, ["convert", str(tmp_path / "ds"), str(tmp_path / "d")])
    assert many.exit_code == 1
    assert "converted good" in many.output and "failed bad" in many.output
    assert "1 converted, 1 failed" in many.output
