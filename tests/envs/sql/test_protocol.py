"""SkyRL-SQL's protocol: turn parsing, each format rule, the observation table."""

from __future__ import annotations

import pytest

from skyhub.envs.sql.protocol import format_violations, parse_turn, render_table

OBS = "<observation>\nx\n</observation>"


@pytest.mark.parametrize(("action", "kind"), [
    ("<think>t</think><sql>SELECT 1</sql>", "sql"),
    ("<think>t</think><solution>SELECT 1</solution>", "solution"),
    ("<sql>SELECT 1</sql> and <solution>SELECT 2</solution>", "solution"),
    ("<SQL>select 1</SQL>", "sql"),
])
def test_parse_turn_finds_the_request(action: str, kind: str) -> None:
    assert parse_turn(action).kind == kind


@pytest.mark.parametrize(("action", "why"), [
    ("", "empty"),
    ("   \n", "empty"),
    ("I would query the table", "no <sql>"),
    ("<sql>SELECT 1", "not closed"),
    ("<solution>SELECT 1", "not closed"),
    ("<sql>  </sql>", "empty"),
])
def test_malformed_turns_say_what_was_wrong(action: str, why: str) -> None:
    t = parse_turn(action)
    assert t.kind == "invalid" and why in t.error


def test_a_well_formed_trajectory_has_no_violations() -> None:
    actions = ["<think>a</think><sql>SELECT 1</sql>",
               "<think>b</think><solution>SELECT 1</solution>"]
    assert format_violations(actions, [OBS, ""]) == []


def test_rule_exactly_one_solution_pair() -> None:
    v = format_violations(["<think>a</think><solution>1</solution><solution>2</solution>"], [""])
    assert any("exactly one <solution>" in x for x in v)
    v = format_violations(["<think>a</think><sql>1</sql>"], [""])
    assert any("exactly one <solution>" in x for x in v)


def test_rule_at_least_one_think() -> None:
    assert any("no <think>" in x for x in format_violations(["<solution>1</solution>"], [""]))


def test_rule_every_observation_is_followed_by_think() -> None:
    actions = ["<think>a</think><sql>SELECT 1</sql>", "<solution>SELECT 1</solution>"]
    assert any("followed by <think>" in x for x in format_violations(actions, [OBS, ""]))


def test_rule_no_tags_inside_the_solution() -> None:
    for inner in ("<think>x</think>", "<sql>x</sql>", "<observation>x</observation>"):
        v = format_violations([f"<think>a</think><solution>SELECT 1 {inner}</solution>"], [""])
        assert any("solution contains" in x for x in v), (inner, v)


def test_table_shows_at_most_max_rows_and_says_what_was_cut() -> None:
    rows = [(i, f"name{i}") for i in range(120)]
    text = render_table(["id", "name"], rows, max_rows=50, max_chars=100_000, total_rows=120)
    assert "name49" in text and "name50" not in text
    assert "70 more rows not shown (120 rows in all)" in text
    short = render_table(["id", "name"], rows, max_rows=50, max_chars=200)
    assert short.endswith("output truncated at 200 characters")
    assert "NULL" in render_table(["x"], [(None,)], max_rows=5, max_chars=100)
