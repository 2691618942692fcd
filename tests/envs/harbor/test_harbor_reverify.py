"""`skyhub harbor reverify RUN`: an eval run with `-k save_final_state=DIR` keeps each
episode's changed data roots; reverify runs the task's current tests/test.sh on them in a fresh
container and reports the verdicts that changed (real Docker, a bundled example task)."""

from __future__ import annotations

import io
import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from harbor_task_texts import SERVE, SERVED

pytestmark = [pytest.mark.docker, pytest.mark.slow]

EXAMPLE = Path(__file__).parents[3] / "envs" / "harbor" / "data" / "examples" / "fix-config"


def _eval(tasks: Path, agent: str, out: Path, states: Path, *kwargs: str) -> list[dict]:
    from skyhub.cli.main import app

    result = CliRunner().invoke(app, ["eval", "run", "harbor", f"data_dir={tasks}", *kwargs,
                                      "-k", f"save_final_state={states}", "--agent", agent,
                                      "--out", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def _reverify(run: Path, *extra: str) -> tuple[str, list[dict]]:
    from skyhub.cli.main import app

    result = CliRunner().invoke(app, ["harbor", "reverify", str(run), *extra])
    assert result.exit_code == 0, result.output
    return result.output, json.loads((run / "reverify.json").read_text())


@pytest.fixture(scope="module")
def runs(docker_daemon: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One eval run of the oracle and one of the nop agent on a copy of fix-config, each
    saving its episodes' final states."""
    root = tmp_path_factory.mktemp("reverify")
    tasks = root / "tasks"
    shutil.copytree(EXAMPLE, tasks / "fix-config")
    out = {"tasks": tasks, "states": root / "states"}
    for agent in ("oracle", "nop"):
        records = _eval(tasks, agent, root / agent, out["states"])
        assert [r["reward"] for r in records] == [1.0 if agent == "oracle" else 0.0]
        info = records[0]["final_info"]
        assert "final_state" in info, info.get("final_state_error", info)
        state = Path(info["final_state"])
        saved = json.loads((state / "state.json").read_text())
        assert saved["task_id"] == "fix-config" and saved["verdict"]["reward"] == \
            records[0]["reward"]
        if agent == "oracle":  # the oracle changed /app/app.conf: /app is saved
            assert "/app" in saved["roots"], saved
            with tarfile.open(state / saved["roots"]["/app"]) as tar:
                assert "app/app.conf" in tar.getnames()
        out[agent] = root / agent
    return out


def test_unchanged_tests_give_the_same_verdicts(docker_daemon: None,
                                                runs: dict[str, Path]) -> None:
    for agent, reward in (("oracle", 1.0), ("nop", 0.0)):
        text, rows = _reverify(runs[agent])
        assert [(r["old_reward"], r["new_reward"], r["changed"], r["status"]) for r in rows] \
            == [(reward, reward, False, "ok")], rows
        assert "fix-config" in text and "no" in text.splitlines()[1], text
        assert rows[0]["tests_changed"] is False


def test_edited_tests_change_the_oracles_verdict(docker_daemon: None, runs: dict[str, Path],
                                                 tmp_path: Path) -> None:
    edited = tmp_path / "tasks"
    shutil.copytree(runs["tasks"], edited)
    test_sh = edited / "fix-config" / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text().replace('"production" ] || fail',
                                                   '"staging" ] || fail'))
    text, rows = _reverify(runs["oracle"], "--tasks-dir", str(edited))
    assert [(r["old_reward"], r["new_reward"], r["changed"]) for r in rows] == \
        [(1.0, 0.0, True)], rows
    assert rows[0]["tests_changed"] is True
    line = text.splitlines()[1]
    assert line.split()[2:4] == ["1", "0"] and line.rstrip().endswith("yes"), text
    _, rows = _reverify(runs["nop"], "--tasks-dir", str(edited))
    assert [(r["old_reward"], r["new_reward"], r["changed"]) for r in rows] == \
        [(0.0, 0.0, False)], rows


def test_training_isolation_saves_and_reverifies_too(docker_daemon: None,
                                                     runs: dict[str, Path],
                                                     tmp_path: Path) -> None:
    """Under isolation="training" the state is saved the same way and reverify runs the
    verifier as that isolation does (no network); edited tests change the verdict."""
    records = _eval(runs["tasks"], "oracle", tmp_path / "run", tmp_path / "states",
                    "-k", "isolation=training")
    assert [r["reward"] for r in records] == [1.0], records
    saved = json.loads((Path(records[0]["final_info"]["final_state"]) / "state.json")
                       .read_text())
    assert saved["isolation"] == "training"
    _, rows = _reverify(tmp_path / "run")
    assert [(r["new_reward"], r["changed"]) for r in rows] == [(1.0, False)], rows
    edited = tmp_path / "tasks"
    shutil.copytree(runs["tasks"], edited)
    test_sh = edited / "fix-config" / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text().replace('"8080" ] || fail', '"9090" ] || fail'))
    _, rows = _reverify(tmp_path / "run", "--tasks-dir", str(edited))
    assert [(r["new_reward"], r["changed"]) for r in rows] == [(0.0, True)], rows


def test_a_missing_task_is_infra_not_reward_zero(docker_daemon: None, runs: dict[str, Path],
                                                 tmp_path: Path) -> None:
    from skyhub.cli.main import app

    result = CliRunner().invoke(app, ["harbor", "reverify", str(runs["oracle"]),
                                      "--tasks-dir", str(tmp_path / "nowhere")])
    assert result.exit_code == 1, result.output
    rows = json.loads((runs["oracle"] / "reverify.json").read_text())
    assert rows[0]["status"] == "infra" and rows[0]["new_reward"] is None, rows
    assert "--tasks-dir" in rows[0]["reason"], rows


def test_a_saved_link_pointing_outside_is_not_followed(docker_daemon: None,
                                                       runs: dict[str, Path],
                                                       tmp_path: Path) -> None:
    """A saved state edited to hold /app/link -> OUTSIDE and members through it (and a
    `..` member): reverify puts the link back as data and nothing lands where it points,
    in the container or on the host."""
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    shutil.copytree(runs["oracle"], run)
    record = json.loads((run / "episodes.jsonl").read_text().splitlines()[0])
    state = tmp_path / "state"
    shutil.copytree(record["final_info"]["final_state"], state)
    record["final_info"]["final_state"] = str(state)
    (run / "episodes.jsonl").write_text(json.dumps(record) + "\n")
    saved = json.loads((state / "state.json").read_text())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name: str, kind: bytes, target: str = "", data: bytes = b"") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size = kind, target, len(data)
            info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
        add("app", tarfile.DIRTYPE)
        add("app/link", tarfile.SYMTYPE, str(outside))
        add("app/link/pwned", tarfile.REGTYPE, data=b"x")
        add("app/../etc/pwned", tarfile.REGTYPE, data=b"x")
        add("app/up", tarfile.SYMTYPE, "/etc")
        add("app/up/pwned", tarfile.REGTYPE, data=b"x")
    (state / saved["roots"]["/app"]).write_bytes(buf.getvalue())
    tasks = tmp_path / "tasks"
    shutil.copytree(runs["tasks"], tasks)
    (tasks / "fix-config" / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        f"if [ -L /app/link ] && [ ! -e {outside}/pwned ] && [ ! -e /etc/pwned ]; "
        "then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
    _, rows = _reverify(run, "--tasks-dir", str(tasks))
    assert rows[0]["status"] == "ok" and rows[0]["new_reward"] == 1.0, rows
    assert list(outside.iterdir()) == []




def test_a_server_the_solution_left_is_not_saved(docker_daemon: None, tmp_path: Path) -> None:
    """Saving pauses the agent's container and resumes it: a solution-started server still
    serves the tests (reward 1). Only files are saved, so reverify, with the tests
    unchanged, finds no server: the verdict changes 1 -> 0 and `tests_changed` is false
    (the documented limit of a saved state)."""
    d = tmp_path / "tasks" / "serve-hello"
    for sub in ("tests", "environment", "solution"):
        (d / sub).mkdir(parents=True)
    (d / "task.toml").write_text(
        'schema_version = "1.1"\n[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 60.0\n')
    (d / "instruction.md").write_text("Serve /app on port 8080.\n")
    (d / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nWORKDIR /app\nRUN echo hello > /app/hello.txt\n")
    (d / "tests" / "test.sh").write_text(SERVED)
    (d / "solution" / "solve.sh").write_text(SERVE)
    records = _eval(tmp_path / "tasks", "oracle", tmp_path / "run", tmp_path / "states")
    assert [r["reward"] for r in records] == [1.0], records[0]["final_info"]
    _, rows = _reverify(tmp_path / "run")
    assert [(r["old_reward"], r["new_reward"], r["changed"], r["tests_changed"])
            for r in rows] == [(1.0, 0.0, True, False)], rows


def test_a_run_without_saved_states_is_a_usage_error(tmp_path: Path) -> None:
    from skyhub.envs.harbor.reverify import reverify
    from skyhub.errors import UsageError

    with pytest.raises(UsageError, match="--out folder"):
        reverify(tmp_path)
    (tmp_path / "episodes.jsonl").write_text(json.dumps({"task_id": "t", "final_info": {}})
                                             + "\n{cut")
    with pytest.raises(UsageError, match="save_final_state=DIR"):
        reverify(tmp_path)
