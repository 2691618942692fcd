"""Run an agent on an env for N episodes, concurrently, and record every episode.

    summary, episodes = skyhub.evaluate.run("toy-lookup", load_agent("oracle"), n=100,
                                            concurrency=8, out="runs/oracle")

Episodes run through a `VectorEnv` with `send`/`recv`, so a slow episode never holds the
others back; an agent with `parallel = True` (a model server) is called from one thread per
running episode, so `concurrency` requests are in flight. Episode k plays the env's task k
(cycling when `n` exceeds the task set, so `n = len(tasks)` covers every task once) with seed
`seed + k`: a run is reproducible whatever the concurrency, and two runs with the same env,
`n` and `seed` can be compared episode by episode (`skyhub eval compare`).

Episodes that end in an infrastructure error (the env's, or the agent's model server failing
after its retries: `AgentError`) are recorded with `infra_error` and left out of the mean,
never scored 0. With `out`, each episode is appended to `out/episodes.jsonl` as it finishes
(the format: docs/eval.md), so Ctrl-C or a crash keeps what finished and `resume=True`
runs only what is missing (and re-runs infra errors). `skyhub eval` is the command-line face
of this module; `skyhub.report` turns a run directory into a report.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skyhub.agents import Agent, Reply
from skyhub.chat import Episode
from skyhub.errors import InfraError, UsageError

# What must match for `resume` to continue a run rather than mix two different ones.
_RUN_KEYS = ("env_id", "env_kwargs", "agent", "seed")


@dataclass
class EvalEpisode(Episode):
    """An `Episode` with what an evaluation records about it (see `to_record`)."""

    index: int = 0
    seed: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0
    agent_s: float = 0.0
    error_source: str | None = None  # "env" or "agent" for an infra error

    def count(self, reply: str | Reply) -> str:
        """Add a reply's token counts; returns its text."""
        if isinstance(reply, str):
            return reply
        if reply.prompt_tokens is not None:
            self.prompt_tokens = (self.prompt_tokens or 0) + reply.prompt_tokens
        if reply.completion_tokens is not None:
            self.completion_tokens = (self.completion_tokens or 0) + reply.completion_tokens
        return reply.text

    def to_record(self, env_id: str, agent: str) -> dict[str, Any]:
        """One line of episodes.jsonl."""
        error = self.final_info.get("error") if self.infra_error else None
        return {"index": self.index, "seed": self.seed, "env_id": env_id, "agent": agent,
                **self.to_dict(), "error": None if error is None else str(error),
                "error_source": self.error_source if self.infra_error else None,
                "meta": self.meta, "final_info": self.final_info,
                "tokens": {"prompt": self.prompt_tokens, "completion": self.completion_tokens},
                "latency_s": round(self.latency_s, 4), "agent_s": round(self.agent_s, 4)}


@dataclass
class Summary:
    """What a run scored. `ci95` is accuracy's 95% interval (Wilson's, over the successes of
    the scored episodes); `mean_reward_ci95` is the mean reward's (normal approximation).
    Numbers that do not exist (no scored episode) are NaN here and null in `to_dict`, with
    `message` saying why."""

    env_id: str
    agent: str
    n: int
    mean_reward: float
    accuracy: float
    ci95: tuple[float, float]
    infra_errors: int
    mean_turns: float
    outcomes: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    requested: int = 0  # episodes asked for; n < requested when a run was interrupted
    complete: bool = True
    tokens: dict[str, int | None] = field(default_factory=dict)
    mean_reward_ci95: tuple[float, float] = (math.nan, math.nan)
    scored: int = 0
    successes: int = 0
    message: str | None = None  # why accuracy and mean reward are missing

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: tuples as lists, NaN and infinities as None."""
        d = asdict(self)
        d["ci95"] = list(self.ci95)
        d["mean_reward_ci95"] = list(self.mean_reward_ci95)
        return finite(d)


def finite(value: Any) -> Any:
    """`value` with every NaN or infinite float (at any depth) replaced by None, so that
    `json.dumps(..., allow_nan=False)` writes valid JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """`json.dumps` of `finite(value)` with `allow_nan=False`: every JSON file a run writes
    goes through here, so a NaN that slips past `finite` fails loudly instead of writing a
    file no JSON parser reads."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's score interval of a proportion (95% by default): it stays inside [0, 1] and
    behaves at 0% and 100%. NaN for n = 0."""
    if n <= 0:
        return (math.nan, math.nan)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_ci95(values: list[float]) -> tuple[float, float]:
    """95% interval of a mean by the normal approximation (sample sd); NaN below 2 values."""
    m = len(values)
    if m < 2:
        return (math.nan, math.nan)
    mean = sum(values) / m
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (m - 1))
    return (mean - 1.96 * sd / math.sqrt(m), mean + 1.96 * sd / math.sqrt(m))


