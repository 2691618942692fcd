"""`ShellEnv`: shell tasks in a sandbox, judged by the task's verifier script.

The episode flow the shell families share (`terminal`, whose `TerminalEnv` adds its task
sources; `harbor`, whose `HarborEnv` adds Harbor's containers, steps and verifier): a family
subclasses it, hands it its tasks and overrides the phases it runs differently (`_prepare`,
`_judge`, `_verify`, ...).

    <bash>ls -la</bash>   -> <output>...</output> [exit 0] /work
    <done/>               -> the verifier runs in the same sandbox; exit status 0 = reward 1

Tool calls (`skyhub.ToolCall`): `bash` is a turn of one command, `done` is `<done/>`
(`protocol.tool_action`), scored by the same rules; `protocol="tools"` makes the system prompt
describe them.

One sandbox per env, reused: a reset restores its clean snapshot (files and processes), runs
the task's setup script and starts a new shell. `max_turns` and the task's time budget
(`meta["timeout_s"]`) also end the episode, and the verifier still decides: the work may be
done even if the agent never said so.

A turn runs at most `max_tool_calls` commands (the rest are answered "not run") within
`turn_timeout` seconds in all (each command also within `command_timeout`), so one turn cannot
outlast a VectorEnv's `step_timeout` set above `turn_timeout` (plus, on the last turn, the
verifier's own time): running out of either is the agent's affair, never an infra error.

The verifier runs out of the agent's reach (`judge`): the shell is closed and every process
of the sandbox's user killed first, then the verifier runs in a fresh process with a fixed
environment (on Docker a Docker exec of its own, so a killed in-container agent cannot change
its verdict). Who is to blame when something breaks follows hub/env.py's infra-error rule: the
container killed or removed from outside, or Docker gone, is an infra error; a shell the agent
broke, or a sandbox it stopped from inside, ends the episode scored (`sandbox_broken=True`).

Over ~400 lines, for a reason: one job, the shell episode's flow (reset, turn, verdict, and
the phases families override), each phase short; split, a family's author would read several
files to see what one turn does.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from skyhub.env import StepResult, TextEnv, check_protocol
from skyhub.errors import InfraError, SandboxUnavailable, UsageError
from skyhub.tools import ToolCall

from . import judge, protocol
from .session import CommandResult, ShellSession

SYSTEM_PROMPT = (
    "You are working in a Linux shell (bash) to complete a task. Run one or more commands by "
    "writing them inside <bash> and </bash>; you will see their output, exit status and the "
    "working directory. The shell keeps its state (directory, variables, background jobs) "
    "between turns; there is no network and no one to answer interactive prompts, so use "
    "non-interactive commands. Each command may run for {timeout:g} seconds; a turn runs at "
    "most {max_tool_calls} commands, {turn_timeout:g} seconds in all. When the task is "
    "complete, write <done/>. You have {max_turns} turns."
)
TOOLS_SYSTEM_PROMPT = (
    "You are working in a Linux shell (bash) to complete a task. Run commands by calling the "
    "`bash` tool with {{\"command\": \"...\"}}; its result shows their output, exit status "
    "and the working directory. The shell keeps its state (directory, variables, background "
    "jobs) between calls; there is no network and no one to answer interactive prompts, so "
    "use non-interactive commands. Each call may run for {timeout:g} seconds. When the task "
    "is complete, call the `done` tool; the task is then checked. Each tool call is one turn; "
    "you have {max_turns} turns."
)
MALFORMED = ("Your turn had no command. Run commands with <bash>...</bash>, or write <done/> "
             "when the task is complete.")
MALFORMED_TOOLS = ("The command was empty. Call `bash` with a command to run, or `done` when "
                   "the task is complete.")
VERIFY_TIMEOUT_S = 120.0
SETUP_TIMEOUT_S = 300.0
MAX_TOOL_CALLS = 8


class ShellEnv(TextEnv):
    """Args: `tasks` (the family's task set: each task's `meta` has `verify`, a bash script,
    and may have `setup` and `timeout_s`); `backend` ("auto", "docker", "local"), `image`
    (docker; default skyhub's default image), `max_turns`, `command_timeout_s` (per command),
    `max_tool_calls` (commands per turn), `turn_timeout_s` (per turn, all its commands
    together; default twice `command_timeout_s`), `max_output` (bytes kept per command),
    `cpus`, `memory_mb`, `protocol` ("tags": the system prompt describes `<bash>` and
    `<done/>`; "tools": the `bash` and `done` tools, one call per turn). Both are accepted in
    `step` either way, scored alike. `progress_reward` (tasks scored with partial credit,
    `meta["scored"]`): each turn's reward is what the score gained since the last (the
    verifier script run in the sandbox after the turn, with the agent's processes left
    alone), and the end's is the verifier's verdict minus what was already given, so an
    episode's total is the verdict exactly; a per-turn signal for training
    (`algo.turn_weight`), never a verdict."""

    stop_strings = ("</bash>", "<done/>", "</tool_call>")
    #: Whether `fork` copies the sandbox (else it replays): a family whose sandbox holds
    #: more than `_new_sandbox` can make a spare of (SWE's /testbed and its editor) sets
    #: False; Harbor overrides `_new_sandbox` with its task's container.
    fork_by_sandbox: ClassVar[bool] = True
    #: The same actions as function-calling tools (see `protocol`), for chat templates.
    tools = protocol.TOOLS

    def __init__(self, *, tasks: Any, backend: str = "auto", image: str | None = None,
                 max_turns: int = 30, command_timeout_s: float = 30.0,
                 max_output: int = 16384, cpus: float = 1.0, memory_mb: int = 1024,
                 max_tool_calls: int = MAX_TOOL_CALLS,
                 turn_timeout_s: float | None = None, protocol: str = "tags",
                 progress_reward: bool = False) -> None:
        super().__init__()
        self.protocol = check_protocol(protocol)
        if command_timeout_s <= 0:
            raise UsageError(f"command_timeout_s must be > 0 seconds, got {command_timeout_s}")
        if max_tool_calls < 1:
            raise UsageError(f"max_tool_calls must be >= 1, got {max_tool_calls}")
        turn_timeout_s = 2 * command_timeout_s if turn_timeout_s is None else turn_timeout_s
        if turn_timeout_s <= 0:
            raise UsageError(f"turn_timeout_s must be > 0 seconds, got {turn_timeout_s}")
        self.tasks = tasks
        self.backend, self.image, self.max_turns = backend, image, max_turns
        self.command_timeout, self.max_output = command_timeout_s, max_output
        self.max_tool_calls, self.turn_timeout = max_tool_calls, float(turn_timeout_s)
        self.cpus, self.memory_mb = cpus, memory_mb
        self.progress_reward, self._credited = progress_reward, 0.0
        if self.protocol == "tools":  # one command per turn
            self.system_prompt = TOOLS_SYSTEM_PROMPT.format(
                timeout=min(command_timeout_s, self.turn_timeout), max_turns=max_turns)
        else:
            self.system_prompt = SYSTEM_PROMPT.format(
                timeout=command_timeout_s, max_turns=max_turns, max_tool_calls=max_tool_calls,
                turn_timeout=self.turn_timeout)
        self._sandbox: Any = None
        self._clean: Any = None
        self._shell: ShellSession | None = None
        self._deadline = 0.0
        self._idle_since: float | None = None  # see `_episode_clock`
        self._reference_sent = False
        self._stats: dict[str, float] = {}
        self._broken: str | None = None  # what the agent broke in its sandbox, if anything
        self._spares: Any = None  # warm sandboxes for forks (`spares`)
        self.fork_note: str | None = None  # why the last fork replayed, if it did

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
        if self._sandbox is not None and self._sandbox.closed:
            self._sandbox = None  # lost in the last episode (see `_sandbox_lost`)
        if self._sandbox is None:
            self._sandbox = self._new_sandbox()
            self._clean = self._sandbox.snapshot()
        else:
            self._sandbox.restore(self._clean, kill_processes=True)
        return self._sandbox

    def _new_sandbox(self) -> Any:
        import skyhub.sandbox

        return skyhub.sandbox.create(image=self.image, backend=self.backend, cpus=self.cpus,
                                     memory_mb=self.memory_mb, pool="terminal")

    # -- forking -------------------------------------------------------------------------
    def fork(self, n: int = 1, *, factory: Any = None) -> list[TextEnv]:
        """n children by copying the sandbox and the shell into warm spares (files, cwd,
        variables, functions, aliases, options: `skyhub.shell.fork`), or by replay where
        that cannot be exact (background jobs, a backend that cannot copy its files)."""
        from .fork import fork_shell

        return fork_shell(self, n, factory)

    def spares(self) -> Any:
        """This env's warm spares for forks (`skyhub.shell.spares.Spares`), made on first
        use and closed with the env (or when `_spares_key` changes)."""
        key = self._spares_key()
        if self._spares is not None and self._spares.key != key:
            self._spares.close()
            self._spares = None
        if self._spares is None:
            from .spares import Spare, Spares

            def make() -> Spare:
                sb = self._new_sandbox()
                try:
                    return Spare(sb, sb.snapshot(), ShellSession(sb, max_output=self.max_output))
                except BaseException:
                    sb.close()
                    raise

            self._spares = Spares(make, key=key)
        return self._spares

    def _spares_key(self) -> Any:
        """What a spare must match besides the env's settings (Harbor: the task and step,
        whose image and user it is made with)."""
        return None

    def sandbox_fork_problem(self, spare: Any) -> str | None:
        """Why this episode cannot fork by a sandbox copy now, beyond what every shell
        episode checks (`skyhub.shell.fork.copy_problem`); None: it can. Asked first with
        `spare` None (before any spare is made), then with the first spare taken."""
        return None

    def fork_resources(self) -> None:
        """A child by sandbox copy: its own counters; its sandbox and shell are set by
        `fork_shell`, its spares made if it forks in turn."""
        self._stats = dict(self._stats)
        self._spares = None

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task = self.start_episode(seed, options)
        self._stats = dict.fromkeys(("commands", "failed_commands", "timeouts", "restarts",
                                     "format_errors", "skipped_commands"), 0.0)
        self._reference_sent = False
        self._broken, self._credited = None, 0.0
        if self._shell is not None:
            self._shell.close()
            self._shell = None
        sb = self._prepare(task)
        self._shell = ShellSession(sb, max_output=self.max_output)
        self._deadline = time.monotonic() + float(task.meta.get("timeout_s") or 600.0)
        self._idle_since = time.monotonic()
        return task.prompt, self.make_info()

    @contextlib.contextmanager
    def _episode_clock(self) -> Iterator[None]:
        """The episode's time limit counts its own time, inside its steps: the time between
        two steps (the agent's model, a VectorEnv or trainer busy with other episodes) moves
        the deadline on. A lockstep batch waiting 600 s for another episode's verifier used up
        a Harbor healthcheck task's whole agent timeout after one turn."""
        if self._idle_since is not None:
            self._deadline += time.monotonic() - self._idle_since
        self._idle_since = None
        try:
            yield
        finally:
            self._idle_since = time.monotonic()

    def step(self, action: str) -> StepResult:
        with self._episode_clock():
            return self._turn(action)

    def _turn(self, action: str) -> StepResult:
        assert self.task is not None and self._shell is not None, "call reset() before step()"
        self.next_turn()
        act = protocol.parse(action)
        if act.commands:
            outputs: list[str] = []
            try:
                self._run_commands(act.commands, outputs)
            except InfraError as e:  # no shell could be started again
                return self._sandbox_lost("\n".join(outputs), e)
            obs = "\n".join(outputs)
        elif act.done:
            return self._verify("", ended_by="done")
        else:
            self._stats["format_errors"] += 1
            obs = MALFORMED
        done = act.done
        if done:
            return self._verify(obs, ended_by="done")
        if self.out_of_turns:
            return self._verify(obs, ended_by="max_turns")
        if time.monotonic() > self._deadline:
            return self._verify(obs, ended_by="timeout")
        gain = self._progress() if self.progress_reward else 0.0
        return f"{obs}\n{self.turns_left_note()}", gain, False, False, self.make_info()

    def _progress(self) -> float:
        """A scored task's gain since the last turn (`progress_reward`): its verifier script
        run in the sandbox as it is now. Shaping only: a failed check gives 0 and the end's
        reward settles the total to the verdict."""
        assert self.task is not None
        if not self.task.meta.get("scored"):
            return 0.0
        try:
            r = judge.run_verifier(self._sandbox, ["bash", "-c", self.task.meta["verify"]],
                                   timeout=VERIFY_TIMEOUT_S)
        except InfraError:
            return 0.0
        score = _score(r.stdout) if r.exit_code == 0 and not r.timed_out else self._credited
        gain, self._credited = score - self._credited, score
        return gain

    def _run_commands(self, commands: tuple[str, ...], outputs: list[str]) -> None:
        """Run a turn's commands in order, each within `command_timeout`, all within
        `turn_timeout` and the episode's time; at most `max_tool_calls` of them."""
        assert self._shell is not None
        turn_end = min(time.monotonic() + self.turn_timeout, self._deadline)
        for i, command in enumerate(commands):
            left = turn_end - time.monotonic()
            if i >= self.max_tool_calls or left <= 0:
                why = (f"a turn runs at most {self.max_tool_calls} commands"
                       if i >= self.max_tool_calls else
                       f"this turn's time ({self.turn_timeout:g} s) is used up"
                       if turn_end < self._deadline else "the task's time is used up")
                skipped = len(commands) - i
                self._stats["skipped_commands"] += skipped
                outputs.append(f"[skyhub: not run: {why}; {skipped} more command"
                               f"{'s' if skipped != 1 else ''} skipped]")
                return
            timeout = min(self.command_timeout, left)
            result = self._shell.run(command, timeout)
            self._count(result)
            outputs.append(render(result, timeout))

    def _sandbox_lost(self, obs: str, error: Exception) -> StepResult:
        """No shell can be started in the sandbox any more. Docker killed or removed from
        outside (or gone): an infra error. Anything else is what the agent broke: the
        verifier still runs where it can and the episode is scored, flagged."""
        sb = self._sandbox
        if judge.who_broke(sb) == "host":
            self._discard_sandbox()
            return obs, 0.0, False, True, self.make_info(
                "error", infra_error=True, reward_breakdown=dict(self._stats),
                ended_by="sandbox_lost", error=f"the sandbox was lost: {error}")
        self._broken = f"the agent's shell could not be started again: {error}"
        return self._verify(obs, ended_by="sandbox_broken")

    def _discard_sandbox(self) -> None:
        """Drop a sandbox that cannot be restored: the next reset makes a new one."""
        if self._shell is not None:
            self._shell.close()
            self._shell = None
        if self._sandbox is not None:
            self._sandbox.close()

    def _count(self, r: CommandResult) -> None:
        self._stats["commands"] += 1
        self._stats["failed_commands"] += r.exit_code not in (0, None)
        self._stats["timeouts"] += r.timed_out
        self._stats["restarts"] += r.restarted is not None

    def _verify(self, obs: str, *, ended_by: str) -> StepResult:
        """End the episode: the task's judge decides the reward (None: it could not run, for
        reasons outside the agent's reach). `extra["sandbox_broken"]` from the judge, or a
        shell the agent broke before, flags a scored episode whose sandbox the agent broke."""
        # the agent's own end terminates; max_turns or the time limit truncates (hub/env.py)
        terminated, truncated = self.end_flags(task_ended=ended_by in ("done", "sandbox_broken"))
        if self._shell is not None:  # the agent's shell is no place for the verifier
            self._shell.close()
            self._shell = None
        try:
            reward, breakdown, extra = self._judge()
        except (InfraError, SandboxUnavailable) as e:
            reward, breakdown, extra = self._judge_failed(e)
        broken = bool(extra.pop("sandbox_broken", False)) or self._broken is not None
        if self._broken is not None:
            extra.setdefault("broken", self._broken)
        if reward is None:
            return obs, 0.0, terminated, truncated, self.make_info(
                "error", infra_error=True, reward_breakdown={**self._stats, **breakdown},
                ended_by=ended_by, **extra)
        given = reward - self._credited if self.progress_reward else reward
        return obs, given, terminated, truncated, self.make_info(
            "success" if reward >= 1.0 else "failure", sandbox_broken=broken,
            reward_breakdown={**self._stats, **breakdown}, ended_by=ended_by, **extra)

    def _judge_failed(self, e: Exception) -> tuple[float | None, dict[str, float],
                                                   dict[str, Any]]:
        """The verifier could not run: an infra error if the sandbox was lost from outside,
        else the agent's doing (a stopped or broken sandbox): reward 0, flagged."""
        if judge.who_broke(self._sandbox) == "host":
            self._discard_sandbox()
            return None, {}, {"error": f"the verifier could not run: {e}"}
        return 0.0, {"verified": 0.0}, {"sandbox_broken": True,
                                        "error": f"the verifier could not run in the sandbox "
                                                 f"the agent left: {e}"}

    def _judge(self) -> tuple[float | None, dict[str, float], dict[str, Any]]:
        """Run the verifier script where the agent cannot reach it (`judge`): after killing
        the agent's processes, in a fresh process. Exit status 0 is reward 1."""
        assert self.task is not None
        sb = self._sandbox
        judge.kill_processes(sb)
        r = judge.run_verifier(sb, ["bash", "-c", self.task.meta["verify"]],
                               timeout=VERIFY_TIMEOUT_S, undumpable=True)
        if sb.backend == "docker" and judge.who_broke(sb) == "host":
            raise InfraError("the sandbox's container was stopped from outside while the "
                             "verifier ran")
        ok = r.exit_code == 0 and not r.timed_out
        extra = {"verifier_exit_code": r.exit_code, "verifier_timed_out": r.timed_out,
                 "verifier_output": (r.stdout + r.stderr)[-2000:]}
        if self.task.meta.get("scored"):  # partial credit: the verifier's SKYHUB_SCORE=k/n
            score = _score(r.stdout) if ok else 0.0
            return score, {"verified": float(ok), "score": score}, extra
        return float(ok), {"verified": float(ok)}, {
            "verifier_exit_code": r.exit_code, "verifier_timed_out": r.timed_out,
            "verifier_output": (r.stdout + r.stderr)[-2000:]}

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

    # -- tool calls --------------------------------------------------------------------
    def tool_action(self, name: str, arguments: dict[str, Any]) -> str:
        """`bash` is a one-command turn, `done` is `<done/>` (`protocol.tool_action`: the text
        reads back as exactly the call's command, whatever it holds)."""
        return protocol.tool_action(name, arguments)

    def tool_content(self, name: str, observation: str) -> str:
        """The command's output without the `<output>` wrapping, then its status line (and
        the turns-left note); an empty command told in terms of the tools."""
        if observation.startswith(MALFORMED):
            return MALFORMED_TOOLS + observation[len(MALFORMED):]
        empty, head, tail = "<output></output>\n", "<output>\n", "\n</output>\n"
        if observation.startswith(empty):
            return observation[len(empty):]
        end = observation.rfind(tail)
        if observation.startswith(head) and end >= len(head) - 1:
            return f"{observation[len(head):end]}\n{observation[end + len(tail):]}"
        return observation

    def reference_tool_calls(self) -> list[ToolCall] | None:
        """`reference_action` as tool calls: the solution as one `bash` call, then (at the
        next turn, as the text oracle does) `done`."""
        action = self.reference_action()
        if action is None:
            return None
        act = protocol.parse(action)
        calls = [ToolCall(f"call_{self.turn + 1}_{i}", "bash", {"command": c})
                 for i, c in enumerate(act.commands)]
        if act.done or not calls:
            calls.append(ToolCall(f"call_{self.turn + 1}_done", "done", {}))
        return calls

    def close(self) -> None:
        if self._shell is not None:
            self._shell.close()
            self._shell = None
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
        if self._spares is not None:
            self._spares.close()
            self._spares = None


def _score(stdout: str) -> float:
    """A scored task's reward: the last `SKYHUB_SCORE=k/n` line its verifier printed (in
    [0, 1]; 0 when there is none)."""
    found = re.findall(r"^SKYHUB_SCORE=(\d+)/(\d+)\s*$", stdout, re.M)
    if not found:
        return 0.0
    k, n = (int(x) for x in found[-1])
    return min(1.0, k / n) if n > 0 else 0.0


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


__all__ = ["ShellEnv", "render"]
