"""`check_env`: does an env keep skyhub's contract? (`skyhub check ID` and the tests use it.)

gymnasium's checker covers the API's shapes; the checks here cover what a trainer relies on
beyond them: the info keys it reads on every step, malformed actions that never raise, turns
that are counted and end the episode within a declared `max_turns`, seeds that pick the same
task in every process, a reference solution that really scores, episodes that replay
identically (`skyhub replay`), a fork mid-episode that goes on as the original (`fork_check`),
declared tools that are valid and callable (`tool_checks`),
and an env that leaves no thread or child process behind.
Each check runs on its own: one that fails or crashes is reported (with the exception's
last line) and the others still run, so a single report lists everything to fix. No check
times anything.

Over ~400 lines, for a reason: the contract's checks, one function each, with the runner
that reports them: a newcomer reads them as one list.
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import os
import re
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyhub.errors import CheckFailed, SkyhubError
from skyhub.eval.fork_check import check_fork
from skyhub.eval.tool_checks import check_tools

if TYPE_CHECKING:
    from rich.table import Table

    from skyhub.env import TextEnv

#: Steps after which an episode of repeated garbage (or reference) actions is given up.
MAX_STEPS = 50

#: What an agent may send that an env must answer with an observation, never an exception.
#: `None` stands for a fresh `action_space.sample()` at every step (random garbage).
MALFORMED_ACTIONS: dict[str, str | None] = {
    "empty": "", "whitespace": "   ", "random": None,
    "100k characters": ("lorem <ipsum> [dolor] {sit} " * 3572)[:100_000],
    "unclosed tag": "<sql>unclosed", "reversed tags": "</answer><answer>",
    "non-ASCII": "中文 ✓", "NUL byte": "a\x00b",
}

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class CheckResult:
    """One named check: `passed`, what it found (`message`), and `notes` that are not failures."""

    name: str
    passed: bool
    message: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class CheckReport:
    """Every check's result for one env; `ok` when all passed."""

    env: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed]

    def __getitem__(self, name: str) -> CheckResult:
        return {r.name: r for r in self.results}[name]

    def to_table(self) -> Table:
        """A rich table: one row per check, notes in yellow under its message."""
        from rich.table import Table
        from rich.text import Text

        table = Table(title=f"skyhub check {self.env}", title_justify="left")
        table.add_column("check", no_wrap=True)
        table.add_column("result", no_wrap=True)
        table.add_column("details", overflow="fold")
        for r in self.results:
            details = Text(r.message)
            for note in r.notes:
                details.append(("\n" if details else "") + f"note: {note}", style="yellow")
            table.add_row(r.name, Text("PASS", "green") if r.passed else Text("FAIL", "bold red"),
                          details)
        n = len(self.failed)
        table.caption = f"{n} of {len(self.results)} checks failed" if n else "all checks passed"
        return table

    def __str__(self) -> str:
        lines = [f"skyhub check {self.env}: {'ok' if self.ok else 'FAILED'}"]
        for r in self.results:
            lines.append(f"  {'PASS' if r.passed else 'FAIL'} {r.name}: {r.message}")
            lines += [f"       note: {n}" for n in r.notes]
        return "\n".join(lines)


def check_env(env_or_id: TextEnv | str, *, env_kwargs: dict[str, Any] | None = None,
              episodes: int = 3, seed: int = 0) -> CheckReport:
    """Run every contract check on an env (an id to `skyhub.make`, or an instance) and report.

    The env is closed at the end (closing twice is one of the checks). Pass an id rather than
    an instance to also catch threads and processes started in `__init__`. Errors that stop
    the env from being made at all (`EnvNotFound`, `DataNotFound`, ...) propagate; any other
    exception from `make` becomes a failed `make` check.
    """
    baseline = set(threading.enumerate()), _children(), _containers()
    if isinstance(env_or_id, str):
        from skyhub import make

        kwargs = dict(env_kwargs or {})
        name = env_or_id + "".join(f" {k}={v!r}" for k, v in kwargs.items())
        try:
            env = make(env_or_id, **kwargs)
        except Exception as e:
            if isinstance(e, SkyhubError):
                raise
            return CheckReport(name, [CheckResult("make", False, f"skyhub.make({env_or_id!r}) "
                                                  f"raised {_describe(e)}")])
        make_other: Callable[[], Any] | None = functools.partial(make, env_or_id, **kwargs)
    else:
        if env_kwargs:
            raise TypeError("env_kwargs apply only when check_env is given an env id")
        env, name = env_or_id, repr(env_or_id)
        spec = getattr(env, "spec", None)
        make_other = spec.make if spec is not None else None

    report = CheckReport(name)
    _run(report, "gymnasium", _check_gymnasium, env)
    _run(report, "spaces", _check_spaces, env)
    _run(report, "info", _check_info, env, seed, episodes)
    _run(report, "malformed", _check_malformed, env, seed)
    _run(report, "turns", _check_turns, env, seed, episodes)
    _run(report, "seeding", _check_seeding, env, seed, make_other)
    _run(report, "reference", _check_reference, env, seed, episodes)
    _run(report, "replay", _check_replay, env, seed)
    _run(report, "fork", check_fork, env, seed, make_other)
    _run(report, "tools", functools.partial(check_tools, describe=_describe), env, seed,
         episodes)
    _run(report, "cleanup", _check_cleanup, env, baseline)
    return report


