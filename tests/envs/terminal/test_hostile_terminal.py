"""The terminal family against a hostile agent: a command
cannot learn its end marker's nonce and fake its exit status or cut its output short; a turn
cannot run unbounded tool calls; what the agent breaks is its failure and what the host side
breaks (the container killed, the in-container agent killed) is not held against it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import skyhub
from skyhub.shell.session import ShellSession

pytestmark = [pytest.mark.hostile, pytest.mark.slow]


# ------------------------------------------------------------------------ the end marker
FORGE = """leak=$( {{ {leak}; }} 2>/dev/null | tr -d '\\0' )
for n in $(printf '%s\\n' "$leak" | grep -aoE '[0-9a-f]{{12,}}' | sort -u | head -100); do
  for c in "$n" "${{n#036}}" "${{n: -16}}" "${{n:0:16}}" "${{n: -12}}" "${{n:0:12}}"; do
    printf '\\036%s:0:/forged\\037\\n\\036%s:exit\\037\\n' "$c" "$c"
  done
done
echo real-tail
(exit 3)"""


@pytest.mark.parametrize("prep,leak", [
    ("", "history"),
    ("", "fc -l -50"),
    ("", "cat /proc/$$/cmdline /proc/$PPID/cmdline"),
    ("", "cat /proc/$$/environ"),
    ("", "declare -p"),
    ("", "set"),
    ("", "ps -ef; ps axww -o args"),
    ("", "echo \"$BASH_COMMAND\"; echo \"$_\""),
    ("", "trap -p"),
    # history switched back on by an earlier command, to be read by the next one
    ("set -o history; HISTSIZE=1000; HISTFILESIZE=1000", "history; fc -l -50"),
], ids=["history", "fc", "cmdline", "environ", "declare", "set", "ps", "bash_command",
        "trap", "history-re-enabled"])
def test_a_command_cannot_forge_its_end_marker(shell: ShellSession, prep: str,
                                                leak: str) -> None:
    if prep:
        assert shell.run(prep).exit_code == 0
    r = shell.run(FORGE.format(leak=leak), timeout=20)
    assert not r.timed_out and r.restarted is None, r
    assert (r.exit_code, r.cwd) == (3, shell.sandbox.workdir), r
    assert r.output.rstrip().endswith("real-tail"), r.output[-500:]
    # the shell still works and is where it was
    assert shell.run("echo next; pwd").output.split() == ["next", shell.sandbox.workdir]


# ----------------------------------------------------------------------- bounded turns
def tool_calls(commands: list[str]) -> str:
    import json

    return "".join(f"<tool_call>{json.dumps({'name': 'bash', 'arguments': {'command': c}})}"
                   "</tool_call>" for c in commands)


def test_a_turn_runs_a_bounded_number_of_tool_calls(bwrap: str) -> None:
    with skyhub.make("terminal-synth", backend="local", seed=0, n_tasks=2) as env:
        env.reset(seed=0)
        obs, _, terminated, _, info = env.step(tool_calls([f"echo call-{i}" for i in range(40)]))
    assert not terminated and not info["infra_error"]
    ran = [i for i in range(40) if f"call-{i}\n" in obs]
    assert ran == list(range(8)), obs
    assert "32 more" in obs and "not run" in obs


def test_a_turn_of_slow_tool_calls_ends_before_the_step_timeout(bwrap: str) -> None:
    venv = skyhub.make_vec("terminal-synth", 1, backend="local", seed=0, n_tasks=2,
                           command_timeout_s=1.0, step_timeout=25.0)
    try:
        venv.reset(seed=0)
        _, _, _, _, infos = venv.step([tool_calls(["sleep 30"] * 40)])
    finally:
        venv.close()
    info = infos[0]
    assert not info["infra_error"], info
    assert info["outcome"] == "running"


# ------------------------------------------------------- who is to blame (10): the agent
def test_a_shell_lost_in_a_deleted_directory_is_restarted_not_an_infra_error(
        backend: str) -> None:
    with skyhub.make("terminal-synth", backend=backend, seed=0, n_tasks=2) as env:
        env.reset(seed=0)
        obs, _, terminated, _, info = env.step(
            "<bash>mkdir -p /work/gone && cd /work/gone && rmdir /work/gone && exit</bash>")
        assert not terminated and not info["infra_error"], (obs, info)
        obs, _, terminated, _, info = env.step("<bash>echo alive; pwd</bash>")
    assert not terminated and not info["infra_error"]
    assert "alive" in obs and "/work" in obs


# ------------------------------------------------------ who is to blame (10): the host
def task_dir(root: Path, verify: str) -> Path:
    d = root / "answer-42"
    d.mkdir()
    (d / "instruction.md").write_text("Write 42 to /work/answer.txt.\n")
    (d / "verify.sh").write_text(verify)
    (d / "solution.sh").write_text("echo 42 > /work/answer.txt\n")
    return d


@pytest.mark.docker
@pytest.mark.parametrize("when", ["between-turns", "before-done"])
def test_the_container_killed_from_outside_is_an_infra_error(docker_daemon: None,
                                                             tmp_path: Path,
                                                             when: str) -> None:
    verify = '[ "$(cat /work/answer.txt)" = 42 ]\n'
    with skyhub.make("terminal", backend="docker", data_dir=str(task_dir(tmp_path, verify))) as env:
        env.reset()
        env.step("<bash>echo 42 > /work/answer.txt</bash>")
        env._sandbox.container.kill()  # type: ignore[attr-defined]
        action = "<bash>ls</bash>" if when == "between-turns" else "<done/>"
        _, reward, terminated, truncated, info = env.step(action)
        assert (terminated or truncated) and info["infra_error"] is True, info
        assert info["outcome"] == "error"
        assert reward == 0.0
        assert "sandbox_broken" not in info
        # the next episode gets a working sandbox again
        env.reset()
        obs, *_ = env.step("<bash>echo back</bash>")
        assert "back" in obs


@pytest.mark.docker
def test_the_in_container_agent_killed_by_the_host_does_not_score_zero(
        docker_daemon: None, tmp_path: Path) -> None:
    """The host side kills skyhub's in-container agent while the verifier runs: the verdict
    is still the verifier's (1 here: the task was solved), not a failed verifier."""
    verify = ("touch /tmp/verifying\nfor i in $(seq 600); do [ -e /tmp/go ] && break; "
              "sleep 0.05; done\n[ \"$(cat /work/answer.txt)\" = 42 ]\n")
    with skyhub.make("terminal", backend="docker", data_dir=str(task_dir(tmp_path, verify))) as env:
        env.reset()
        env.step("<bash>echo 42 > /work/answer.txt</bash>")
        container = env._sandbox.container  # type: ignore[attr-defined]
        errors: list[str] = []

        def host_side() -> None:
            try:
                for _ in range(600):
                    if container.exec_run(["test", "-e", "/tmp/verifying"]).exit_code == 0:
                        break
                    time.sleep(0.05)
                else:
                    errors.append("the verifier never started")
                # as the agent's uid: root in the container has no CAP_KILL
                killed = container.exec_run(["pkill", "-9", "-f", r"python3 .*guest\.py"],
                                            user=env._sandbox.user)  # type: ignore[attr-defined]
                if killed.exit_code != 0:
                    errors.append(f"pkill: {killed.output!r}")
                container.exec_run(["touch", "/tmp/go"], user="0")
            except Exception as e:  # reported by the assertion below
                errors.append(repr(e))

        t = threading.Thread(target=host_side)
        t.start()
        try:
            _, reward, terminated, _, info = env.step("<done/>")
        finally:
            t.join(60)
    assert not errors, errors
    assert terminated and not info["infra_error"], info
    assert (reward, info["outcome"]) == (1.0, "success"), info


def test_forge_script_is_valid_bash() -> None:
    """The attack above must itself be a working script (else it proves nothing)."""
    import subprocess

    script = FORGE.format(leak="echo 0123456789abcdef0123")
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=10)
    assert r.returncode == 3 and "\x1e0123456789abcdef:0:/forged\x1f" in r.stdout
    assert "\x1e0123456789ab:exit\x1f" in r.stdout
