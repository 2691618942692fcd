"""`VectorEnv`: many text envs stepped concurrently, in lockstep or asynchronously.

Two interfaces over one mechanism (a dispatch thread per env, results on one queue):

- gymnasium-style lockstep: `reset(seed=...)`, `step(actions)`, with the autoreset modes of
  gymnasium 1.x (`next_step`, `same_step`, `disabled`);
- envpool-style asynchronous: `send(actions, env_ids)` / `recv(min_ready=1)` returns
  whichever envs finished first, so a trainer never waits for the slowest episode.

Failures are contained per env: an env that raises, whose process dies, or (with
`step_timeout`) that hangs, is reported in its own slot as an episode end with
`info["infra_error"] = True` and `outcome = "error"`, and is recreated; the other envs keep
running. With `executor="processes"` or `"ray"`, the sandboxes of an env whose process was
killed or died are removed by their owner labels (see `skyhub.sandbox.reap_owner`); with
`"threads"` a hung env cannot be killed, only dropped (use processes for envs that may hang).
Misuse of the API (stepping a finished env with autoreset disabled, sending to an env that
is still busy) raises. The VectorEnv is driven from one thread.

Over ~400 lines, for a reason: one class, `VectorEnv`, whose two interfaces (lockstep and
send/recv) run on one mechanism.
"""

from __future__ import annotations

import queue
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode

from skyhub.chat import infra_error_info
from skyhub.errors import UsageError
from skyhub.spaces import UnicodeText
from skyhub.vector.executor_names import get_executor
from skyhub.vector.executors import Executor, LocalWorker, ThreadExecutor
from skyhub.vector.runner import Result, Runner

if TYPE_CHECKING:
    from skyhub.env import TextEnv

InfoFormat = Literal["list", "dict"]

_MODES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP,
          "disabled": AutoresetMode.DISABLED}


def _autoreset_mode(mode: str | AutoresetMode) -> AutoresetMode:
    if isinstance(mode, AutoresetMode):
        return mode
    key = str(mode).lower().replace("-", "_")
    key = {"nextstep": "next_step", "samestep": "same_step"}.get(key, key)
    if key not in _MODES:
        raise UsageError(f"autoreset_mode must be one of {sorted(_MODES)}, got {mode!r}")
    return _MODES[key]


_WAKE = ("wake",)  # the item `wake()` puts on the results queue

#: An env whose steps have taken less than this (on average, after `_INLINE_SAMPLES` steps)
#: is stepped inline by the calling thread: a thread hop costs 25-250 us here (two wake-ups
#: on a busy 2-core VM), and a step this short is mostly Python holding the GIL, so threads
#: would not overlap it anyway. Measured on sql-spider (~150 us steps): 2.5x the lockstep
#: rate of a 100 us threshold. I/O-bound steps (a container exec, a 20 ms query) stay threaded.
_INLINE_BELOW_S = 500e-6
_INLINE_SAMPLES = 3


def may_block(env: Any, holds_sandbox: bool | None = None) -> bool:
    """Whether a step of `env` may block for long (a verifier, a sandbox call), so that it
    must never run inline on the VectorEnv's thread, however fast its earlier steps were: a
    nop agent's quick turns made a Harbor env inline, and its last step ran a 600 s verifier
    there while every other episode waited.

    An env says so with a `blocking_steps` attribute (True or False; it decides). Otherwise
    its steps may block when it holds a sandbox (as an attribute, or an attribute of one of
    its attributes: a shell session, a grader), or when its next step is its last by the
    turn budget (`turn + 1 >= max_turns`): an episode's end is where verifiers run.
    `holds_sandbox`: the sandbox check's answer when the caller already has it (the
    VectorEnv makes it after each reset: ~15 us over an env's attributes, too much for
    every step of an env whose steps take 150 us)."""
    declared = getattr(env, "blocking_steps", None)
    if isinstance(declared, bool):
        return declared
    max_turns = getattr(env, "max_turns", None)
    if isinstance(max_turns, int) and getattr(env, "turn", 0) + 1 >= max_turns:
        return True
    return _holds_sandbox(env) if holds_sandbox is None else holds_sandbox


