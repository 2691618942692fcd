"""The eval harness: run an agent on an env for N episodes, concurrently, and record every
episode.

    from skyhub.eval import harness
    from skyhub.eval.agents import load_agent
    summary, episodes = harness.run("toy-lookup", load_agent("oracle"), n=100,
                                    concurrency=8, out="runs/oracle")

Episodes run through a `VectorEnv` with `send`/`recv`, so a slow episode never holds the
others back; an agent with `parallel = True` (a model server) is called from one thread per
running episode, so `concurrency` requests are in flight.

Which tasks: every task of the env once by default; with `n` smaller than the task set, a
seeded sample of `n` spread over the env's slices (`TextEnv.slice_key`, e.g. the databases:
`skyhub.task.spread_sample`); with `n` larger, the tasks cycle. With `attempts` K, each task
is played K times (pass@k in the summary). Episode k is attempt k % K of the sample's task
k // K, reset with seed `seed + k`: a run is reproducible whatever the concurrency, and two
runs with the same env, `n`, `attempts` and `seed` can be compared episode by episode
(`skyhub eval compare`).

Episodes that end in an infrastructure error (the env's, or the agent's model server failing
after its retries: `AgentError`) are recorded with `infra_error` and left out of the mean,
never scored 0. With `out`, each episode is appended to `out/episodes.jsonl` as it finishes
(`skyhub.eval.rundir`; the format: docs/eval.md), so Ctrl-C or a crash keeps what finished
and `resume=True` runs only what is missing (and re-runs infra errors). The figures are
`skyhub.eval.metrics`'. `skyhub eval` is the command-line face of this module;
`skyhub.eval.report` turns a run directory into a report.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyhub.chat import Episode, infra_error_info
from skyhub.errors import InfraError, UsageError
from skyhub.eval.agent import Agent, Reply
from skyhub.eval.metrics import Summary, summarise
from skyhub.eval.rundir import RunDir, load_records

if TYPE_CHECKING:
    from skyhub.vector.driver import Post


def run(env_id: str, agent: Agent, *, n: int | None = None, concurrency: int = 8,
        seed: int = 0, env_kwargs: dict[str, Any] | None = None, max_steps: int = 100,
        on_episode: Callable[[Episode], None] | None = None,
        out: str | Path | None = None, resume: bool = False,
        on_plan: Callable[[int], None] | None = None, attempts: int = 1,
        on_sample: Callable[[str], None] | None = None, overwrite: bool = False,
        rerun_errors: Collection[str] | None = None, tools: bool | None = None,
        ) -> tuple[Summary, list[Episode]]:
    """Run `n` tasks of `env_id` (default: each of the env's tasks once; a spread sample
    when `n` is smaller: see the module docstring), `attempts` episodes each, with `agent`,
    `concurrency` episodes at a time.

    `max_steps` guards against an env that never ends: such an episode is cut and counted as
    an infra error. `on_plan` gets the number of episodes about to run (fewer than `n` when
    resuming), `on_episode` each episode as it finishes (progress bars, logs), `on_sample`
    a sentence saying which tasks run (a sample, or all of them).
    With `out`, episodes are appended to `out/episodes.jsonl` as they finish and
    `summary.json` is written at the end, also when the run stops early; `resume=True`
    continues the run found there (missing episodes and infra errors only), `overwrite=True`
    deletes what a run wrote there first; `rerun_errors` (with `resume`) re-runs only the
    infra errors of those types (`skyhub.eval.rundir.error_type`). `tools` says whether the
    agent acts with native tool calls (`skyhub.eval.tool_protocol`: None, the default, plays
    them where the env declares tools and the agent speaks them); the protocol used is in
    run.json and the summary ("tools" or "text"). The summary then covers
    the whole run, the returned episodes only those run now. A `UsageError` (a rejected API
    key, an endpoint that never answers, a run directory that holds another run) stops the
    run; what finished is kept, and a new run that recorded nothing leaves no run directory
    behind.
    """
    from skyhub.vector import make_vec

    if (n is not None and n < 1) or concurrency < 1 or attempts < 1:
        raise UsageError(f"n, attempts and concurrency must be >= 1 (got n={n}, "
                         f"attempts={attempts}, concurrency={concurrency})")
    from skyhub.eval.tool_protocol import open_envs

    env_kwargs = dict(env_kwargs or {})
    width = concurrency if n is None else min(concurrency, n * attempts)
    # The envs come first: missing data or a bad kwarg fails before a run directory is made.
    venv, env_kwargs, protocol = open_envs(env_id, env_kwargs, agent, tools,
                                           lambda kw: make_vec(env_id, width,
                                                               autoreset_mode="disabled", **kw))
    with venv:
        tasks = venv.get_attr("tasks", env_ids=[0])[0] or []
        order, sample = task_order(env_id, tasks, n, seed,
                                    venv.get_attr("slice_key", env_ids=[0])[0])
        if on_sample is not None:
            on_sample(sample["says"])
        total = len(order) * attempts
        run_dir = RunDir(out) if out is not None else None
        kept: list[dict[str, Any]] = []
        if run_dir is not None:
            config = {"env_id": env_id, "env_kwargs": env_kwargs, "agent": agent.name,
                      "agent_settings": agent.settings(), "sampling": agent.sampling(),
                      "n": len(order), "protocol": protocol,
                      "attempts": attempts, "seed": seed, "sample": sample}
            kept = run_dir.open(config, resume=resume, overwrite=overwrite,
                                rerun_errors=rerun_errors)
        done = {r["index"] for r in kept}
        todo = [k for k in range(total) if k not in done]
        if on_plan is not None:
            on_plan(len(todo))
        t0 = time.perf_counter()
        new: list[Episode] = []
        new_records: list[dict[str, Any]] = []

        def finished(ep: Episode) -> None:
            new.append(ep)
            new_records.append({**ep.to_record(env_id, agent.name, env_kwargs),
                                "finished_at": datetime.now(UTC).isoformat()})
            if run_dir is not None:
                run_dir.append(new_records[-1])
            if on_episode is not None:
                on_episode(ep)

        def summary() -> Summary:
            records = sorted(kept + new_records, key=lambda r: r["index"])
            s = summarise(env_id, agent.name, records, time.perf_counter() - t0,
                          requested=len(records) + len(todo) - len(new), attempts=attempts)
            s.sampling = agent.sampling()
            s.protocol = "text" if agent.tools_rejected else protocol
            if run_dir is not None:
                run_dir.write_summary(s)
            return s

        try:
            if todo:
                plan = [(order[k // attempts], k // attempts, k % attempts)
                        for k in range(total)]
                loop = _HarnessLoop if getattr(agent, "plays_episodes", False) else _EvalLoop
                loop(venv, tasks, plan, agent, seed, max_steps, finished, protocol).run(todo)
        except BaseException:  # Ctrl-C, a crash: the summary says what finished
            if run_dir is not None and not run_dir.discard_if_empty():
                summary()
            raise
    new.sort(key=lambda e: e.index)
    return summary(), new


def task_order(env_id: str, tasks: Any, n: int | None, seed: int, slice_key: str | None
                ) -> tuple[list[int], dict[str, Any]]:
    """The run's tasks as indices into `tasks` (positions, for an env that generates its
    tasks), and what run.json records about the choice (with a sentence that says it)."""
    from skyhub.task import spread_sample

    if not len(tasks):
        if n is None:
            raise UsageError(f"{env_id} has no fixed task set (it generates tasks): pass "
                             "--n to say how many episodes to run")
        return list(range(n)), {"kind": "generated", "n": n,
                                "says": f"{n} generated tasks (seeds {seed}..)"}
    if n is None or n == len(tasks):
        return list(range(len(tasks))), {"kind": "all", "n": len(tasks),
                                         "says": f"all {len(tasks)} tasks"}
    if n > len(tasks):
        return [k % len(tasks) for k in range(n)], {
            "kind": "cycle", "n": n, "says": f"{n} episodes cycling over the {len(tasks)} tasks"}
    slices = len({(t.meta or {}).get(slice_key) for t in tasks}) if slice_key else 1
    spread = f", spread over {slices} {slice_key} values" if slices > 1 else ""
    return spread_sample(tasks, n, seed, slice_key), {
        "kind": "sample", "n": n, "of": len(tasks), "seed": seed, "by": slice_key,
        "says": f"a seeded sample of {n} of {len(tasks)} (seed {seed}{spread})"}


class _EvalLoop:
    """One evaluation as the episode driver's actor (`skyhub.vector.driver`): the agent acts,
    from a thread pool (parallel agents) or inline (fast local agents)."""

    def __init__(self, venv: Any, tasks: Any, plan: list[tuple[int, int, int]], agent: Agent,
                 seed: int, max_steps: int, finished: Callable[[Episode], None],
                 protocol: str = "text") -> None:
        # plan[k]: episode k's (index in tasks, position in the run's sample, attempt)
        self.venv, self.tasks, self.plan, self.agent = venv, tasks, plan, agent
        if protocol == "text":  # tool calls are not cut at the text protocol's closing tags
            agent.use_stop_strings(tuple(venv.get_attr("stop_strings", env_ids=[0])[0] or ()))
        self.seed, self.max_steps, self.on_finished = seed, max_steps, finished
        self.pool: _DaemonPool | None = None

    def run(self, todo: list[int]) -> None:
        from skyhub.vector.driver import EpisodeDriver

        episodes = [self._episode(k) for k in todo]
        width = min(self.venv.num_envs, len(todo))
        self.pool = _DaemonPool(width) if self.agent.parallel else None
        try:
            EpisodeDriver(self.venv, self, in_flight=width).run(episodes)
        finally:
            if self.pool is not None:
                self.pool.shutdown()

    def _episode(self, k: int) -> Episode:
        task = self.tasks[self.plan[k][0]] if len(self.tasks) else None
        return Episode(None if task is None else task.id, None, "", index=k,
                       seed=self.seed + k, meta=dict(task.meta) if task is not None else {},
                       task_index=self.plan[k][1], attempt=self.plan[k][2], agent_s=0.0)

    # ------------------------------------------------------------------ the driver's actor
    def leased(self, slot: int, ep: Episode) -> None:
        ep.latency_s = time.perf_counter()  # the start, until the episode ends

    def started(self, slot: int, ep: Episode) -> bool:
        return False

    def request(self, slot: int, ep: Episode, post: Post) -> None:
        if self.pool is not None:
            self.pool.submit(self._think, slot, ep.messages(), post)
        else:
            t = time.perf_counter()
            post(self._act(slot, ep.messages()), time.perf_counter() - t)

    def action(self, slot: int, ep: Episode, result: Any, seconds: float) -> Any:
        """The agent's action (text, or a tool turn as plain JSON: `as_action`), or None after
        recording its infra error (the episode ends). Other exceptions stop the run."""
        ep.agent_s = (ep.agent_s or 0.0) + seconds
        if isinstance(result, InfraError):
            ep.error_source = "agent"
            ep.add("", "", 0.0, False, True, infra_error_info(
                f"agent failed: {result}", ep.task_id, len(ep.actions)))
            return None
        if isinstance(result, BaseException):
            raise result
        return as_action(ep, result)

    def observed(self, slot: int, ep: Episode) -> bool:
        if len(ep.actions) < self.max_steps:
            return False
        ep.error_source = "env"
        ep.add("", "", 0.0, False, True, infra_error_info(
            f"episode cut after max_steps={self.max_steps}", ep.task_id, self.max_steps))
        return True

    def finished(self, slot: int, ep: Episode) -> None:
        ep.latency_s = time.perf_counter() - (ep.latency_s or 0.0)
        self.on_finished(ep)

    # ------------------------------------------------------------------ the agent
    def _act(self, i: int, messages: list[dict[str, str]]) -> Any:
        """The agent's reply, or the InfraError it raised (recorded, not raised)."""
        try:
            return self.agent.act(messages, _EnvCalls(self.venv, i))
        except InfraError as e:
            return e

    def _think(self, i: int, messages: list[dict[str, str]], post: Post) -> None:
        t = time.perf_counter()
        try:
            reply = self._act(i, messages)
        except BaseException as e:  # raised again by the driver's thread
            reply = e
        post(reply, time.perf_counter() - t)


