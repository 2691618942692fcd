"""Eval reports: every number recomputed from episodes.jsonl, infra errors apart, plots valid."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from skyhub.eval.breakdown import error_taxonomy, slice_table
from skyhub.eval.metrics import ci95
from skyhub.eval.report import write_report, write_suite_report
from skyhub.eval.suites import Suite, SuiteRun

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def rec(index: int, outcome: str = "success", *, reward: float | None = None,
        infra: bool = False, meta: dict[str, Any] | None = None, turns: int = 2,
        task_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """A record as `skyhub eval` writes it (the run-directory contract)."""
    if infra:
        outcome = "error"
    r = {"index": index, "seed": index, "task_id": task_id or f"t{index}", "env_id": "toy-x",
         "agent": "scripted", "outcome": outcome, "infra_error": infra,
         "reward": (1.0 if outcome == "success" else 0.0) if reward is None else reward,
         "error": None, "error_source": None, "turns": turns, "terminated": not infra,
         "truncated": False, "reward_breakdown": {}, "meta": meta or {}, "final_info": {},
         "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                      {"role": "assistant", "content": f"answer {index}"}],
         "rewards": [], "tokens": {"prompt": 100, "completion": 10}, "latency_s": 1.5,
         "agent_s": 1.0}
    r.update(extra)
    return r


def write_run(run_dir: Path, records: list[dict[str, Any]], run: dict[str, Any] | None = None,
              ) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if run is not None:
        (run_dir / "run.json").write_text(json.dumps(run))
    return run_dir


def headline_table(md: str) -> dict[str, str]:
    """The headline table of report.md: metric -> value."""
    section = md.split("## Headline", 1)[1].split("\n## ", 1)[0]
    return {m[1].strip(): m[2].strip()
            for m in re.finditer(r"^\| ([^|]+) \| ([^|]+) \|$", section, re.M)}


def section_rows(md: str, title: str) -> list[list[str]]:
    section = md.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")][2:]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]


def mixed_records() -> list[dict[str, Any]]:
    """40 episodes over difficulties and two datasets, with 3 infra errors and rewards that
    are not 0/1, so that accuracy, mean reward and their intervals all differ."""
    diffs = ["hard", "easy", "medium", "extra"]
    out = []
    for i in range(40):
        ok = i % 3 != 0
        out.append(rec(i, "success" if ok else "failure", reward=0.9 if ok else 0.1 * (i % 2),
                       turns=1 + i % 4,
                       meta={"difficulty": diffs[i % 4], "dataset": "a" if i < 25 else "b",
                             "split": "dev", "db_id": f"db{i}"}))
    for i in (5, 17, 30):
        out[i] = rec(i, infra=True, turns=0, error="HTTP 503", error_source="agent",
                     meta=out[i]["meta"])
    return out


def test_headline_numbers_are_recomputed_from_the_records(tmp_path: Path) -> None:
    records = mixed_records()
    run = write_run(tmp_path / "run", records, run={"env_id": "toy-x", "n": 40, "seed": 0})
    # a summary.json that lies: the report must not copy it
    (run / "summary.json").write_text(json.dumps({"accuracy": 0.123, "mean_reward": 9.0,
                                                  "ci95": [0, 1], "infra_errors": 99}))
    paths = write_report(run)
    md = paths["markdown"].read_text()
    table = headline_table(md)

    scored = [r for r in records if not r["infra_error"]]
    wins = [1.0 if r["outcome"] == "success" else 0.0 for r in scored]
    acc = sum(wins) / len(wins)
    lo, hi = ci95(wins)
    mean_reward = sum(r["reward"] for r in scored) / len(scored)
    assert table["episodes"] == "40"
    assert table["scored (non-infra)"] == str(len(scored)) == "37"
    assert table["accuracy"] == f"{acc:.3f}"
    assert table["95% CI"] == f"[{lo:.3f}, {hi:.3f}]"
    assert table["mean reward"] == f"{mean_reward:.3f}"
    assert table["infra errors"] == "3"
    assert table["mean turns"] == f"{sum(r['turns'] for r in records) / 40:.2f}"
    assert table["tokens prompt"] == str(100 * 40)
    assert table["tokens completion"] == str(10 * 40)
    assert f"**accuracy {acc:.3f} [{lo:.3f}, {hi:.3f}], n=37 scored, infra errors 3**" in md
    assert "0.123" not in md and "99" not in table.values()


def test_infra_errors_are_excluded_from_accuracy_and_counted(tmp_path: Path) -> None:
    records = [rec(i) for i in range(4)] + [rec(4, "failure")]
    records += [rec(i, infra=True, error="sandbox died", error_source="env")
                for i in range(5, 10)]
    md = write_report(write_run(tmp_path / "run", records))["markdown"].read_text()
    table = headline_table(md)
    assert table["accuracy"] == "0.800"  # 4 of the 5 scored, not 4 of 10
    assert table["mean reward"] == "0.800"
    assert table["infra errors"] == "5"
    assert ["infra: env: sandbox died", "5", "50.0%"] in section_rows(md, "Error taxonomy")


def test_slices_are_per_value_sorted_and_only_where_informative(tmp_path: Path) -> None:
    records = mixed_records()
    rows = slice_table(records, "difficulty")
    assert [r["value"] for r in rows] == ["easy", "medium", "hard", "extra"]
    for row in rows:
        group = [r for r in records if r["meta"]["difficulty"] == row["value"]]
        scored = [r for r in group if not r["infra_error"]]
        wins = [1.0 if r["outcome"] == "success" else 0.0 for r in scored]
        assert row["n"] == len(group)
        assert row["infra_errors"] == len(group) - len(scored)
        assert row["accuracy"] == pytest.approx(sum(wins) / len(wins))
        assert row["ci95"] == pytest.approx(ci95(wins))
        assert row["mean_reward"] == pytest.approx(sum(r["reward"] for r in scored) / len(scored))
    by_dataset = slice_table(records, "dataset")
    assert [(r["value"], r["n"]) for r in by_dataset] == [("a", 25), ("b", 15)]  # n desc

    md = write_report(write_run(tmp_path / "run", records))["markdown"].read_text()
    assert "## By difficulty" in md and "## By dataset" in md
    assert "## By split" not in md  # one value: nothing to compare
    assert "## By db_id" in md  # 40 values: still a slice (<= 50)
    easy = section_rows(md, "By difficulty")[0]
    assert easy[0] == "easy" and easy[1] == str(rows[0]["n"])
    assert easy[2] == f"{rows[0]['accuracy']:.3f}"

    many = [rec(i, meta={"db_id": f"db{i}"}) for i in range(60)]
    md = write_report(write_run(tmp_path / "many", many))["markdown"].read_text()
    assert "## By db_id" not in md  # 60 distinct values is a task id, not a slice


def test_error_taxonomy_categories() -> None:
    records = [
        rec(0), rec(1),
        rec(2, infra=True, error="HTTP 503", error_source="agent"),
        rec(3, infra=True, error="HTTP 503", error_source="agent"),
        rec(4, infra=True, error="container 123456789 exited\ntraceback...", error_source="env"),
        rec(5, "failure", final_info={"format_violations": ["no <sql> tag"]}),
        rec(6, "failure", final_info={"solution_error": "no such column: x"}),
        rec(7, "failure", truncated=True),
        rec(8, "failure"),
        rec(9, "failure", final_info={"format_violations": 0, "solution_error": None}),
        rec(10, "running"),
    ]
    taxonomy = error_taxonomy(records)
    assert dict(taxonomy) == {"correct": 2, "infra: agent: HTTP 503": 2,
                              "infra: env: container N exited": 1, "format violation": 1,
                              "solution error": 1, "out of turns": 1, "wrong answer": 2,
                              "running": 1}
    assert [n for _, n in taxonomy] == sorted((n for _, n in taxonomy), reverse=True)
    # a generic env: no final_info keys, no errors
    assert error_taxonomy([rec(0), rec(1, "failure", final_info=None)]) == [
        ("correct", 1), ("wrong answer", 1)]


def test_resumed_run_last_line_for_an_index_wins(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = [rec(0), rec(1, infra=True, error="HTTP 503", error_source="agent"), rec(2, "failure")]
    write_run(run, first)
    with (run / "episodes.jsonl").open("a") as f:
        f.write(json.dumps(rec(1)) + "\n")  # the resumed run re-played episode 1
        f.write('{"index": 3, "outco')  # a torn last line
    md = write_report(run)["markdown"].read_text()
    table = headline_table(md)
    assert table["episodes"] == "3"
    assert table["infra errors"] == "0"
    assert table["accuracy"] == f"{2 / 3:.3f}"


def test_plots_are_valid_pngs_and_html_holds_the_tables(tmp_path: Path) -> None:
    paths = write_report(write_run(tmp_path / "run", mixed_records()), title="My run")
    names = sorted(p.name for p in paths["plots"])
    assert names == ["reward.png", "slices.png", "turns.png"]
    for p in paths["plots"]:
        assert p.parent == tmp_path / "run" / "plots"
        data = p.read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 1000
    page = paths["html"].read_text()
    assert page.startswith("<!DOCTYPE html>") and "<title>My run</title>" in page
    assert page.count("<table>") >= 5  # headline, difficulty, dataset, db_id, turns, taxonomy
    assert "<h2>By difficulty</h2>" in page and "<td>easy</td>" in page
    assert 'src="plots/slices.png"' in page and "(plots/turns.png)" in \
        paths["markdown"].read_text()
    assert "http://" not in page and "https://" not in page  # self-contained


def test_plain_env_gets_plots_without_slices(tmp_path: Path) -> None:
    records = [rec(i, "success" if i % 2 else "failure", meta=None) for i in range(6)]
    paths = write_report(write_run(tmp_path / "run", records))
    assert sorted(p.name for p in paths["plots"]) == ["reward.png", "turns.png"]
    assert "## By " not in paths["markdown"].read_text()


def test_report_without_matplotlib_still_written(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    paths = write_report(write_run(tmp_path / "run", mixed_records()))
    assert paths["plots"] == []
    assert not (tmp_path / "run" / "plots").exists()
    assert "pip install 'skyhub[eval]'" in paths["markdown"].read_text()
    assert "## Headline" in paths["markdown"].read_text()


def test_example_failures_truncated_and_at_most_five(tmp_path: Path) -> None:
    long = "x" * 1000
    records = [rec(i, "failure", messages=[{"role": "assistant", "content": long},
                                           {"role": "user", "content": "wrong"}])
               for i in range(8)]
    records.append(rec(8, infra=True, error="boom"))
    md = write_report(write_run(tmp_path / "run", records))["markdown"].read_text()
    examples = md.split("## Example failures", 1)[1].split("\n## ", 1)[0]
    assert examples.count("last assistant message") == 5
    assert "`t0` (episode 0, wrong answer)" in examples and "`t5`" not in examples
    assert "x" * 300 + "…" in examples and "x" * 301 not in examples


def test_incomplete_run_is_flagged(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [rec(i) for i in range(4)],
                    run={"env_id": "toy-x", "agent": "scripted", "n": 10, "seed": 3,
                         "env_kwargs": {"split": "dev"}})
    md = write_report(run)["markdown"].read_text()
    assert "Incomplete run: 4 of 10" in md
    assert 'env kwargs `{"split": "dev"}`' in md and "seed `3`" in md


def test_suite_report_reference_rows_and_no_data(tmp_path: Path) -> None:
    suite = Suite(
        name="mini", description="A two-column suite.",
        runs=(SuiteRun("Dev", "toy-x"), SuiteRun("Test", "toy-y", data_hint="run get-data y"),
              SuiteRun("Small", "toy-x", kwargs={"split": "dev"})),
        reference={"Model-A": {"Dev": 80.0, "Test": 75.55}, "Model-B": {"Dev": 60.0}},
        source="Someone et al. 2025, Table 2")
    dev = write_run(tmp_path / "dev", [rec(i, "success" if i < 3 else "failure")
                                      for i in range(4)] + [rec(4, infra=True)])
    small = write_run(tmp_path / "small", [rec(i) for i in range(2)],
                      run={"env_id": "toy-x", "env_kwargs": {"split": "dev", "limit": 2}, "n": 2})
    paths = write_suite_report(tmp_path / "suite", suite,
                               {"Dev": dev, "Test": None, "Small": small}, label="my-model")
    md = paths["markdown"].read_text()
    rows = {r[0]: r[1:] for r in section_rows(md, "Results (accuracy %)")}
    assert rows["Model-A"] == ["80.0", "75.5", "—"] or rows["Model-A"] == ["80.0", "75.6", "—"]
    assert rows["Model-B"] == ["60.0", "—", "—"]
    lo, hi = ci95([1.0, 1.0, 1.0, 0.0])
    assert rows["my-model"][0] == f"75.0 ± {100 * (hi - lo) / 2:.1f} (n=4)"
    assert rows["my-model"][1] == "no data"
    assert rows["my-model"][2].startswith("100.0 ± ") and rows["my-model"][2].endswith("(n=2)")
    assert "run get-data y" in md and "Someone et al. 2025, Table 2" in md
    assert '"limit": 2' in md  # the subset is called out
    page = paths["html"].read_text()
    assert "<td>no data</td>" in page and "<td>Model-A</td>" in page
    png = paths["plots"][0]
    assert png.name == "suite.png" and png.read_bytes()[:8] == PNG_MAGIC


def test_suite_turn_budget_is_not_reported_as_a_changed_kwarg(tmp_path: Path) -> None:
    suite = Suite(name="turns", description="d",
                  runs=(SuiteRun("Dev", "toy-x", kwargs={"split": "dev"}, max_turns=5),))
    run = write_run(tmp_path / "dev", [rec(0)],
                    run={"env_id": "toy-x", "env_kwargs": {"split": "dev", "max_turns": 5}})
    md = write_suite_report(tmp_path / "suite", suite, {"Dev": run},
                            label="m")["markdown"].read_text()
    assert "ran with env_kwargs" not in md
    other = write_run(tmp_path / "dev3", [rec(0)],
                      run={"env_id": "toy-x", "env_kwargs": {"split": "dev", "max_turns": 3}})
    md = write_suite_report(tmp_path / "suite3", suite, {"Dev": other},
                            label="m")["markdown"].read_text()
    assert '"max_turns": 3' in md