def _holds_sandbox(env: Any) -> bool:
    sandbox = getattr(sys.modules.get("skyhub.sandbox"), "Sandbox", None)
    if sandbox is None:  # no sandbox was ever made in this process
        return False
    for value in list(getattr(env, "__dict__", {}).values()):
        if isinstance(value, sandbox):
            return True
        inner = getattr(value, "__dict__", None)
        if isinstance(inner, dict) and any(isinstance(v, sandbox)
                                           for v in list(inner.values())):
            return True
    return False


@dataclass
class _Slot:
    runner: Runner
    in_flight: bool = False
    sent_at: float = 0.0
    needs_reset: bool = True
    step_time: float = 0.0  # exponential moving average of step durations
    steps_seen: int = 0
    reset_time: float = 1.0  # the last reset's duration (slow until one is measured)
    holds_sandbox: bool | None = None  # the env's, looked at after its last reset

    def observe(self, duration: float) -> None:
        """Moving average of step durations: one step 5x over the threshold is enough to
        send an env back to its thread, and a run of fast ones brings it back inline."""
        self.step_time = duration if self.steps_seen == 0 else \
            0.8 * self.step_time + 0.2 * duration
        self.steps_seen += 1

    @property
    def inline(self) -> bool:
        return self.steps_seen >= _INLINE_SAMPLES and self.step_time < _INLINE_BELOW_S

    @property
    def inline_reset(self) -> bool:
        """Resets go inline too once the env's steps do and its last reset was as fast."""
        return self.inline and self.reset_time < _INLINE_BELOW_S


