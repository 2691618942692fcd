"""`skyhub eval run ENV --best-of N --branch-at T` (skyhub.eval.best_of): episodes forked at
turn T into N branches that share the prefix, a task scored by its best branch."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from skyhub.cli.main import app
from skyhub.eval import best_of
from skyhub.eval.agent import Agent


class Coin(Agent):
    """Looks a wrong key up first (the shared prefix); then, by coin flips, the right key
    (else a wrong answer) and the right answer (else a wrong one): one episode succeeds one
    time in four, the best of four about two times in three."""

    name = "coin"

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.first_actions: list[str] = []

    def act(self, messages: list[Any], reference: Any) -> str:
        if len(messages) <= 2:  # system + first observation: the first turn
            return "<lookup>k-none</lookup>"
        if "<answer>" in (reference() or "") and self.rng.random() < 0.5:
            return reference()
        if self.rng.random() < 0.5 and "<lookup>" in (reference() or ""):
            return reference()  # the right key
        return "<answer>wrong</answer>"


def test_best_of_n_beats_one_episode_and_branches_share_the_prefix(tmp_path: Path) -> None:
    summary = best_of.run("toy-lookup", Coin(), n=4, branch_at=1, tasks=24, seed=3,
                          env_kwargs={"max_turns": 6}, out=tmp_path)
    d = summary.to_dict()
    assert d["tasks"] == 24 and d["infra_errors"] == 0
    assert all(t.forked_at == 1 and len(t.rewards) == 4 for t in summary.tasks)
    # the best of four succeeds wherever one branch does, and more often than one episode
    assert d["best_success"] >= d["single_success"]
    assert d["best_success"] - d["single_success"] >= 0.2
    assert d["best_success"] == sum(any(o == "success" for o in t.outcomes)
                                    for t in summary.tasks) / 24
    records = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text()
               .splitlines()]
    assert len(records) == 24 * 4
    by_task: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        by_task.setdefault(r["task_index"], []).append(r)
    for branches in by_task.values():
        assert [b["meta"]["branch"] for b in branches] == [0, 1, 2, 3]
        assert len({b["task_id"] for b in branches}) == 1
        # every branch starts with the same turn: the prefix played once, then forked
        firsts = {json.dumps(b["messages"][:4]) for b in branches}
        assert len(firsts) == 1
    saved = json.loads((tmp_path / "best_of.json").read_text())
    assert saved["best_success"] == d["best_success"] and saved["best_of"] == 4


def test_an_episode_that_ends_before_the_fork_is_every_branch() -> None:
    summary = best_of.run("toy-arith", Coin(), n=3, branch_at=2, tasks=4)
    assert all(t.forked_at is None and len(set(t.outcomes)) == 1 for t in summary.tasks)
    assert summary.best_success == summary.single_success


def test_the_cli_prints_the_table_and_refuses_what_does_not_combine(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["eval", "run", "toy-lookup", "--agent", "oracle", "--n", "3",
                                 "--best-of", "2", "--branch-at", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "best of 2 from turn 1" in r.output and (out / "best_of.json").is_file()
    assert json.loads((out / "best_of.json").read_text())["best_success"] == 1.0
    r = CliRunner().invoke(app, ["eval", "run", "toy-lookup", "--agent", "oracle",
                                 "--best-of", "2", "--out", str(tmp_path / "x")])
    assert r.exit_code != 0 and "--branch-at" in r.output
    r = CliRunner().invoke(app, ["eval", "run", "toy-lookup", "--agent", "oracle",
                                 "--best-of", "2", "--branch-at", "1", "--attempts", "2",
                                 "--out", str(tmp_path / "y")])
    assert r.exit_code != 0 and "--attempts" in r.output
