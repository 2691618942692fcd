"""Replay: play recorded episodes again on a fresh env and say whether the env still answers
the same (`skyhub replay EPISODES.jsonl`; `skyhub check` uses it to flag nondeterminism).

    from skyhub.eval.replay import replay_file
    summary = replay_file("runs/oracle/episodes.jsonl")
    print(summary.counts)          # {"identical": 40, "differs": 0, "unreplayable": 0}

A record is one line of an eval run's `episodes.jsonl` (docs/eval.md), or an episode a
training run saved in the same schema. Each is reset as it was played, `reset(seed=seed,
options={"task_id": task_id})` (the task id only where the env has a task set, as the eval
harness and the trainer's rollout do), and its recorded actions are sent one by one. What is
compared, in order: the system prompt, the task id, the first observation, then per step the
observation, the reward and whether the episode ended (and how); finally the outcome. The
first difference is reported with a diff; infos are not compared (they hold log paths and
timings by design).

The oracle agent's actions are the env's `reference_action()`, which may hold per-episode
state (Harbor's oracle action names a one-time token), so for records of the `oracle` agent
the replay asks the replaying env for its reference action at each step, as the harness did,
and notes (without failing) where it is not the recorded text.

Envs whose observations legitimately vary (timings, ports, temp paths) declare the parts to
ignore in `replay_ignore`, a tuple of regexes: every match is replaced by `<ignored>` in
both the recorded and the replayed text before they are compared.

What the replay needs and where it finds it: `env_id`, `seed`, `task_id`, `messages`,
`rewards` from the record; the env's kwargs from the record's `env_kwargs`, else from
`run.json` beside the file (an eval run directory), else from the caller. A record that lacks
any of them, or that ended in an infra error (its actions are not a whole play), is counted
as "could not replay", with the reason.

Over ~400 lines, for a reason: one job, a replay: what is compared and how a difference is
reported are one procedure, read top to bottom.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyhub.errors import DataNotFound, SkyhubError
from skyhub.text_compare import MASK, ignore_patterns, mask, text_diff

if TYPE_CHECKING:
    from rich.table import Table

IDENTICAL, DIFFERS, UNREPLAYABLE = "identical", "differs", "unreplayable"


@dataclass
class Difference:
    """The first place where a replay left its recording: `where` ("reset", "step 3"),
    `what` ("observation", "reward", "end", ...) and the two values."""

    where: str
    what: str
    recorded: Any
    replayed: Any

    def __str__(self) -> str:
        head = f"{self.where}: {self.what} differs"
        if isinstance(self.recorded, str) and isinstance(self.replayed, str):
            return f"{head}\n{text_diff(self.recorded, self.replayed)}"
        return f"{head}: recorded {self.recorded!r}, replayed {self.replayed!r}"

    def to_dict(self) -> dict[str, Any]:
        return {"where": self.where, "what": self.what, "recorded": self.recorded,
                "replayed": self.replayed, "diff": str(self)}


@dataclass
class ReplayResult:
    """One episode's replay: `status` is `identical`, `differs` (with `difference`) or
    `unreplayable` (with `reason`); `steps` is how many recorded actions were sent."""

    index: int | None
    task_id: str | None
    status: str
    steps: int = 0
    difference: Difference | None = None
    reason: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def detail(self) -> str:
        return str(self.difference) if self.difference is not None else self.reason

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "task_id": self.task_id, "status": self.status,
                "steps": self.steps, "reason": self.reason or None, "notes": self.notes,
                "difference": None if self.difference is None else self.difference.to_dict()}


@dataclass
class ReplaySummary:
    """Every replayed episode's result; `ok` when none differs."""

    source: str
    results: list[ReplayResult] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(r.status == s for r in self.results)
                for s in (IDENTICAL, DIFFERS, UNREPLAYABLE)}

    @property
    def ok(self) -> bool:
        return not self.counts[DIFFERS]

    def line(self) -> str:
        c = self.counts
        return (f"{c[IDENTICAL]} identical, {c[DIFFERS]} differ, {c[UNREPLAYABLE]} could not "
                f"replay (of {len(self.results)} episodes)")

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, **self.counts, "episodes": len(self.results),
                "results": [r.to_dict() for r in self.results]}

    def to_table(self, *, all_rows: bool = False, caption: bool = True) -> Table:
        """A rich table of the episodes that differ or could not replay (every episode with
        `all_rows`), the summary line as its caption (unless `caption=False`)."""
        from rich.table import Table
        from rich.text import Text

        style = {IDENTICAL: "green", DIFFERS: "bold red", UNREPLAYABLE: "yellow"}
        table = Table(title=f"skyhub replay {self.source}", title_justify="left")
        for col in ("episode", "task", "result", "steps"):
            table.add_column(col, no_wrap=True)
        table.add_column("first difference / why not", overflow="fold")
        for r in self.results:
            if all_rows or r.status != IDENTICAL:
                detail = Text(r.detail)
                for note in r.notes:
                    detail.append(("\n" if detail else "") + f"note: {note}", style="yellow")
                table.add_row("" if r.index is None else str(r.index), Text(str(r.task_id)),
                              Text(r.status, style[r.status]), str(r.steps), detail)
        table.caption = self.line() if caption else None
        return table