class VectorEnv(gymnasium.vector.VectorEnv):
    """`num_envs` text envs behind one batched, concurrent interface.

    Args:
        env_fns: one zero-argument callable per env (picklable for `"processes"` and `"ray"`).
        executor: `"threads"` (default), `"processes"`, `"ray"` (Ray actors: extra `ray`), or
            an `Executor` instance.
        autoreset_mode: `"next_step"` (default), `"same_step"` or `"disabled"`, with gymnasium's
            meaning: in `next_step` the step after an episode's end resets that env (its action
            is ignored; reward 0); in `same_step` the ending step already returns the next
            episode's first observation, with `final_obs`/`final_info` in its info; in
            `disabled` the caller resets finished envs (`reset(options={"reset_mask": m})`).
        step_timeout: seconds after which a reset or step that has not returned is abandoned
            and reported as an infra error (the env is recreated; with processes or Ray its
            worker is killed and the sandboxes it owned are reaped). None waits forever.
        inline_fast_steps: step an env in the calling thread once its steps have proven to
            take under 500 us on average (a thread hop costs as much; the GIL allows little
            overlap anyway); slow steps send it back to its thread. A step that may block
            (`may_block`: the env declares `blocking_steps = True`, holds a sandbox, or is on
            its last turn) always goes to its thread, and in lockstep the threaded envs start
            before the inline ones, so one env never holds the others. Envs are never called
            concurrently, but with this on they may be called from more than one thread: turn
            it off for an env bound to the thread that made it (e.g. sqlite3 with
            `check_same_thread=True`).
        info_format: `"list"` (default) gives a tuple with one info dict per env; `"dict"`
            gives gymnasium's dict of arrays with `_key` masks (indexed by env id, also for
            `recv`, whose masks then mark the envs it returned). The default differs from
            gymnasium's on purpose: a text env's info holds nested, per-env records (the
            verifier's output, a reward breakdown, the task's metadata) that a dict of
            arrays turns into object arrays of unrelated shapes, and `recv` returns a subset
            of envs, which a list keeps in the order they finished; agent and trainer code
            reads one env's info at a time.
    """

    def __init__(self, env_fns: Sequence[Callable[[], TextEnv]], *,
                 executor: str | Executor = "threads",
                 autoreset_mode: str | AutoresetMode = "next_step",
                 step_timeout: float | None = None, inline_fast_steps: bool = True,
                 info_format: InfoFormat = "list") -> None:
        if len(env_fns) == 0:
            raise UsageError("VectorEnv needs at least one env_fn")
        if info_format not in ("list", "dict"):
            raise UsageError(f"info_format must be 'list' or 'dict', got {info_format!r}")
        self.env_fns = list(env_fns)
        self.num_envs = len(self.env_fns)
        self.autoreset_mode = _autoreset_mode(autoreset_mode)
        self.metadata = {"autoreset_mode": self.autoreset_mode}
        self.step_timeout = step_timeout
        self.info_format = info_format
        self.single_observation_space = UnicodeText()
        self.single_action_space = UnicodeText()
        self.observation_space = gymnasium.spaces.Tuple([UnicodeText()] * self.num_envs)
        self.action_space = gymnasium.spaces.Tuple([UnicodeText()] * self.num_envs)
        self.closed = False
        self._executor = get_executor(executor)
        self._results: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ready: list[Any] = []  # results of steps run inline, not yet collected
        self._last_obs = [""] * self.num_envs  # what a partial reset returns for the others
        self._inline_ok = (inline_fast_steps and type(self._executor) is ThreadExecutor
                           and step_timeout is None)
        self._generation = 0
        self._slots = [self._new_slot(i) for i in range(self.num_envs)]
        self._start_all()

    # ================================================================== lockstep interface
    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
              ) -> tuple[tuple[str, ...], Any]:
        """Reset every env (or those in `options["reset_mask"]`); returns `(obs, infos)`.

        `seed` is one int (env i gets `seed + i`, as in gymnasium) or one seed per env;
        `options` is one dict for all envs or one per env (e.g. `{"task_id": ...}` each).
        """
        self._check_open()
        self._discard_in_flight()
        ids = list(range(self.num_envs))
        if isinstance(options, dict) and "reset_mask" in options:
            mask = np.asarray(options["reset_mask"], dtype=bool)
            if mask.shape != (self.num_envs,):
                raise UsageError(f"reset_mask must have shape ({self.num_envs},)")
            options = {k: v for k, v in options.items() if k != "reset_mask"} or None
            ids = [i for i in ids if mask[i]]
        self.async_reset(ids, seed=seed, options=options)
        results = self._collect(len(ids))
        infos = [results[i].info if i in results else {} for i in range(self.num_envs)]
        return tuple(self._last_obs), self._format_infos(range(self.num_envs), infos)

    def step(self, actions: Sequence[str]) -> tuple[tuple[str, ...], np.ndarray, np.ndarray,
                                                    np.ndarray, Any]:
        """Step every env with its action; returns `(obs, rewards, terminations, truncations,
        infos)` in env order."""
        self._check_open()
        if any(s.in_flight for s in self._slots):
            raise UsageError("step() while envs have async steps in flight: recv() them first, "
                              "or use reset() to start over")
        if len(actions) != self.num_envs:
            raise UsageError(f"step() needs one action per env ({self.num_envs}), got "
                             f"{len(actions)}")
        self.send(actions)
        results = self._collect(self.num_envs)
        ids = list(range(self.num_envs))
        return self._arrays(ids, [results[i] for i in ids])[1:]

    # ============================================================== asynchronous interface
    def async_reset(self, env_ids: Iterable[int] | None = None, *,
                    seed: int | Sequence[int | None] | None = None,
                    options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
                    record_task: bool = False) -> None:
        """Start resetting `env_ids` (all by default); `recv()` returns their first
        observations with reward 0. Seeds and options as in `reset`, per listed env.
        `record_task`: also ask each env, in its own thread or process right after its reset,
        for its `task_record()` (the question and expected answer a run records), which
        `last_task_record(i)` then returns: never in the info, so no agent reads it."""
        self._check_open()
        ids = self._ids(env_ids)
        seeds = _per_env(seed, ids, "seed", offset=True)
        opts = _per_env(options, ids, "options")
        self._dispatch_all([(i, "reset", (seeds[k], opts[k], record_task))
                            for k, i in enumerate(ids)])

    def last_task_record(self, env_id: int) -> dict[str, Any] | None:
        """Env `env_id`'s `task_record()` taken after its last reset (`async_reset(...,
        record_task=True)`, once `recv` has returned that reset); None when it was not asked
        for, the reset failed, or the env has no such method."""
        return self._slots[env_id].runner.task_record

    def send(self, actions: Sequence[str], env_ids: Iterable[int] | None = None) -> None:
        """Start stepping `env_ids` (all by default) with `actions` (one per id); returns at
        once. An env whose episode ended is reset instead (its action ignored) unless
        autoreset is disabled, in which case sending to it raises."""
        self._check_open()
        ids = self._ids(env_ids)
        if len(actions) != len(ids):
            raise UsageError(f"send() got {len(actions)} actions for {len(ids)} env ids")
        for i in ids:
            if self._slots[i].in_flight:
                raise UsageError(f"env {i} already has a step in flight: recv() its result "
                                  "before sending it another action")
            if self._slots[i].needs_reset and self.autoreset_mode is AutoresetMode.DISABLED:
                raise UsageError(f"env {i} has finished its episode and autoreset is disabled: "
                                  "reset it first (reset(options={'reset_mask': mask}) or "
                                  f"async_reset([{i}]))")
        work = [(i, "reset", (None, None)) if self._slots[i].needs_reset else (i, "step", action)
                for i, action in zip(ids, actions, strict=True)]
        self._dispatch_all(work)

    def recv(self, min_ready: int = 1, timeout: float | None = None,
             ) -> tuple[np.ndarray, tuple[str, ...], np.ndarray, np.ndarray, np.ndarray, Any]:
        """Results of envs that finished their reset or step: waits for at least `min_ready`
        (at most the number in flight), then also takes every other result already there.

        Returns `(env_ids, obs, rewards, terminations, truncations, infos)`, in the order the
        envs finished. With `timeout`, returns what is ready when it expires (maybe nothing);
        `wake()` from another thread also makes it return at once.
        """
        self._check_open()
        in_flight = sum(s.in_flight for s in self._slots)
        if in_flight == 0:
            raise UsageError("recv() with nothing in flight: call send() or async_reset() first")
        results = self._collect(min(max(min_ready, 1), in_flight), timeout=timeout, drain=True,
                                wakeable=True)
        ids = list(results)
        return self._arrays(ids, [results[i] for i in ids])

    def wake(self) -> None:
        """Make a `recv()` that is waiting (or the next one) return now, with whatever is
        ready, maybe nothing. Thread-safe: for a loop that also waits on other work, e.g.
        an eval harness whose model replies arrive on other threads."""
        self._results.put(_WAKE)

    # ================================================================== forking
    def fork(self, env_id: int, n: int = 1) -> list[int]:
        """Fork env `env_id`'s running episode into `n` new envs (`TextEnv.fork`), appended
        as new slots; returns their ids. Each is mid-episode, ready for `send`/`step` (its
        last observation is the parent's). With threads the env's own fork runs (a state
        copy where the family has one); with processes or Ray a new worker replays the
        episode's record. `ForkUnavailable` when the episode cannot be forked; `shrink`
        removes the slots again (rules: `skyhub.vector.forking`)."""
        from skyhub.vector.forking import fork_slots

        return fork_slots(self, env_id, n)

    def shrink(self, num_envs: int) -> None:
        """Close and remove every env from `num_envs` on (the slots `fork` added, once their
        episodes are over); the others keep their ids. None of them may be in flight."""
        from skyhub.vector.forking import shrink

        shrink(self, num_envs)

    def _resize(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self.observation_space = gymnasium.spaces.Tuple([UnicodeText()] * num_envs)
        self.action_space = gymnasium.spaces.Tuple([UnicodeText()] * num_envs)

    # ================================================================== other operations
    def call(self, name: str, *args: Any, env_ids: Iterable[int] | None = None,
             **kwargs: Any) -> tuple[Any, ...]:
        """Call `env.name(*args, **kwargs)` on each env (not in flight); returns the results.
        Raises the first env's exception."""
        return self._call(name, args, kwargs, env_ids)

    def get_attr(self, name: str, env_ids: Iterable[int] | None = None) -> tuple[Any, ...]:
        """`env.name` of each env."""
        return self._call(name, None, {}, env_ids)

    def close_extras(self, **kwargs: Any) -> None:
        if self.closed:
            return
        self.closed = True
        for slot in self._slots:
            if slot.in_flight:
                slot.runner.abandon()
            else:
                slot.runner.inbox.put(None)
        deadline = time.monotonic() + 30.0
        for slot in self._slots:
            slot.runner.thread.join(max(0.0, deadline - time.monotonic()))
        self._executor.close()

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"VectorEnv({self.num_envs} envs, executor={self._executor.name}, "
                f"autoreset={self.autoreset_mode.value})")

    # ====================================================================== internals
    def _new_slot(self, i: int, *, needs_reset: bool = True) -> _Slot:
        """Slot `i` with a new runner (a forked slot starts mid-episode: `needs_reset`
        False)."""
        return _Slot(self._new_runner(i), needs_reset=needs_reset)

    def _new_runner(self, i: int) -> Runner:
        self._generation += 1
        return Runner(self, i, self._generation)

    def _start_all(self) -> None:
        """Create every env concurrently; a failure here is the user's (bad kwargs, missing
        data) and is raised after closing what started."""
        reply: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for s in self._slots:
            s.runner.inbox.put(("spawn", None, reply))
        errors = [v for v in (reply.get()[3] for _ in self._slots) if isinstance(v, BaseException)]
        if errors:
            self.close()
            raise errors[0]

    def _ids(self, env_ids: Iterable[int] | None) -> list[int]:
        if env_ids is None:
            return list(range(self.num_envs))
        ids = [int(i) for i in env_ids]
        bad = [i for i in ids if not 0 <= i < self.num_envs]
        if bad:
            raise IndexError(f"env ids {bad} out of range for {self.num_envs} envs")
        if len(set(ids)) != len(ids):
            raise UsageError(f"duplicate env ids in {ids}")
        return ids

    def _dispatch_all(self, work: list[tuple[int, str, Any]]) -> None:
        """Start every (env id, kind, payload): those for threads first, then those run
        inline, so that an inline step never delays another env's start."""
        inline = {i for i, kind, _ in work if self._runs_inline(i, kind)}
        for i, kind, payload in work:
            if i not in inline:
                self._dispatch(i, kind, payload, inline=False)
        for i, kind, payload in work:
            if i in inline:
                self._dispatch(i, kind, payload, inline=True)

    def _runs_inline(self, i: int, kind: str) -> bool:
        slot = self._slots[i]
        if not self._inline_ok or not (slot.inline if kind == "step" else
                                       kind == "reset" and slot.inline_reset):
            return False
        worker = slot.runner.worker
        if not isinstance(worker, LocalWorker):
            return False
        if slot.holds_sandbox is None:
            slot.holds_sandbox = _holds_sandbox(worker.env)
        return not may_block(worker.env, slot.holds_sandbox)

    def _dispatch(self, i: int, kind: str, payload: Any, *, inline: bool) -> None:
        slot = self._slots[i]
        slot.in_flight, slot.sent_at = True, time.monotonic()
        if inline:
            self._ready.append((i, slot.runner.generation, kind, slot.runner.run(kind, payload)))
        else:
            slot.runner.inbox.put((kind, payload, self._results))

    def _collect(self, n: int, *, timeout: float | None = None, drain: bool = False,
                 wakeable: bool = False) -> dict[int, Result]:
        """Wait for `n` results (stale ones from abandoned runners are dropped); `wakeable`:
        a `wake()` ends the wait early."""
        got: dict[int, Result] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(got) < n or drain:
            if self._ready:
                item = self._ready.pop()
            elif len(got) >= n:  # drain what is already there, without waiting
                try:
                    item = self._results.get_nowait()
                except queue.Empty:
                    break
            elif deadline is None and self.step_timeout is None:
                item = self._results.get()
            else:
                wait = self._next_wait(deadline)
                try:
                    item = self._results.get(timeout=wait)
                except queue.Empty:
                    got.update(self._expire_hung())
                    if deadline is not None and time.monotonic() >= deadline:
                        break
                    continue
            if item is _WAKE:
                if wakeable:
                    drain = True
                    n = 0  # return what there is, without waiting for more
                continue
            i, generation, kind, result = item
            slot = self._slots[i]
            if generation != slot.runner.generation or not slot.in_flight:
                continue  # an abandoned runner answering late
            got[i] = self._settle(slot, result, kind)
            self._last_obs[i] = result.obs
        return got

    def _settle(self, slot: _Slot, r: Result, kind: str = "step") -> Result:
        slot.in_flight = False
        if kind == "reset":
            slot.holds_sandbox = None  # looked at again before its next inline step
        if r.duration and kind == "reset":
            slot.reset_time = r.duration
        elif r.duration:
            slot.observe(r.duration)
        ended = r.terminated or r.truncated
        if self.autoreset_mode is AutoresetMode.SAME_STEP:
            slot.needs_reset = r.needs_reset
        else:
            slot.needs_reset = r.needs_reset or ended
        return r

    def _next_wait(self, deadline: float | None) -> float:
        now = time.monotonic()
        waits = [] if deadline is None else [deadline - now]
        if self.step_timeout is not None:
            waits += [s.sent_at + self.step_timeout - now for s in self._slots if s.in_flight]
        return max(0.0, min(waits)) if waits else 3600.0

    def _expire_hung(self) -> dict[int, Result]:
        """Abandon envs whose call exceeded `step_timeout`; report each as an infra error."""
        if self.step_timeout is None:
            return {}
        now, expired = time.monotonic(), {}
        for i, slot in enumerate(self._slots):
            if slot.in_flight and now - slot.sent_at >= self.step_timeout:
                old = slot.runner
                old.abandon()
                slot.runner = self._new_runner(i)
                info = infra_error_info(f"env did not answer within step_timeout="
                                        f"{self.step_timeout}s; it was abandoned and recreated",
                                        old.task_id, old.turn)
                expired[i] = self._settle(slot, Result("", 0.0, False, True, info,
                                                        needs_reset=True))
                self._last_obs[i] = ""
        return expired

    def _discard_in_flight(self) -> None:
        pending = sum(s.in_flight for s in self._slots)
        if pending:
            self._collect(pending)

    def _call(self, name: str, args: tuple | None, kwargs: dict[str, Any],
              env_ids: Iterable[int] | None) -> tuple[Any, ...]:
        self._check_open()
        ids = self._ids(env_ids)
        busy = [i for i in ids if self._slots[i].in_flight]
        if busy:
            raise UsageError(f"envs {busy} have a step in flight: recv() them before call()")
        values = {}
        if all(self._runs_inline(i, "step") for i in ids):
            # envs whose steps run inline are safe to call inline too (same thread rules),
            # and a call is usually cheaper than the thread hop (an eval's reference action)
            for i in ids:
                values[i] = self._slots[i].runner.run("call", (name, args, kwargs))
        else:
            reply: queue.SimpleQueue[Any] = queue.SimpleQueue()
            for i in ids:
                self._slots[i].runner.inbox.put(("call", (name, args, kwargs), reply))
            for _ in ids:
                i, _g, _k, value = reply.get()
                values[i] = value
        for i in ids:
            if isinstance(values[i], BaseException):
                raise values[i]
        return tuple(values[i] for i in ids)

    def _arrays(self, ids: list[int], rs: list[Result]) -> tuple[np.ndarray, tuple[str, ...],
                                                                  np.ndarray, np.ndarray,
                                                                  np.ndarray, Any]:
        obs = tuple(r.obs for r in rs)
        rewards = np.fromiter((r.reward for r in rs), dtype=np.float64, count=len(rs))
        terms = np.fromiter((r.terminated for r in rs), dtype=np.bool_, count=len(rs))
        truncs = np.fromiter((r.truncated for r in rs), dtype=np.bool_, count=len(rs))
        # dict format: arrays are indexed by env id (masks say which envs are present)
        infos = self._format_infos(ids, [r.info for r in rs])
        return np.asarray(ids, dtype=np.int64), obs, rewards, terms, truncs, infos

    def _format_infos(self, positions: Iterable[int], infos: list[dict[str, Any]]) -> Any:
        if self.info_format == "list":
            return tuple(infos)
        vector_infos: dict[str, Any] = {}
        for k, info in zip(positions, infos, strict=True):
            vector_infos = self._add_info(vector_infos, info, k)
        return vector_infos

    def _check_open(self) -> None:
        if self.closed:
            raise UsageError("this VectorEnv is closed; create a new one with skyhub.make_vec")


def _per_env(value: Any, ids: list[int], what: str, *, offset: bool = False) -> list[Any]:
    """Broadcast one seed/options value to `ids`, or check a per-env sequence's length."""
    if value is None or isinstance(value, dict):
        return [value] * len(ids)
    if isinstance(value, int | np.integer):
        return [int(value) + i for i in ids] if offset else [value] * len(ids)
    values = list(value)
    if len(values) != len(ids):
        raise UsageError(f"got {len(values)} {what} values for {len(ids)} envs")
    return values