def _run(report: CheckReport, name: str, fn: Callable[..., str], *args: Any) -> None:
    notes: list[str] = []
    try:
        report.results.append(CheckResult(name, True, fn(*args, notes), notes))
    except CheckFailed as e:
        report.results.append(CheckResult(name, False, str(e), notes))
    except Exception as e:
        report.results.append(CheckResult(name, False, f"raised {_describe(e)}", notes))


def _describe(e: BaseException) -> str:
    """`Type: message (at file:line in function)`: the traceback's last line and frame."""
    text = _ANSI.sub("", f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
    text = text if len(text) <= 300 else text[:300] + "..."
    if frames := traceback.extract_tb(e.__traceback__):
        text += f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})"
    return text


def _reference(env: Any) -> str | None:
    fn = getattr(env, "reference_action", None) or env.unwrapped.reference_action
    return fn()


def _play(env: Any, seed: int, policy: Callable[[], str]) -> Iterator[tuple[Any, ...]]:
    """Reset with `seed`, then step with `policy()` until the episode ends or MAX_STEPS steps;
    yields `(action, obs, reward, terminated, truncated, info)` (action, reward None at reset)."""
    obs, info = env.reset(seed=seed)
    yield None, obs, None, False, False, info
    for _ in range(MAX_STEPS):
        action = policy()
        obs, reward, terminated, truncated, info = env.step(action)
        yield action, obs, reward, terminated, truncated, info
        if terminated or truncated:
            return


def _check_gymnasium(env: Any, notes: list[str]) -> str:
    from gymnasium.utils.env_checker import check_env as gym_check_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gym_check_env(env, skip_render_check=True)
    notes += dict.fromkeys(_ANSI.sub("", str(w.message)).removeprefix("WARN: ") for w in caught)
    return "gymnasium.utils.env_checker.check_env passed" + (" with warnings" if notes else "")


def _check_spaces(env: Any, notes: list[str]) -> str:
    from gymnasium.spaces import Text

    from skyhub.spaces import UnicodeText

    spaces = {"observation_space": env.observation_space, "action_space": env.action_space}
    wrong = [f"{n} is {type(s).__name__}" for n, s in spaces.items() if not isinstance(s, Text)]
    if wrong:
        raise CheckFailed("; ".join(wrong) + ": skyhub envs exchange text, so both spaces must "
                          "be skyhub.spaces.UnicodeText (TextEnv.__init__ sets them)")
    notes += [f"{n} is a gymnasium Text with a finite charset, which rejects text outside it "
              "(quotes, newlines, non-ASCII); UnicodeText accepts any str"
              for n, s in spaces.items() if not isinstance(s, UnicodeText)]
    return "observation and action spaces are text spaces"


def _info_problems(info: Any, where: str, *, final: bool) -> list[str]:
    from skyhub.env import OUTCOMES, REQUIRED_INFO_KEYS

    if not isinstance(info, dict):
        return [f"{where}: info is {type(info).__name__}, not a dict"]
    problems = [f"{where}: info lacks {k!r}" for k in REQUIRED_INFO_KEYS if k not in info]
    if "outcome" in info and info["outcome"] not in OUTCOMES:
        problems.append(f"{where}: outcome {info['outcome']!r} is not one of {OUTCOMES}")
    if "infra_error" in info and not isinstance(info["infra_error"], bool):
        problems.append(f"{where}: infra_error is {type(info['infra_error']).__name__}, not bool")
    if final and not isinstance(info.get("reward_breakdown"), dict):
        problems.append(f"{where} (final): reward_breakdown is missing or not a dict")
    return problems