def ci95(rewards: list[float]) -> tuple[float, float]:
    """95% interval of the mean: Wilson's score interval when every reward is 0 or 1 (it stays
    inside [0, 1] and behaves at 0% and 100%), else the normal approximation."""
    m = len(rewards)
    if m == 0:
        return (float("nan"), float("nan"))
    if all(r in (0.0, 1.0) for r in rewards):
        return wilson(int(sum(rewards)), m)
    return mean_ci95(rewards)


def no_score_message(records: list[dict[str, Any]]) -> str:
    """Why a run has no accuracy: no episode, or every one an infra error (with the first)."""
    if not records:
        return "no scored episode: no episode was recorded"
    first = next((r.get("error") for r in records if r.get("error")), None)
    return (f"no scored episode: every one of the {len(records)} episodes was an infra error"
            + (f" (first: {first})" if first else ""))


def summarise(env_id: str, agent: str, records: list[dict[str, Any]], seconds: float,
              requested: int | None = None) -> Summary:
    """Accuracy (the fraction of episodes without infra errors whose outcome is `success`)
    with its Wilson interval, and the mean reward over the same episodes with its own
    interval. `records` are episodes.jsonl lines."""
    scored = [r for r in records if not r["infra_error"]]
    rewards = [float(r["reward"]) for r in scored]
    m = len(rewards)
    wins = sum(r["outcome"] == "success" for r in scored)
    outcomes: dict[str, int] = {}
    for r in records:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    tokens = {k: sum(r["tokens"][k] for r in records if r.get("tokens", {}).get(k) is not None)
              if any(r.get("tokens", {}).get(k) is not None for r in records) else None
              for k in ("prompt", "completion")}
    requested = len(records) if requested is None else requested
    return Summary(
        env_id=env_id, agent=agent, n=len(records), mean_reward=sum(rewards) / m if m else math.nan,
        accuracy=wins / m if m else math.nan, ci95=wilson(wins, m), infra_errors=len(records) - m,
        mean_turns=(sum(r["turns"] for r in records) / len(records)) if records else 0.0,
        outcomes=outcomes, seconds=seconds, requested=requested,
        complete=len(records) >= requested, tokens=tokens, mean_reward_ci95=mean_ci95(rewards),
        scored=m, successes=wins, message=None if m else no_score_message(records))