class _Unreplayable(SkyhubError):
    """A record without what a replay needs."""


def recorded_turns(record: dict[str, Any]) -> tuple[str | None, str, list[Any], list[str]]:
    """`(system prompt, first observation, actions, observations)` of a record, read back from
    its `messages` (`skyhub.chat.to_messages` drops an empty observation, so an assistant
    message followed by another assistant message, or by nothing, had an empty one). A tool
    turn's action is `{"content", "tool_calls"}` (as the harness sent it) and its
    observation the text of its `role: "tool"` messages (`tool_results_text`)."""
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _Unreplayable("the record has no messages")
    i, system = 0, None
    if messages[0].get("role") == "system":
        system, i = messages[0].get("content"), 1
    if i >= len(messages) or messages[i].get("role") != "user":
        raise _Unreplayable("the record's messages do not start with the first observation")
    first, i = str(messages[i].get("content", "")), i + 1
    actions: list[Any] = []
    observations: list[str] = []
    while i < len(messages):
        if messages[i].get("role") != "assistant":
            raise _Unreplayable(f"message {i} of the record should be the agent's (assistant) "
                                f"but is {messages[i].get('role')!r}")
        calls = messages[i].get("tool_calls")
        if calls:
            actions.append({"content": str(messages[i].get("content") or ""),
                            "tool_calls": list(calls)})
            i += 1
            results = []
            while i < len(messages) and messages[i].get("role") == "tool":
                m = messages[i]
                results.append({"call_id": m.get("tool_call_id", ""), "name": m.get("name", ""),
                                "content": m.get("content", "")})
                i += 1
            observations.append(tool_results_text(results))
            continue
        actions.append(str(messages[i].get("content", "")))
        i += 1
        if i < len(messages) and messages[i].get("role") != "assistant":
            observations.append(str(messages[i].get("content", "")))
            i += 1
        else:
            observations.append("")
    return system, first, actions, observations


def tool_results_text(results: Sequence[dict[str, Any]] | None) -> str:
    """A tool turn's results as one text to compare: `[name call_id] content` per call."""
    return "\n\n".join(f"[{r.get('name', '')} {r.get('call_id', '')}] {r.get('content', '')}"
                       for r in results or ())


def _same_reward(recorded: Any, replayed: float) -> bool:
    if recorded is None:  # the run wrote a NaN or infinite reward as null (json_safe)
        return not math.isfinite(replayed)
    return float(recorded) == float(replayed)