class _HarnessLoop(_EvalLoop):
    """An evaluation whose agent plays whole episodes (`skyhub.eval.harness_agent`): one
    thread per env of the VectorEnv, each leasing its env to one episode at a time through
    `EnvSlot`."""

    def run(self, todo: list[int]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for slot in range(self.venv.num_envs):
            free.put(slot)
        self.agent.harness.check(EnvSlot(self.venv, 0))

        def play(k: int) -> None:
            planned, slot = self._episode(k), free.get()
            try:
                t = time.perf_counter()
                ep = self.agent.play_episode(EnvSlot(self.venv, slot), seed=planned.seed,
                                             options=None if planned.task_id is None else
                                             {"task_id": planned.task_id})
                ep.latency_s = ep.agent_s = time.perf_counter() - t
                record = self.venv.call("task_record", env_ids=[slot])[0] or {}
            finally:
                free.put(slot)
            ep.index, ep.seed, ep.task_index, ep.attempt = (
                planned.index, planned.seed, planned.task_index, planned.attempt)
            ep.meta = {**planned.meta, **ep.meta}
            ep.question, ep.expected = record.get("question"), record.get("expected")
            self.on_finished(ep)

        with ThreadPoolExecutor(min(self.venv.num_envs, len(todo)) or 1,
                                thread_name_prefix="skyhub-harness") as pool:
            for f in [pool.submit(play, k) for k in todo]:
                f.result()


class EnvSlot:
    """Env `slot` of a VectorEnv as an env object: its calls and attributes go through the
    VectorEnv (what a harness acts on in `skyhub eval`)."""

    def __init__(self, venv: Any, slot: int) -> None:
        self._venv, self._slot = venv, slot

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> Any:
        return self._venv.call("reset", seed=seed, options=options, env_ids=[self._slot])[0]

    def step(self, action: Any) -> Any:
        return self._venv.call("step", action, env_ids=[self._slot])[0]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._venv.get_attr(name, env_ids=[self._slot])[0]


class _EnvCalls:
    """The `reference` an agent's `act` gets: called, slot i's reference action; and its
    `sample_action(seed)` (see `skyhub.eval.agents.ReferenceFn`)."""

    def __init__(self, venv: Any, i: int) -> None:
        self.venv, self.i = venv, i

    def __call__(self) -> str | None:
        return self.venv.call("reference_action", env_ids=[self.i])[0]

    def sample_action(self, seed: int) -> str:
        return self.venv.call("sample_action", seed, env_ids=[self.i])[0]

    def tool_calls(self) -> Any:
        """Slot i's `reference_tool_calls()` (the oracle's action in a run with tools)."""
        return self.venv.call("reference_tool_calls", env_ids=[self.i])[0]


def as_action(ep: Episode, result: Any) -> Any:
    """What an agent returned, as the action to send and record: text as it is; a tool turn
    (a `Reply` with `tool_calls`, an assistant message or its dict, `ToolCall`s) as plain
    JSON, `{"content", "tool_calls": [OpenAI entries]}` (`skyhub.tools.to_plain`), so that
    episodes.jsonl stays JSON and any executor can carry it; a turn without calls as its
    text. A `Reply`'s token counts are added to `ep`."""
    from skyhub.tools import ToolCall, as_tool_turn, to_plain

    if isinstance(result, Reply):
        text = ep.count(result)
        if not result.tool_calls:
            return text
        result = {"content": text, "tool_calls": [ToolCall.from_openai(c, i).to_openai()
                                                  for i, c in enumerate(result.tool_calls)]}
    if isinstance(result, str):
        return result
    turn = as_tool_turn(result)
    if turn is None:
        return str(result)
    plain = to_plain(result)
    return plain if plain["tool_calls"] else plain["content"]


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


# `load_records` reads back what `run(..., out=DIR)` wrote: the two are used together.
__all__ = ["load_records", "run", "task_order"]