def run(env_id: str, agent: Agent, *, n: int | None = None, concurrency: int = 8,
        seed: int = 0, env_kwargs: dict[str, Any] | None = None, max_steps: int = 100,
        on_episode: Callable[[EvalEpisode], None] | None = None,
        out: str | Path | None = None, resume: bool = False,
        on_plan: Callable[[int], None] | None = None,
        ) -> tuple[Summary, list[EvalEpisode]]:
    """Run `n` episodes of `env_id` with `agent` (default: each of the env's tasks once),
    `concurrency` at a time.

    `max_steps` guards against an env that never ends: such an episode is cut and counted as
    an infra error. `on_plan` gets the number of episodes about to run (fewer than `n` when
    resuming), `on_episode` each episode as it finishes (progress bars, logs).
    With `out`, episodes are appended to `out/episodes.jsonl` as they finish and
    `summary.json` is written at the end, also when the run stops early; `resume=True`
    continues the run found there (missing episodes and infra errors only). The summary then
    covers the whole run, the returned episodes only those run now. A `UsageError` (a
    rejected API key, a run directory that holds another run) stops the run; what finished
    is kept.
    """
    from skyhub.vector import make_vec

    if (n is not None and n < 1) or concurrency < 1:
        raise UsageError(f"n and concurrency must be >= 1 (got n={n}, concurrency={concurrency})")
    env_kwargs = dict(env_kwargs or {})
    width = concurrency if n is None else min(concurrency, n)
    # The envs come first: missing data or a bad kwarg fails before a run directory is made.
    with make_vec(env_id, width, autoreset_mode="disabled", **env_kwargs) as venv:
        tasks = venv.get_attr("tasks", env_ids=[0])[0] or []
        if n is None:
            if not len(tasks):
                raise UsageError(f"{env_id} has no fixed task set (it generates tasks): pass "
                                 "--n to say how many episodes to run")
            n = len(tasks)
        run_dir = RunDir(out) if out is not None else None
        kept: list[dict[str, Any]] = []
        if run_dir is not None:
            config = {"env_id": env_id, "env_kwargs": env_kwargs, "agent": agent.name, "n": n,
                      "seed": seed}
            kept = run_dir.open(config, resume=resume)
        done = {r["index"] for r in kept}
        todo = [k for k in range(n) if k not in done]
        if on_plan is not None:
            on_plan(len(todo))
        t0 = time.perf_counter()
        new: list[EvalEpisode] = []
        new_records: list[dict[str, Any]] = []

        def finished(ep: EvalEpisode) -> None:
            new.append(ep)
            new_records.append(ep.to_record(env_id, agent.name))
            if run_dir is not None:
                run_dir.append(new_records[-1])
            if on_episode is not None:
                on_episode(ep)

        def summary() -> Summary:
            records = sorted(kept + new_records, key=lambda r: r["index"])
            s = summarise(env_id, agent.name, records, time.perf_counter() - t0,
                          requested=len(records) + len(todo) - len(new))
            if run_dir is not None:
                run_dir.write_summary(s)
            return s

        try:
            if todo:
                _EvalLoop(venv, tasks, agent, seed, max_steps, finished).run(todo)
        except BaseException:  # Ctrl-C, a crash: the summary says what finished
            if run_dir is not None:
                summary()
            raise
    new.sort(key=lambda e: e.index)
    return summary(), new


