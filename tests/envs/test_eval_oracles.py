"""`skyhub eval ENV --agent oracle` on each family's bundled data: the reference solutions
score >= 0.99 through the whole harness (env, vector env, recording, report), and the
report's numbers are the JSONL's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyhub.cli.main import app
from skyhub.eval.metrics import ci95
from skyhub.eval.rundir import load_records


def eval_oracle(tmp_path: Path, env_id: str, *args: str) -> tuple[dict, list[dict], str]:
    out = tmp_path / env_id
    r = CliRunner().invoke(app, ["eval", env_id, *args, "--agent", "oracle",
                                 "--concurrency", "4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    return summary, load_records(out), (out / "report.md").read_text()


def check_report_matches_records(records: list[dict], md: str) -> None:
    scored = [r for r in records if not r["infra_error"]]
    acc = sum(r["outcome"] == "success" for r in scored) / len(scored)
    lo, hi = ci95([float(r["outcome"] == "success") for r in scored])
    headline = re.search(r"\*\*accuracy ([\d.]+) \[([\d.]+), ([\d.]+)\], n=(\d+) scored, "
                         r"infra errors (\d+)\*\*", md)
    assert headline, md[:400]
    assert headline.groups() == (f"{acc:.3f}", f"{lo:.3f}", f"{hi:.3f}", str(len(scored)),
                                 str(len(records) - len(scored)))


def test_sql_spider_oracle_on_the_dev_subset(tmp_path: Path) -> None:
    summary, records, md = eval_oracle(tmp_path, "sql-spider", "split=dev", "reward=skyrl",
                                       "--max-turns", "5")
    assert summary["n"] == len(records) == 972 and summary["accuracy"] >= 0.99
    check_report_matches_records(records, md)
    # the per-difficulty table counts what the records say
    table = md.split("## By difficulty", 1)[1].split("\n## ", 1)[0]
    counts = {row[0].strip(): int(row[1]) for row in
              (line.strip("|").split(" | ") for line in table.splitlines()
               if line.startswith("| ") and not line.startswith("| value"))}
    expected: dict[str, int] = {}
    for r in records:
        expected[r["meta"]["difficulty"]] = expected.get(r["meta"]["difficulty"], 0) + 1
    assert counts == expected and set(counts) == {"easy", "medium", "hard", "extra"}


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["python-code", "python-math"])
def test_python_oracles(tmp_path: Path, env_id: str, bwrap: str) -> None:
    summary, records, md = eval_oracle(tmp_path, env_id)
    assert summary["n"] == len(records) >= 10 and summary["accuracy"] >= 0.99
    assert summary["infra_errors"] == 0
    check_report_matches_records(records, md)


@pytest.mark.docker
@pytest.mark.slow
def test_harbor_examples_oracle(tmp_path: Path, docker_daemon: None) -> None:
    summary, records, md = eval_oracle(tmp_path, "harbor-examples")
    assert summary["n"] == len(records) >= 3 and summary["accuracy"] >= 0.99
    assert summary["infra_errors"] == 0
    check_report_matches_records(records, md)


# ---------------------------------------------------------------- the oracle through tool calls
def check_tool_oracle(tmp_path: Path, env_id: str, *args: str) -> None:
    """`--agent oracle --tools` (the env's reference_tool_calls) scores as the tag oracle,
    task by task, on the same tasks, every action a tool turn."""
    tags, tag_records, _ = eval_oracle(tmp_path / "tags", env_id, *args)
    tools, tool_records, md = eval_oracle(tmp_path / "tools", env_id, *args, "--tools")
    assert (tags["protocol"], tools["protocol"]) == ("text", "tools")
    assert tools["infra_errors"] == 0 and tools["accuracy"] == tags["accuracy"] >= 0.99
    assert ({r["task_id"]: r["outcome"] for r in tool_records}
            == {r["task_id"]: r["outcome"] for r in tag_records})
    for r in tool_records:
        turns = [m for m in r["messages"] if m["role"] == "assistant"]
        assert turns and all(m.get("tool_calls") for m in turns), r["task_id"]
    check_report_matches_records(tool_records, md)


@pytest.mark.parametrize(("env_id", "args"), [
    ("sql-spider", ("split=dev", "reward=skyrl", "--max-turns", "5")),
    ("search-qa", ()),
])
def test_tool_oracle_scores_as_the_tag_oracle(tmp_path: Path, env_id: str,
                                              args: tuple[str, ...]) -> None:
    check_tool_oracle(tmp_path, env_id, *args)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["python-code", "python-math"])
def test_python_tool_oracles(tmp_path: Path, env_id: str, bwrap: str) -> None:
    check_tool_oracle(tmp_path, env_id)


@pytest.mark.docker
@pytest.mark.slow
def test_terminal_synth_tool_oracle(tmp_path: Path, docker_daemon: None) -> None:
    check_tool_oracle(tmp_path, "terminal-synth", "--n", "24")


@pytest.mark.docker
@pytest.mark.slow
def test_harbor_examples_tool_oracle(tmp_path: Path, docker_daemon: None) -> None:
    check_tool_oracle(tmp_path, "harbor-examples")
