"""The `skyhub` command line: list, info, check, play, --version, and its error handling.

Most tests drive the typer app in-process with `CliRunner`; a few run the real console script
in a subprocess, as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import skyhub
from skyhub.cli.kwargs import parse_kwargs
from skyhub.cli.main import app
from skyhub.registry import unregister

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from skyhub_testenvs import SayEnv

runner = CliRunner()
# Wide enough that rich does not wrap the lines the tests look for.
WIDE = {"COLUMNS": "200"}


def invoke(*args: str, input: str | None = None) -> Any:
    return runner.invoke(app, list(args), input=input, env=WIDE)


@pytest.fixture
def echo_id() -> Iterator[str]:
    # strict: a reply other than the answer raises, the bug `skyhub check` must report
    skyhub.register("test-echo", SayEnv, kwargs={"n_tasks": 2, "strict": True},
                    description="Say the number back.", tags=("test",), override=True)
    yield "test-echo"
    unregister("test-echo")


def arith_answer(seed: int) -> str:
    with skyhub.make("toy-arith") as env:
        env.reset(seed=seed)
        return str(env.task.answer)


# ---------------------------------------------------------------------------------- kwargs
def test_parse_kwargs_types_values_as_meant() -> None:
    assert parse_kwargs(["n=3", "p=0.5", "big=1e3", "neg=-2", "on=true", "off=False",
                         "x=none", "ids=[1, 2]", "m={\"a\": 1}", "s=dev", "q=\"3\"",
                         "path=/tmp/a=b", "empty="]) == {
        "n": 3, "p": 0.5, "big": 1000.0, "neg": -2, "on": True, "off": False, "x": None,
        "ids": [1, 2], "m": {"a": 1}, "s": "dev", "q": "3", "path": "/tmp/a=b", "empty": ""}
    assert type(parse_kwargs(["n=3"])["n"]) is int


@pytest.mark.parametrize(("pair", "complaint"), [
    ("max_turns", "not key=value"), ("=3", "not a valid kwarg name"),
    ("a-b=1", "not a valid kwarg name"), ("ids=[1,", "not valid JSON"),
])
def test_parse_kwargs_rejects_malformed_pairs(pair: str, complaint: str) -> None:
    with pytest.raises(typer.BadParameter, match=complaint):
        parse_kwargs([pair])


def test_parse_kwargs_rejects_a_key_given_twice() -> None:
    with pytest.raises(typer.BadParameter, match="given twice"):
        parse_kwargs(["a=1", "a=2"])


# ---------------------------------------------------------------------------------- commands
def test_help_lists_the_commands() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("list", "info", "check", "play"):
        assert command in result.output


def test_version_flag_prints_the_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.output.strip() == f"skyhub {skyhub.__version__}"


def test_list_shows_registered_envs_with_description_and_source() -> None:
    result = invoke("list")
    assert result.exit_code == 0, result.output
    assert "toy-arith" in result.output and "toy-lookup" in result.output
    assert "Integer arithmetic in one turn" in result.output
    assert "skyhub.envs.toy" in result.output


def test_list_filters_by_tag() -> None:
    result = invoke("list", "--tag", "multi-turn")
    assert "toy-lookup" in result.output and "toy-arith" not in result.output


def test_list_json_is_machine_readable(echo_id: str) -> None:
    result = invoke("list", "--json")
    assert result.exit_code == 0
    envs = {e["id"]: e for e in json.loads(result.stdout)}
    assert envs["toy-arith"]["entry_point"] == "skyhub.envs.toy.env:ArithEnv"
    assert envs[echo_id] == {"id": echo_id, "description": "Say the number back.",
                             "tags": ["test"], "source": __name__, "entry_point": "SayEnv"}


def test_list_shows_plugins_that_failed_to_load(monkeypatch: pytest.MonkeyPatch) -> None:
    import skyhub.registry as registry

    registry.list_envs()  # load the real plugins first, then add a broken one
    monkeypatch.setitem(registry._plugin_errors, "broken (brokendist)",
                        "ImportError: no module named 'nothing'")
    result = invoke("list")
    assert result.exit_code == 0
    assert "plugin broken (brokendist) failed to load: ImportError" in result.output
    assert "toy-arith" in result.output


def test_info_shows_spec_system_prompt_and_tasks() -> None:
    result = invoke("info", "toy-arith")
    assert result.exit_code == 0, result.output
    assert "skyhub.envs.toy.env:ArithEnv" in result.output
    assert "<answer>...</answer>" in result.output  # the system prompt, markup left alone
    assert "tasks: 1000" in result.output
    assert "sample task arith-0-0" in result.output


def test_info_passes_kwargs_to_the_env() -> None:
    result = invoke("info", "toy-lookup", "max_turns=5", "n_tasks=7")
    assert result.exit_code == 0, result.output
    assert "You have 5 turns" in result.output and "tasks: 7" in result.output


def test_unknown_env_is_a_red_message_and_exit_code_2() -> None:
    result = invoke("info", "toy-arth")
    assert result.exit_code == 2
    assert "Did you mean 'toy-arith'" in result.stderr
    assert "Traceback" not in result.output


def test_check_exits_0_when_every_check_passes() -> None:
    result = invoke("check", "toy-lookup", "max_turns=2")
    assert result.exit_code == 0, result.output
    assert "all checks passed" in result.output and "FAIL" not in result.output


def test_check_exits_1_and_shows_the_failing_check(echo_id: str) -> None:
    result = invoke("check", echo_id)
    assert result.exit_code == 1
    assert "FAIL" in result.output and "ValueError: unexpected action" in result.output


def test_check_passes_typed_kwargs_to_the_env(echo_id: str) -> None:
    # strict=false parsed to the bool False fixes the env; the string "false" would not
    assert invoke("check", echo_id, "strict=false").exit_code == 0
    # max_turns=0 reaches the constructor as an int, which rejects it: the caller's usage
    # error (exit 2, as for an unknown kwarg), not a check the env fails
    result = invoke("check", "toy-arith", "max_turns=0")
    assert result.exit_code == 2
    assert "max_turns must be >= 1, got 0" in result.output


def test_malformed_kwarg_is_a_usage_error() -> None:
    result = invoke("check", "toy-arith", "max_turns")
    assert result.exit_code == 2
    assert "'max_turns' is not key=value" in result.output


# ---------------------------------------------------------------------------------- play
def test_play_solves_an_episode_from_piped_input() -> None:
    answer = arith_answer(seed=3)
    result = invoke("play", "toy-arith", "--seed", "3", input=f"<answer>{answer}</answer>\n.\nn\n")
    assert result.exit_code == 0, result.output
    assert "Answer the arithmetic question" in result.output  # the system prompt
    assert "reward 1 · terminated True" in result.output
    assert "episode over: total reward 1, outcome success" in result.output


def test_play_reads_a_multi_line_action_until_a_dot_line() -> None:
    with skyhub.make("toy-lookup") as env:
        task = env.tasks[0]
    key = task.meta["key"]
    lines = ["<lookup>", key, "</lookup>", ".", "I think", f"<answer>{task.answer}</answer>", "."]
    result = invoke("play", "toy-lookup", "--task-id", task.id, input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.output
    assert f"<result>{task.answer}</result>" in result.output
    assert "outcome success" in result.output


def test_play_send_command_sends_one_line_and_end_of_input_quits() -> None:
    result = invoke("play", "toy-arith", "--seed", "0", input=":send <answer>nope</answer>\n")
    assert result.exit_code == 0, result.output
    assert "episode over: total reward 0, outcome failure" in result.output
    assert "play again" not in result.output


def test_play_hint_shows_the_reference_action() -> None:
    answer = arith_answer(seed=5)
    result = invoke("play", "toy-arith", "--seed", "5", input=":hint\n:quit\n")
    assert result.exit_code == 0, result.output
    assert f"<answer>{answer}</answer>" in result.output
    assert "episode left unfinished after 0 turn(s)" in result.output


def test_play_sends_pending_text_at_end_of_input() -> None:
    answer = arith_answer(seed=1)
    result = invoke("play", "toy-arith", "--seed", "1", input=f"<answer>{answer}</answer>")
    assert "outcome success" in result.output


def test_play_again_starts_another_episode() -> None:
    result = invoke("play", "toy-arith", "--task-id", "arith-0-7",
                    input=":send x\ny\n:send y\nn\n")
    assert result.exit_code == 0, result.output
    assert result.output.count("observation · task arith-0-7") == 2
    assert result.output.count("episode over") == 2


def test_play_unknown_task_id_is_a_usage_error() -> None:
    result = invoke("play", "toy-arith", "--task-id", "nope", input="")
    assert result.exit_code == 2
    assert "toy-arith has no task 'nope'" in result.output


# ---------------------------------------------------------------------------------- real process
def _run_cli(*args: str, input: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "skyhub.cli.main", *args], input=input,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **WIDE})


def test_console_script_prints_the_version() -> None:
    script = Path(sys.executable).parent / "skyhub"
    if not script.exists():
        pytest.skip(f"no console script next to {sys.executable}")
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"skyhub {skyhub.__version__}"


def test_subprocess_play_with_piped_stdin() -> None:
    answer = arith_answer(seed=2)
    done = _run_cli("play", "toy-arith", "--seed", "2", input=f":send <answer>{answer}</answer>\n")
    assert done.returncode == 0, done.stderr
    assert "outcome success" in done.stdout


def test_subprocess_check_exit_code_and_error_without_traceback() -> None:
    assert _run_cli("check", "toy-arith").returncode == 0
    done = _run_cli("check", "no-such-env")
    assert done.returncode == 2
    assert "no env registered as 'no-such-env'" in done.stderr
    assert "Traceback" not in done.stderr


def test_help_does_not_import_gymnasium() -> None:
    code = ("import sys; from skyhub.cli.main import app; "
            "print('gymnasium' in sys.modules, 'skyhub.registry' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.split() == ["False", "False"], done.stderr