class _EvalLoop:
    """The event loop of one evaluation: env results from the VectorEnv, agent replies from
    a thread pool (parallel agents) or inline (fast local agents)."""

    def __init__(self, venv: Any, tasks: Any, agent: Agent, seed: int, max_steps: int,
                 finished: Callable[[EvalEpisode], None]) -> None:
        self.venv, self.tasks, self.agent = venv, tasks, agent
        agent.use_stop_strings(tuple(venv.get_attr("stop_strings", env_ids=[0])[0] or ()))
        self.seed, self.max_steps, self.finished = seed, max_steps, finished
        self.replies: queue.SimpleQueue[tuple[int, Any, float]] = queue.SimpleQueue()
        self.running: dict[int, EvalEpisode] = {}  # env slot -> its episode
        self.fresh: dict[int, tuple[int, dict[str, Any], float]] = {}  # slot -> (index, task
        # meta, start time) while its reset is in flight
        self.action: dict[int, str] = {}  # slot -> the action in flight
        self.thinking = 0  # agent calls pending in the pool

    def run(self, todo: list[int]) -> None:
        width = min(self.venv.num_envs, len(todo))
        queue_ = list(reversed(todo))
        pool = _DaemonPool(width) if self.agent.parallel else None
        for slot in range(width):
            self._start(slot, queue_.pop())
        in_env, remaining = width, len(todo)  # envs with a reset/step in flight; episodes left
        try:
            while remaining:
                if in_env:  # env results (an agent reply wakes this up: see _think)
                    ids, *results = self.venv.recv()
                    in_env -= len(ids)
                    for i, o, r, te, tr, info in zip(ids.tolist(), *results, strict=True):
                        ep = self._observe(i, o, float(r), bool(te), bool(tr), info)
                        if ep.done:
                            remaining -= 1
                            in_env += self._next(i, ep, queue_)
                        elif pool is not None:
                            self.thinking += 1
                            pool.submit(self._think, i, ep.messages())
                        else:
                            t = time.perf_counter()
                            reply = self._act(i, ep.messages())
                            in_env += self._reply(i, reply, time.perf_counter() - t, queue_)
                            remaining -= int(self.running.get(i) is not ep)
                block = not in_env  # nothing else to wait for
                while self.thinking:
                    try:
                        i, reply, dt = self.replies.get(timeout=None if block else 0)
                    except queue.Empty:
                        break
                    block, self.thinking = False, self.thinking - 1
                    ep = self.running[i]
                    in_env += self._reply(i, reply, dt, queue_)
                    remaining -= int(self.running.get(i) is not ep)
        finally:
            if pool is not None:
                pool.shutdown()

    # ------------------------------------------------------------------ episodes
    def _start(self, slot: int, k: int) -> None:
        task = self.tasks[k % len(self.tasks)] if len(self.tasks) else None
        options = {"task_id": task.id} if task is not None else None
        self.fresh[slot] = (k, dict(task.meta) if task is not None else {}, time.perf_counter())
        self.venv.async_reset([slot], seed=[self.seed + k], options=[options])

    def _observe(self, i: int, obs: str, reward: float, term: bool, trunc: bool,
                 info: dict[str, Any]) -> EvalEpisode:
        """Record an env result on slot i's episode (a new one after a reset)."""
        from skyhub.vector import infra_error_info

        if i in self.fresh:  # the first observation of a new episode
            k, meta, t0 = self.fresh.pop(i)
            # the prompt may change per episode (data that carries its own chat): read it
            # after this reset, from the slot just received (so not in flight)
            prompt = self.venv.get_attr("system_prompt", env_ids=[i])[0]
            ep = EvalEpisode(info.get("task_id"), prompt, obs, index=k,
                             seed=self.seed + k, meta=meta, latency_s=t0)
            self.running[i] = ep
            if info.get("infra_error"):
                ep.error_source = "env"
                ep.add("", "", 0.0, False, True, info)
            return ep
        ep = self.running[i]
        ep.add(self.action.pop(i), obs, reward, term, trunc, info)
        if info.get("infra_error"):
            ep.error_source = "env"
        if not ep.done and len(ep.actions) >= self.max_steps:
            ep.error_source = "env"
            ep.add("", "", 0.0, False, True, infra_error_info(
                f"episode cut after max_steps={self.max_steps}", ep.task_id, self.max_steps))
        return ep

    def _next(self, i: int, ep: EvalEpisode, queue_: list[int]) -> int:
        """Slot i's episode is over: record it and start the next; returns envs put in
        flight (0 or 1)."""
        ep.latency_s = time.perf_counter() - ep.latency_s
        self.running.pop(i, None)
        self.finished(ep)
        if queue_:
            self._start(i, queue_.pop())
            return 1
        return 0

    # ------------------------------------------------------------------ the agent
    def _act(self, i: int, messages: list[dict[str, str]]) -> Any:
        """The agent's reply, or the InfraError it raised (recorded, not raised)."""
        try:
            return self.agent.act(messages, lambda: self.venv.call(
                "reference_action", env_ids=[i])[0])
        except InfraError as e:
            return e

    def _think(self, i: int, messages: list[dict[str, str]]) -> None:
        t = time.perf_counter()
        try:
            reply = self._act(i, messages)
        except BaseException as e:  # raised again by the loop's thread
            reply = e
        self.replies.put((i, reply, time.perf_counter() - t))
        self.venv.wake()

    def _reply(self, i: int, reply: Any, seconds: float, queue_: list[int]) -> int:
        """Send the agent's action to slot i (returns 1), or end the episode on an agent
        infra error (returns what `_next` does). Other exceptions stop the run."""
        from skyhub.vector import infra_error_info

        ep = self.running[i]
        ep.agent_s += seconds
        if isinstance(reply, InfraError):
            ep.error_source = "agent"
            ep.add("", "", 0.0, False, True, infra_error_info(
                f"agent failed: {reply}", ep.task_id, len(ep.actions)))
            return self._next(i, ep, queue_)
        if isinstance(reply, BaseException):
            raise reply
        self.action[i] = ep.count(reply)
        self.venv.send([self.action[i]], [i])
        return 1