def replay_record(env: Any, record: dict[str, Any], *,
                  ignore: Sequence[re.Pattern[str]] | None = None) -> ReplayResult:
    """Replay one record on `env` (already made with the record's env id and kwargs) and
    compare; `ignore` defaults to the env's `replay_ignore`. Exceptions from the env become
    an `unreplayable` result that names them, never an exception."""
    index, task_id = record.get("index"), record.get("task_id")
    result = ReplayResult(index if isinstance(index, int) else None, task_id, UNREPLAYABLE)
    patterns = ignore_patterns(env) if ignore is None else list(ignore)
    try:
        if record.get("infra_error"):
            raise _Unreplayable(f"the recorded episode ended in an infra error "
                                f"({record.get('error_source') or 'env'}: "
                                f"{record.get('error') or 'no message'}); its actions are not "
                                "a whole play")
        system, first, actions, observations = recorded_turns(record)
        rewards = record.get("rewards")
        if not isinstance(rewards, list) or len(rewards) != len(actions):
            raise _Unreplayable(f"the record has {len(actions)} actions but "
                                f"{'no' if not isinstance(rewards, list) else len(rewards)} "
                                "per-step rewards")
        if "seed" not in record:
            raise _Unreplayable("the record has no seed (the env's reset seed; null when the "
                                "episode's reset was not seeded)")
        diff = _compare(env, record, patterns, system, first, actions, observations, rewards,
                        result)
    except _Unreplayable as e:
        result.reason = str(e)
        return result
    except Exception as e:  # the env failed on replay: say how, keep going
        result.reason = (f"the env raised {type(e).__name__}: {e} on replay (after "
                         f"{result.steps} of the recorded steps)")
        return result
    result.status, result.difference = (DIFFERS, diff) if diff is not None else (IDENTICAL, None)
    return result


def _compare(env: Any, record: dict[str, Any], patterns: Sequence[re.Pattern[str]],
             system: str | None, first: str, actions: list[Any], observations: list[str],
             rewards: list[Any], result: ReplayResult) -> Difference | None:
    def differs(where: str, what: str, recorded: Any, replayed: Any) -> Difference | None:
        if isinstance(recorded, str) or isinstance(replayed, str):
            if mask(recorded, patterns) == mask(replayed, patterns):
                return None
            return Difference(where, what, mask(recorded, patterns), mask(replayed, patterns))
        return None if recorded == replayed else Difference(where, what, recorded, replayed)

    task_id = record.get("task_id")
    options = {"task_id": task_id} if task_id is not None and len(
        getattr(env.unwrapped, "tasks", ()) or ()) else None
    seed = record["seed"]
    obs, info = env.reset(seed=None if seed is None else int(seed), options=options)
    if info.get("infra_error"):
        raise _Unreplayable(f"the env reported an infra error at reset on replay: "
                            f"{info.get('error', '')}")
    diff = (differs("reset", "system prompt", system or "", getattr(env, "system_prompt", None)
                    or "")
            or differs("reset", "task id", task_id, info.get("task_id"))
            or differs("reset", "first observation", first, obs))
    if diff is not None:
        return diff
    oracle = record.get("agent") == "oracle"
    ended = False
    for k, action in enumerate(actions, 1):
        if ended:
            return Difference(f"step {k - 1}", "end", "the episode went on",
                              f"the replay ended after {k - 1} of {len(actions)} steps")
        tools = not isinstance(action, str)
        if oracle:
            action = _oracle_action(env, action, k, patterns, result)
        obs, reward, terminated, truncated, info = env.step(action)
        if tools:  # a tool turn: its results are what the agent saw
            obs = tool_results_text(info.get("tool_results"))
        result.steps = k
        if info.get("infra_error"):
            raise _Unreplayable(f"the env reported an infra error at step {k} on replay: "
                                f"{info.get('error', '')}")
        ended = bool(terminated or truncated)
        last = k == len(actions)
        diff = differs(f"step {k}", "observation", observations[k - 1], obs)
        if diff is not None:
            return diff
        if not _same_reward(rewards[k - 1], float(reward)):
            return Difference(f"step {k}", "reward", rewards[k - 1], float(reward))
        if last:
            recorded_end = (bool(record.get("terminated")), bool(record.get("truncated")))
            if recorded_end != (bool(terminated), bool(truncated)):
                return Difference(f"step {k}", "end (terminated, truncated)", recorded_end,
                                  (bool(terminated), bool(truncated)))
    if ended and "outcome" in record:
        return differs(f"step {len(actions)}", "outcome", record["outcome"],
                       info.get("outcome"))
    return None


def _oracle_action(env: Any, action: Any, k: int, patterns: Sequence[re.Pattern[str]],
                   result: ReplayResult) -> Any:
    """What the oracle sends at step k on replay: the env's reference now (its tool calls
    for a recorded tool turn), with a note where it is not the recorded action."""
    from skyhub.tools import to_plain

    tools = not isinstance(action, str)
    name = "reference_tool_calls" if tools else "reference_action"
    method = getattr(env, name, None) or getattr(env.unwrapped, name)
    reference = method()
    if reference is None or (tools and not reference):
        return action
    if tools:
        reference = to_plain(list(reference))
        same = json.dumps(reference["tool_calls"]) == json.dumps(action["tool_calls"])
    else:
        same = mask(reference, patterns) == mask(action, patterns)
    if not same:
        result.notes.append(f"step {k}: the env's reference action is not the recorded one "
                            "(sent the reference, as the oracle does)")
    return reference