def _check_info(env: Any, seed: int, episodes: int, notes: list[str]) -> str:
    env.action_space.seed(seed)

    def reference_or_random() -> str:
        action = None
        with contextlib.suppress(Exception):  # the reference check reports a broken reference
            action = _reference(env)
        return action if action is not None else env.action_space.sample()

    problems: list[str] = []
    for i in range(max(episodes, 1)):
        kind, policy = (("random", env.action_space.sample) if i % 2 == 0
                        else ("reference", reference_or_random))
        for n, (action, obs, reward, terminated, truncated, info) in enumerate(
                _play(env, seed + i, policy)):
            final = bool(terminated or truncated)
            where = f"episode {i} ({kind} actions), " + (f"step {n}" if n else "reset")
            problems += _info_problems(info, where, final=final)
            if not isinstance(obs, str):
                problems.append(f"{where}: observation is {type(obs).__name__}, not str")
            if action is not None and (isinstance(reward, bool) or not isinstance(
                    reward, numbers.Real) or not math.isfinite(float(reward))):
                problems.append(f"{where}: reward {reward!r} is not a finite float")
            if final and isinstance(info, dict) and info.get("outcome") == "running":
                notes.append(f"{where}: the episode ended with outcome 'running'")
        if not final:
            notes.append(f"episode {i} ({kind} actions) did not end in {MAX_STEPS} steps")
    if problems:
        more = f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""
        raise CheckFailed("; ".join(problems[:6]) + more)
    return "every info has the required keys; rewards are floats"


def _check_malformed(env: Any, seed: int, notes: list[str]) -> str:
    env.action_space.seed(seed)
    failures: dict[str, list[str]] = {}  # exception -> the actions that raised it
    endless: list[str] = []
    for kind, fixed in MALFORMED_ACTIONS.items():
        sent = [""]

        def policy(fixed: str | None = fixed, sent: list[str] = sent) -> str:
            sent[0] = env.action_space.sample() if fixed is None else fixed
            return sent[0]

        try:
            ended = any(step[3] or step[4] for step in _play(env, seed, policy))
        except Exception as e:
            action = sent[0]
            shown = repr(action[:30]) + (f"... ({len(action)} chars)" if len(action) > 30 else "")
            failures.setdefault(_describe(e), []).append(f"{kind} {shown}")
            continue
        if not ended:
            endless.append(kind)
    if endless:
        notes.append(f"episodes did not end in {MAX_STEPS} steps of these actions (fine if the "
                     f"env has no turn limit): {', '.join(endless)}")
    if failures:
        raise CheckFailed("malformed actions must get an explanatory observation, not an "
                          "exception: " + "; ".join(f"{error} on {', '.join(actions)}"
                                                   for error, actions in failures.items()))
    return f"{len(MALFORMED_ACTIONS)} kinds of malformed action answered without exceptions"


def _check_turns(env: Any, seed: int, episodes: int, notes: list[str]) -> str:
    """An env that declares a turn budget (`max_turns`) counts its turns and ends within it."""
    if getattr(env.unwrapped, "max_turns", None) is None:
        notes.append("the env declares no max_turns, so its turn budget was not checked")
        return "skipped"
    env.action_space.seed(seed)
    longest = 0
    for i in range(max(episodes, 1)):
        env.reset(seed=seed + i)
        # turns_left right after reset: the budget (an env may grant turns past max_turns)
        budget = env.unwrapped.turns_left
        budget = budget if isinstance(budget, int) else env.unwrapped.max_turns
        for n in range(1, budget + 1):
            _, _, terminated, truncated, info = env.step(env.action_space.sample())
            turn = info.get("turn") if isinstance(info, dict) else None
            if turn != n:
                raise CheckFailed(f"episode {i} (random actions), step {n}: info['turn'] is "
                                  f"{turn!r}, not {n}: count each turn with self.next_turn() "
                                  "(or self.turn += 1) first in step")
            if terminated or truncated:
                longest = max(longest, n)
                break
        else:
            raise CheckFailed(f"episode {i} (random actions) did not end within its turn budget "
                              f"({budget} turns, max_turns={env.unwrapped.max_turns}): end it "
                              "when self.out_of_turns (truncated: self.out_of_turns_step)")
    return (f"random play ended within the turn budget (the longest episode: {longest} "
            f"turn{'s' if longest != 1 else ''})")


