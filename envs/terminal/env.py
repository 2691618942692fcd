"""`TerminalEnv`: shell tasks in a sandbox, judged by the task's verifier script.

    <bash>ls -la</bash>   -> <output>...</output> [exit 0] /work
    <done/>               -> the verifier runs in the same sandbox; exit status 0 = reward 1

One sandbox per env, reused: a reset restores its clean snapshot (files and processes), runs
the task's setup script and starts a new shell. `max_turns` and the task's time budget
(`meta["timeout_s"]`) also end the episode, and the verifier still decides: the work may be
done even if the agent never said so.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from skyhub.env import TextEnv
from skyhub.errors import InfraError, SandboxUnavailable

from . import protocol
from .session import CommandResult, ShellSession

Step = tuple[str, float, bool, bool, dict[str, Any]]

SYSTEM_PROMPT = (
    "You are working in a Linux shell (bash) to complete a task. Run one or more commands by "
    "writing them inside <bash> and </bash>; you will see their output, exit status and the "
    "working directory. The shell keeps its state (directory, variables, background jobs) "
    "between turns; there is no network and no one to answer interactive prompts, so use "
    "non-interactive commands. Each command may run for {timeout:g} seconds. When the task "
    "is complete, write <done/>. You have {max_turns} turns."
)
MALFORMED = ("Your turn had no command. Run commands with <bash>...</bash>, or write <done/> "
             "when the task is complete.")
VERIFY_TIMEOUT_S = 120.0
SETUP_TIMEOUT_S = 300.0


class TerminalEnv(TextEnv):
    """Kwargs: `synth` (generated tasks; `seed` picks the stream, `n_tasks` how many) or
    `path` (a task directory or a directory of them; default the bundled examples);
    `backend` ("auto", "docker", "local"), `image` (docker; default skyhub's default image),
    `max_turns`, `command_timeout` (s), `max_output` (bytes kept per command), `cpus`,
    `memory_mb`."""

    stop_strings = ("</bash>", "<done/>", "</tool_call>")
    #: The same actions as function-calling tools (see `protocol`), for chat templates.
    tools = protocol.TOOLS

    def __init__(self, *, synth: bool = False, seed: int = 0, n_tasks: int = 1000,
                 path: str | Path | None = None, backend: str = "auto",
                 image: str | None = None, max_turns: int = 30, command_timeout: float = 30.0,
                 max_output: int = 16384, cpus: float = 1.0, memory_mb: int = 1024) -> None:
        super().__init__()
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if command_timeout <= 0:
            raise ValueError(f"command_timeout must be > 0 seconds, got {command_timeout}")
        if synth and path is not None:
            raise ValueError("pass either synth=True (generated tasks) or path=DIR, not both")
        self.tasks = self._load_tasks(synth=synth, seed=seed, n_tasks=n_tasks, path=path)
        self.backend, self.image, self.max_turns = backend, image, max_turns
        self.command_timeout, self.max_output = command_timeout, max_output
        self.cpus, self.memory_mb = cpus, memory_mb
        self.system_prompt = SYSTEM_PROMPT.format(timeout=command_timeout, max_turns=max_turns)
        self._sandbox: Any = None
        self._clean: Any = None
        self._shell: ShellSession | None = None
        self._deadline = 0.0
        self._reference_sent = False
        self._stats: dict[str, float] = {}

    def _load_tasks(self, *, synth: bool, seed: int, n_tasks: int,
                    path: str | Path | None) -> Any:
        if synth:
            from .synth import generate

            return generate(seed, n_tasks)
        from .tasks import load_tasks

        return load_tasks(path if path is not None else Path(__file__).parent / "data" / "tasks")

    # -- episodes ----------------------------------------------------------------------
    def _prepare(self, task: Any) -> Any:
        """A sandbox in the task's starting state: the env's own, restored to clean, with the
        task's setup script run in it."""
        sb = self._fresh_sandbox()
        setup = task.meta.get("setup") or ""
        if setup.strip():
            r = sb.exec(["bash", "-c", setup], timeout=SETUP_TIMEOUT_S)
            if not r.ok:
                raise InfraError(f"task {task.id}: setup failed (exit {r.exit_code}): "
                                 f"{(r.stderr or r.stdout)[-500:]}")
        return sb

    def _fresh_sandbox(self) -> Any:
        import skyhub.sandbox

        if self._sandbox is None:
            self._sandbox = skyhub.sandbox.create(image=self.image, backend=self.backend,
                                                  cpus=self.cpus, memory_mb=self.memory_mb,
                                                  pool="terminal")
            self._clean = self._sandbox.snapshot()
        else:
            self._sandbox.restore(self._clean, kill_processes=True)
        return self._sandbox

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task = self.start_episode(seed, options)
        self._stats = dict.fromkeys(("commands", "failed_commands", "timeouts", "restarts",
                                     "format_errors"), 0.0)
        self._reference_sent = False
        if self._shell is not None:
            self._shell.close()
            self._shell = None
        sb = self._prepare(task)
        self._shell = ShellSession(sb, max_output=self.max_output)
        self._deadline = time.monotonic() + float(task.meta.get("timeout_s") or 600.0)
        return task.prompt, self.make_info()

    def step(self, action: str) -> Step:
        assert self.task is not None and self._shell is not None, "call reset() before step()"
        self.turn += 1
        act = protocol.parse(action)
        if act.commands:
            outputs = []
            for command in act.commands:
                result = self._shell.run(command, self.command_timeout)
                self._count(result)
                outputs.append(render(result, self.command_timeout))
            obs = "\n".join(outputs)
        elif act.done:
            return self._verify("", ended_by="done")
        else:
            self._stats["format_errors"] += 1
            obs = MALFORMED
        done = act.done
        if done:
            return self._verify(obs, ended_by="done")
        if self.turn >= self.max_turns:
            return self._verify(obs, ended_by="max_turns")
        if time.monotonic() > self._deadline:
            return self._verify(obs, ended_by="timeout")
        left = self.max_turns - self.turn
        return (f"{obs}\n({left} turn{'s' if left != 1 else ''} left)", 0.0, False, False,
                self.make_info())

    def _count(self, r: CommandResult) -> None:
        self._stats["commands"] += 1
        self._stats["failed_commands"] += r.exit_code not in (0, None)
        self._stats["timeouts"] += r.timed_out
        self._stats["restarts"] += r.restarted is not None

    def _verify(self, obs: str, *, ended_by: str) -> Step:
        """End the episode: the task's judge decides the reward (None: it could not run)."""
        terminated, truncated = ended_by == "done", ended_by != "done"
        try:
            reward, breakdown, extra = self._judge()
        except (InfraError, SandboxUnavailable) as e:
            reward, breakdown, extra = None, {}, {"error": f"the verifier could not run: {e}"}
        if reward is None:
            return obs, 0.0, terminated, truncated, self.make_info(
                "error", infra_error=True, reward_breakdown={**self._stats, **breakdown},
                ended_by=ended_by, **extra)
        return obs, reward, terminated, truncated, self.make_info(
            "success" if reward >= 1.0 else "failure",
            reward_breakdown={**self._stats, **breakdown}, ended_by=ended_by, **extra)

    def _judge(self) -> tuple[float | None, dict[str, float], dict[str, Any]]:
        """Run the verifier script in the episode's sandbox: exit status 0 is reward 1."""
        assert self.task is not None
        r = self._sandbox.exec(["bash", "-c", self.task.meta["verify"]],
                               timeout=VERIFY_TIMEOUT_S)
        ok = r.exit_code == 0 and not r.timed_out
        return float(ok), {"verified": float(ok)}, {
            "verifier_exit_code": r.exit_code, "verifier_output": (r.stdout + r.stderr)[-2000:]}

    def reference_action(self) -> str | None:
        """The task's solution script (run in a child bash in the workdir, so its `exit` or
        `set -e` cannot end the session), then `<done/>`: the oracle's next action."""
        if self.task is None:
            return None
        if self.task.answer and not self._reference_sent:
            self._reference_sent = True
            return (f"<bash>(cd {self._sandbox.workdir} && bash <<'SKYHUB_SOLUTION'\n"
                    f"{self.task.answer}\nSKYHUB_SOLUTION\n)</bash>")
        return "<done/>"

    def close(self) -> None:
        if self._shell is not None:
            self._shell.close()
            self._shell = None
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None


def render(r: CommandResult, timeout: float) -> str:
    """A command's observation: its output, then a status line."""
    parts = [f"<output>\n{r.output.rstrip(chr(10))}\n</output>" if r.output.strip() else
             "<output></output>"]
    if r.restarted:
        parts.append(f"[skyhub: {r.restarted}; a new shell was started in {r.cwd}: files are "
                     "kept, variables and background jobs are lost]")
    elif r.timed_out:
        parts.append(f"[skyhub: the command ran past {timeout:g} s and was interrupted "
                     "(Ctrl-C)]")
    status = "interrupted" if r.exit_code is None else f"exit {r.exit_code}"
    parts.append(f"[{status}] {r.cwd}")
    return "\n".join(parts)


__all__ = ["TerminalEnv", "render"]