# ------------------------------------------------------------------ files of records
def load_episodes(path: str | Path) -> list[dict[str, Any]]:
    """The records of an episodes JSONL file (or of an eval run directory's), as
    `skyhub.eval.rundir.read_episodes` reads them: by `index`, the last line for an index
    winning (a resumed run re-ran it), a torn line skipped."""
    from skyhub.eval.rundir import read_episodes

    path = Path(path)
    if path.is_dir():
        path = path / "episodes.jsonl"
    if not path.is_file():
        raise DataNotFound(f"{path} not found: give an episodes JSONL file (what `skyhub eval "
                           "--out DIR` writes as DIR/episodes.jsonl, or a training run's "
                           "saved episodes) or its directory")
    return read_episodes(path)


def _run_config(path: Path) -> dict[str, Any]:
    from skyhub.eval.rundir import read_json

    return read_json((path if path.is_dir() else path.parent) / "run.json")


def replay_file(path: str | Path, *, env_kwargs: dict[str, Any] | None = None,
                ignore: Sequence[str] = (), indices: Sequence[int] | None = None,
                on_result: Callable[[ReplayResult], None] | None = None) -> ReplaySummary:
    """Replay every record of an episodes file (or those whose `index` is in `indices`).

    One env is made per (env id, kwargs) the records name, from the record's `env_kwargs`,
    else `run.json` beside the file, with `env_kwargs` laid over them (to replay where the
    recording's kwargs cannot apply, e.g. another data path); it is closed at the end.
    `ignore` adds regexes to every env's `replay_ignore`. An env that cannot be made leaves
    its records unreplayable with the error as the reason.
    """
    from skyhub import make
    from skyhub.errors import SkyhubError

    path = Path(path)
    records = load_episodes(path)
    if indices is not None:
        wanted = set(indices)
        records = [r for r in records if r.get("index") in wanted]
    config = _run_config(path)
    summary = ReplaySummary(str(path))
    envs: dict[str, Any] = {}  # json of (env id, kwargs) -> env, or the error making it
    try:
        for rec in records:
            env_id = rec.get("env_id") or config.get("env_id")
            kwargs = rec.get("env_kwargs")
            if kwargs is None and config.get("env_id") == env_id:
                kwargs = config.get("env_kwargs")
            result = ReplayResult(rec.get("index"), rec.get("task_id"), UNREPLAYABLE)
            if not env_id:
                result.reason = "the record names no env_id (and there is no run.json beside it)"
            elif kwargs is None and env_kwargs is None:
                result.reason = ("the env's kwargs were not recorded (no env_kwargs in the "
                                 "record, no run.json beside the file): pass them, "
                                 "`skyhub replay FILE key=value ...`, or --default-kwargs "
                                 "if the episodes ran with the env's registered ones")
            else:
                kwargs = {**(kwargs or {}), **(env_kwargs or {})}
                key = json.dumps([env_id, kwargs], sort_keys=True, default=str)
                if key not in envs:
                    try:
                        envs[key] = make(env_id, **kwargs)
                    except (SkyhubError, TypeError, ValueError) as e:
                        envs[key] = e
                env = envs[key]
                if isinstance(env, Exception):
                    result.reason = f"skyhub.make({env_id!r}) failed: {type(env).__name__}: {env}"
                else:
                    result = replay_record(env, rec, ignore=ignore_patterns(env, ignore))
            summary.results.append(result)
            if on_result is not None:
                on_result(result)
    finally:
        for env in envs.values():
            if not isinstance(env, Exception):
                with contextlib.suppress(Exception):
                    env.close()
    return summary


__all__ = ["DIFFERS", "IDENTICAL", "MASK", "UNREPLAYABLE", "Difference", "ReplayResult",
           "ReplaySummary", "ignore_patterns", "load_episodes", "mask", "recorded_turns",
           "replay_file", "replay_record", "text_diff"]
