"""A real bash in real sandboxes (local bubblewrap and Docker): the session, hostile
commands, and whole episodes judged by verifiers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import skyhub
from skyhub.eval.checks import check_env
from skyhub.shell.session import ShellSession, printable

pytestmark = pytest.mark.slow


def test_state_persists_across_commands(shell: ShellSession) -> None:
    r = shell.run("mkdir -p a/b && cd a/b && export X=41 && f() { echo $((X+1)); }")
    assert r.exit_code == 0
    r = shell.run("pwd; f; sleep 30 & echo started")
    assert r.output.splitlines()[:2] == [f"{shell.sandbox.workdir}/a/b", "42"]
    assert r.cwd == f"{shell.sandbox.workdir}/a/b"
    assert "sleep 30" in shell.run("jobs").output
    r = shell.run("false")
    assert r.exit_code == 1 and r.output == ""
    shell.run("kill %1; cd ~ 2>/dev/null || cd /")


def test_multiline_and_broken_syntax_never_hang(shell: ShellSession) -> None:
    r = shell.run("for i in 1 2 3\ndo\n  echo n$i\ndone\ncat <<EOF\nheredoc\nEOF")
    assert r.output.split() == ["n1", "n2", "n3", "heredoc"]
    r = shell.run("echo 'unbalanced", timeout=5)
    assert r.exit_code == 2 and not r.timed_out
    assert shell.run("read x; echo got:$x", timeout=5).output.strip() == "got:"


def test_timeout_interrupts_and_the_session_survives(shell: ShellSession) -> None:
    shell.run("cd /tmp && Y=kept")
    r = shell.run("sleep 100", timeout=1)
    assert r.timed_out and r.restarted is None and r.exit_code is None
    r = shell.run("echo $Y; pwd")
    assert r.output.split() == ["kept", "/tmp"]
    r = shell.run("trap '' INT; sleep 100", timeout=1)  # ignores Ctrl-C: Ctrl-\ ends it
    assert r.timed_out
    assert shell.run("echo alive").output == "alive\n"


def test_exit_restarts_the_shell_in_the_same_directory(shell: ShellSession) -> None:
    shell.run("cd /tmp; Z=1")
    r = shell.run("exit 3")
    assert r.restarted and "exit" in r.restarted
    r = shell.run("pwd; echo z=$Z")
    assert r.output.split() == ["/tmp", "z="]


def test_binary_and_endless_output_are_capped_and_printable(shell: ShellSession) -> None:
    r = shell.run("head -c 4000 /dev/urandom")
    assert "\x00" not in r.output and "\x1b" not in r.output
    r = shell.run("yes", timeout=2)
    assert r.timed_out and len(r.output) < 40_000 and "truncated" in r.output
    r = shell.run("cat /dev/urandom", timeout=2)
    assert r.timed_out and len(r.output) < 60_000
    assert shell.run("echo ok").output == "ok\n"


def test_fork_bomb_and_rm_rf_are_contained(shell: ShellSession, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    canary.write_text("here")
    r = shell.run(":(){ :|:& };:", timeout=3)
    assert r.exit_code is not None or r.timed_out
    shell.run("kill -9 -1 2>/dev/null; true", timeout=10)
    r = shell.run(f"rm -rf --no-preserve-root / 2>/dev/null; ls {canary} 2>&1", timeout=60)
    assert canary.read_text() == "here" and Path(__file__).exists()
    assert shell.run("echo still", timeout=30).output.strip().endswith("still")


def test_printable_makes_terminal_bytes_readable() -> None:
    assert printable(b"a\r\nb\x1b[31mred\x1b[0m\x00\xff") == "a\nbred^@\ufffd"


# ------------------------------------------------------------------------------ episodes
@pytest.fixture(scope="module")
def synth_env(backend: str) -> Iterator[skyhub.TextEnv]:
    env = skyhub.make("terminal-synth", backend=backend, seed=0, n_tasks=12, max_turns=3)
    yield env
    env.close()


def test_reference_solutions_pass_and_doing_nothing_fails(synth_env: skyhub.TextEnv) -> None:
    families = set()
    for task in list(synth_env.tasks)[:6]:
        synth_env.reset(options={"task_id": task.id})
        *_, info = synth_env.step(synth_env.reference_action())
        _, reward, terminated, _, info = synth_env.step(synth_env.reference_action())
        assert (reward, terminated, info["outcome"]) == (1.0, True, "success"), (task.id, info)
        synth_env.reset(options={"task_id": task.id})
        _, reward, terminated, _, info = synth_env.step("<done/>")
        assert (reward, info["outcome"]) == (0.0, "failure"), task.id
        families.add(task.meta["family"])
    assert len(families) >= 3


def test_the_work_survives_in_the_sandbox_until_reset(synth_env: skyhub.TextEnv) -> None:
    synth_env.reset(seed=3)
    synth_env.step("<bash>echo leftover > /work/mine.txt</bash>")
    synth_env.reset(seed=3)
    obs, *_ = synth_env.step("<bash>ls /work/mine.txt</bash>")
    assert "No such file" in obs


def test_running_out_of_turns_still_runs_the_verifier(synth_env: skyhub.TextEnv) -> None:
    synth_env.reset(seed=1)
    for _ in range(2):
        synth_env.step("<bash>true</bash>")
    _, _, terminated, truncated, info = synth_env.step("nothing")
    assert truncated and not terminated and info["ended_by"] == "max_turns"
    assert "verified" in info["reward_breakdown"]


def test_bundled_directory_tasks_and_contract(bwrap: str) -> None:
    """The contract does not depend on the backend: checked on the local one."""
    report = check_env("terminal", env_kwargs={"backend": "local"}, episodes=1)
    assert report.ok, [r for r in report.results if not r.passed]


def test_programs_that_wait_for_a_person_cannot_hang(shell: ShellSession) -> None:
    r = shell.run("python3", timeout=5)  # a REPL reads /dev/null: it ends at once
    assert not r.timed_out and r.exit_code == 0
    r = shell.run("read answer </dev/tty; echo never", timeout=1)  # straight from the terminal
    assert r.timed_out and "never" not in r.output
    assert shell.run("echo free").output == "free\n"


def test_tool_calls_and_tags_parse_the_same() -> None:
    from skyhub.shell.protocol import TOOLS, parse

    assert parse("<bash>ls</bash>") == parse(
        '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>')
    assert parse('<tool_call>{"name": "bash", "arguments": "{\\"command\\": \\"pwd\\"}"}'
                 '</tool_call><tool_call>{"name": "done", "arguments": {}}</tool_call>'
                 ).commands == ("pwd",)
    assert parse("<done/>").done and not parse("<done/>").commands
    assert parse("<bash>echo a</bash>\n<done/>").done
    assert not parse("<done/> <bash>rm -rf /</bash>").commands  # finished first: ignored
    assert parse('<tool_call>{"name": "bash"}</tool_call>') == parse("nothing")
    assert [t["function"]["name"] for t in TOOLS] == ["bash", "done"]


def test_a_tool_calling_agent_plays_an_episode(synth_env: skyhub.TextEnv) -> None:
    synth_env.reset(seed=2)
    obs, *_ = synth_env.step('<tool_call>{"name": "bash", "arguments": '
                             '{"command": "echo via-tool"}}</tool_call>')
    assert "via-tool" in obs
    _, _, terminated, _, info = synth_env.step(
        '<tool_call>{"name": "done", "arguments": {}}</tool_call>')
    assert terminated and info["ended_by"] == "done"