def _check_seeding(env: Any, seed: int, make_other: Callable[[], Any] | None,
                   notes: list[str]) -> str:
    def task(e: Any, s: int) -> tuple[Any, Any]:
        obs, info = e.reset(seed=s)
        return info.get("task_id"), obs

    seeds = [seed, seed + 1, seed + 2]
    first = {s: task(env, s) for s in seeds}
    for s in seeds:  # again, after the other seeds: reset must reseed, not carry on
        if (again := task(env, s)) != first[s]:
            raise CheckFailed(f"reset(seed={s}) chose task {first[s][0]!r}, then {again[0]!r}"
                              " (or a different observation): choose tasks with self.np_random "
                              "(TextEnv.select_task) after super().reset(seed=seed)")
    if make_other is None:
        notes.append("the env has no spec, so seeding across instances was not checked")
    else:
        other = make_other()
        try:
            for s in seeds:
                if task(other, s) != first[s]:
                    raise CheckFailed(f"reset(seed={s}) chose another task (or observation) in "
                                      "a second instance: build the task set deterministically")
        finally:
            with contextlib.suppress(Exception):  # the cleanup check reports close() errors
                other.close()
    n_tasks = len(getattr(env.unwrapped, "tasks", ()) or ())
    chosen = {task(env, seed + k)[0] for k in range(16)}
    if n_tasks <= 1:
        notes.append(f"the env has {n_tasks} task(s); different seeds were not compared")
    elif len(chosen) == 1:
        raise CheckFailed(f"16 different seeds all chose task {chosen.pop()!r} out of {n_tasks}:"
                          " draw the task with self.np_random (TextEnv.select_task)")
    return f"same seed, same task (seeds {seeds}); 16 seeds chose {len(chosen)} tasks"


def _check_reference(env: Any, seed: int, episodes: int, notes: list[str]) -> str:
    for s in range(seed, seed + episodes):
        env.reset(seed=s)
        if _reference(env) is None:
            if s == seed:
                notes.append("reference_action() is None: the env has no reference solution")
                return "skipped"
            raise CheckFailed(f"reference_action() is None after reset(seed={s}) but not after "
                              f"reset(seed={seed})")

        def policy(s: int = s) -> str:
            action = _reference(env)
            if action is None:
                raise CheckFailed(f"reference_action() returned None before the episode "
                                  f"started with reset(seed={s}) ended")
            return action

        steps = list(_play(env, s, policy))
        total = sum(float(step[2]) for step in steps[1:])
        *_, terminated, truncated, info = steps[-1]
        outcome = info.get("outcome") if isinstance(info, dict) else None
        if not (terminated or truncated) or total <= 0 or outcome != "success":
            raise CheckFailed(f"following reference_action() after reset(seed={s}) gave reward "
                              f"{total:g} and outcome {outcome!r} after {len(steps) - 1} steps; "
                              "expected reward > 0 and 'success' (is the reference or the reward "
                              "wrong?)")
    return f"reference_action() solved {episodes} episode(s)"


def _check_replay(env: Any, seed: int, notes: list[str]) -> str:
    """The same reset and the same actions give the same observations and rewards, which
    `skyhub replay` (and every comparison of two runs) relies on: an episode of reference
    actions (random ones without a reference) and one of random actions, each played and
    then replayed on the same env. What may legitimately vary is declared in the env's
    `replay_ignore` (regexes)."""
    from skyhub.chat import Episode
    from skyhub.eval.replay import DIFFERS, UNREPLAYABLE, replay_record

    env.action_space.seed(seed)
    tasks = getattr(env.unwrapped, "tasks", ()) or ()
    replayed = []
    for k, kind in enumerate(("reference", "random")):
        s = seed + k
        task_id = tasks[s % len(tasks)].id if len(tasks) else None  # as the eval harness does
        obs, info = env.reset(seed=s, options=None if task_id is None else {"task_id": task_id})
        episode = Episode.start(env, obs, info)
        if kind == "reference":
            try:
                first = _reference(env)
            except Exception:  # the reference check reports a broken reference
                first = None
            kind = "reference" if first is not None else "random"
        for _ in range(MAX_STEPS):
            if kind == "random":
                action = env.action_space.sample()
            else:
                action, first = (first if first is not None else _reference(env) or ""), None
            episode.add(action, *env.step(action))
            if episode.done:
                break
        record = {"seed": s, "agent": "oracle" if kind == "reference" else kind,
                  **episode.to_dict()}
        result = replay_record(env, record)
        where = f"the {kind}-action episode (reset seed {s}, task {episode.task_id!r})"
        if result.status == DIFFERS:
            raise CheckFailed(f"replaying {where} on the same env differed from its first "
                              f"play at {result.difference}\n(the same reset and actions must "
                              "give the same observations and rewards: draw randomness from "
                              "self.np_random, or declare what legitimately varies, e.g. "
                              "timings, in the env's replay_ignore regexes)")
        if result.status == UNREPLAYABLE:
            notes.append(f"{where} could not be replayed: {result.reason}")
        else:
            replayed.append(f"{kind} ({result.steps} step{'s' if result.steps != 1 else ''})")
    if not replayed:
        return "skipped"
    return "replayed episodes were identical: " + ", ".join(replayed)


