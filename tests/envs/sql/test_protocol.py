"""SkyRL-SQL's protocol: turn parsing, each format rule (as strict as skyrl-gym's: see
test_skyrl_gym_parity for the side-by-side check), the observation table."""

from __future__ import annotations

import pytest

from skyhub.envs.sql.protocol import format_violations, parse_turn, render_table, skyrl_format


@pytest.mark.parametrize(("action", "kind"), [
    ("<think>t</think><sql>SELECT 1</sql>", "sql"),
    ("<think>t</think><solution>SELECT 1</solution>", "solution"),
    ("<sql>SELECT 1</sql> and <solution>SELECT 2</solution>", "solution"),
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
    ("<SQL>select 1</SQL>", "not a tag"),       # tags are matched in lower case only
    ("<sql >select 1</sql>", "not a tag"),
])
def test_malformed_turns_say_what_was_wrong(action: str, why: str) -> None:
    t = parse_turn(action)
    assert t.kind == "invalid" and why in t.error


def test_a_well_formed_trajectory_has_no_violations() -> None:
    actions = ["<think>a</think><sql>SELECT 1</sql>",
               "<think>b</think><solution>SELECT 1</solution>"]
    assert format_violations(actions) == []


def test_rule_exactly_one_solution_pair() -> None:
    v = format_violations(["<think>a</think><solution>1</solution><solution>2</solution>"])
    assert any("exactly one <solution>" in x for x in v)
    v = format_violations(["<think>a</think><sql>1</sql>"])
    assert any("exactly one <solution>" in x for x in v)


def test_rule_at_least_one_think() -> None:
    assert any("no <think>" in x for x in format_violations(["<solution>1</solution>"]))


def test_rule_every_observation_is_followed_by_think() -> None:
    actions = ["<think>a</think><sql>SELECT 1</sql>", "<solution>SELECT 1</solution>"]
    assert any("followed by <think>" in x for x in format_violations(actions))


@pytest.mark.parametrize("think", ["<think>a", "<THINK>a</THINK>", "<think >a</think>",
                                   "<thinking>a</thinking>"])
def test_a_think_block_is_lower_case_and_closed(think: str) -> None:
    assert "no <think> block" in format_violations([f"{think}<solution>1</solution>"])


def test_upper_case_solution_tags_are_text() -> None:
    assert parse_turn("<think>a</think><SOLUTION>1</SOLUTION>").kind == "invalid"
    assert skyrl_format(["<think>a</think><SOLUTION>1</SOLUTION>"]).ok is False
    check = skyrl_format(["<think>a</think><SOLUTION>2</SOLUTION>", "<think>b</think>"
                          "<solution>1</solution>"])
    assert check.ok and check.solution == "1"


def test_the_rules_never_read_the_envs_text() -> None:
    # observations count as empty frames: the env's reminders and error messages, which
    # mention <solution>, cannot break the format of an answer on the last turn
    actions = ["", "<think>a</think><sql>SELECT 1</sql>",
               "<think>b</think><solution>SELECT 1</solution>"]
    check = skyrl_format(actions)
    assert check.ok and check.solution == "SELECT 1"
    # an observation must still be followed by <think> (after white space, any case)
    assert skyrl_format(["<think>a</think>", "\n <THINK>b</THINK><solution>1</solution>"]).ok
    assert not skyrl_format(["<think>a</think>", "so <think>b</think><solution>1</solution>"]).ok


def test_rule_no_tags_inside_the_solution() -> None:
    for inner in ("<think>x</think>", "<sql>x</sql>", "<observation>x</observation>"):
        v = format_violations([f"<think>a</think><solution>SELECT 1 {inner}</solution>"])
        assert any("solution contains" in x for x in v), (inner, v)


def test_table_shows_at_most_max_rows_and_says_what_was_cut() -> None:
    rows = [(i, f"name{i}") for i in range(120)]
    text = render_table(["id", "name"], rows, max_rows=50, max_chars=100_000, total_rows=120)
    assert "name49" in text and "name50" not in text
    assert "70 more rows not shown (120 rows in all)" in text
    short = render_table(["id", "name"], rows, max_rows=50, max_chars=200)
    assert short.endswith("output truncated at 200 characters")
    assert "NULL" in render_table(["x"], [(None,)], max_rows=5, max_chars=100)