class _DaemonPool:
    """Threads for agent calls. Daemon threads, unlike ThreadPoolExecutor's: after Ctrl-C the
    process exits at once instead of waiting out the model requests still in flight."""

    def __init__(self, size: int) -> None:
        self.jobs: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]] | None] = (
            queue.SimpleQueue())
        self.threads = [threading.Thread(target=self._work, daemon=True,
                                         name=f"skyhub-agent-{k}") for k in range(size)]
        for t in self.threads:
            t.start()

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        self.jobs.put((fn, args))

    def _work(self) -> None:
        while (job := self.jobs.get()) is not None:
            job[0](*job[1])

    def shutdown(self) -> None:
        """Stop the threads once their current call returns (jobs not started are dropped)."""
        while True:
            try:
                self.jobs.get_nowait()
            except queue.Empty:
                break
        for _ in self.threads:
            self.jobs.put(None)


class RunDir:
    """An eval run directory: `run.json` (what was run), `episodes.jsonl` (appended as
    episodes finish) and `summary.json`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def open(self, config: dict[str, Any], *, resume: bool) -> list[dict[str, Any]]:
        """Start or continue a run; returns the episodes kept from an earlier attempt."""
        episodes = self.path / "episodes.jsonl"
        kept: list[dict[str, Any]] = []
        if resume and (self.path / "run.json").is_file():
            before = json.loads((self.path / "run.json").read_text())
            diff = [k for k in _RUN_KEYS if json.dumps(before.get(k), sort_keys=True, default=str)
                    != json.dumps(config.get(k), sort_keys=True, default=str)]
            if diff:
                raise UsageError(
                    f"--resume: {self.path} holds a different run ("
                    + "; ".join(f"{k}: {before.get(k)!r} there, {config.get(k)!r} now"
                                for k in diff)
                    + "). Resume with the same env, kwargs, --agent and --seed, or pick a new "
                    "--out directory")
            kept = [r for r in load_records(self.path) if not r["infra_error"]]
        elif resume:
            raise UsageError(f"--resume: {self.path} holds no run (no run.json); drop --resume "
                             "to start one there")
        elif episodes.is_file() and episodes.stat().st_size:
            raise UsageError(f"{episodes} already holds episodes: pass --resume to continue that "
                             "run, or choose another --out directory")
        self.path.mkdir(parents=True, exist_ok=True)
        from skyhub import __version__

        record = {**config, "skyhub_version": __version__,
                  "started": datetime.now(UTC).isoformat(timespec="seconds")}
        (self.path / "run.json").write_text(dumps(record, indent=2, default=str) + "\n")
        self._file = episodes.open("a", encoding="utf-8")
        return kept

    def append(self, record: dict[str, Any]) -> None:
        self._file.write(dumps(record, default=str, ensure_ascii=False) + "\n")
        self._file.flush()

    def write_summary(self, summary: Summary) -> None:
        self._file.close()
        (self.path / "summary.json").write_text(dumps(summary.to_dict(), indent=2) + "\n")


def load_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """The episodes of a run directory, sorted by index. A resumed run appends a new line for
    an episode it re-ran (an infra error retried): the last line for an index wins. A torn
    last line (a crash mid-write) is skipped."""
    path = Path(run_dir) / "episodes.jsonl"
    if not path.is_file():
        from skyhub.errors import DataNotFound

        raise DataNotFound(f"{path} not found: is {run_dir} the --out directory of a "
                           "`skyhub eval` run?")
    by_index: dict[int, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "index" in rec:
            by_index[int(rec["index"])] = rec
    return [by_index[k] for k in sorted(by_index)]