def _children() -> dict[int, str] | None:
    """Child processes of this process (pid -> "cmdline [state]"; state Z is an exited but
    unreaped one), read from /proc; None where there is no /proc."""
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    found = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            state, ppid = stat[stat.rfind(")") + 2:].split()[:2]
            if int(ppid) == os.getpid():
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").strip()
                name = cmd.decode(errors="replace") or stat[stat.find("(") + 1:stat.rfind(")")]
                found[int(pid)] = f"{name[:80]} [{state}]"
        except (OSError, ValueError):
            continue  # the process ended while we looked
    return found


def _containers() -> set[str] | None:
    """Docker containers this process made through skyhub's sandboxes (found by their labels);
    None where there is no Docker SDK or no daemon answering, so nothing can be said."""
    try:
        import docker

        from skyhub.sandbox.base import LABEL, LABEL_OWNER_PID

        client = docker.from_env(timeout=5)
        try:
            found = client.containers.list(all=True, ignore_removed=True, filters={"label": [
                f"{LABEL}=1", f"{LABEL_OWNER_PID}={os.getpid()}"]})
            return {c.id for c in found}
        finally:
            client.close()
    except Exception:
        return None


#: Daemon threads libraries start once per process and keep on purpose (tqdm's monitor).
PROCESS_WIDE_THREADS = ("tqdm_monitor",)


def process_wide(thread: threading.Thread) -> bool:
    """A daemon thread meant to outlive every env: one per process, started on first use
    (the SQLite watchdog: marked `skyhub_process_wide = True`), so not a leak of this env."""
    return thread.daemon and (getattr(thread, "skyhub_process_wide", False)
                              or thread.name in PROCESS_WIDE_THREADS)


def _check_cleanup(env: Any, baseline: tuple[set[threading.Thread], dict[int, str] | None,
                                             set[str] | None], notes: list[str]) -> str:
    before_threads, before_children, before_containers = baseline
    for call in ("first", "second"):
        try:
            env.close()
        except Exception as e:
            raise CheckFailed(f"the {call} close() raised {_describe(e)}") from None
    if before_children is None:
        notes.append("cannot list child processes here (no /proc); only threads were checked")
    for _ in range(40):  # up to 2 s of grace for threads and processes shutting down
        leaks = [f"thread {t.name!r}" for t in threading.enumerate()
                 if t not in before_threads and t.is_alive() and not process_wide(t)]
        leaks += [f"process {pid} {what}" for pid, what in (_children() or {}).items()
                  if pid not in (before_children or {}) and not what.endswith("[Z]")]
        if not leaks:
            break
        time.sleep(0.05)
    if before_containers is not None:
        for _ in range(50):  # removing a container takes a moment: up to 10 s more
            left = (_containers() or set()) - before_containers
            if not left:
                break
            time.sleep(0.2)
        leaks += [f"container {c[:12]}" for c in left]
    else:
        notes.append("no Docker daemon answered: containers were not checked")
    if leaks:
        raise CheckFailed("left behind after close(): " + ", ".join(leaks) + "; stop and join "
                          "(or remove) them in close()")
    return ("close() twice is fine; no thread, child process"
            + (" or container" if before_containers is not None else "") + " left behind")


__all__ = ["MALFORMED_ACTIONS", "MAX_STEPS", "CheckReport", "CheckResult", "check_env"]
