"""The episode driver: plays episodes on a VectorEnv, each on its own, for whoever acts in them.

Both the eval harness (an agent acts) and the trainer's rollout (an inference engine acts)
run their episodes here: lease a free env slot, `async_reset` it with the episode's seed and
task (and the env's `task_record()`: the question and expected answer that the episode's
record shows a person, taken in the env's own thread and never shown to the actor), wait in
`recv` for whichever envs are ready, record each result on the episode
(`skyhub.chat.Episode`), ask the actor for the next action, `send` it, and free the slot
when the episode ends. What differs between them is the `Actor`: how an action is produced (at
once, in a thread pool, or by an engine that finishes requests in its own threads) and what
else it records (a trainer's tokens, an evaluation's timings).

Scheduling is per episode: when an env result arrives, the actor is asked at once; when its
action arrives (`post`, from any thread: it wakes `recv`), it goes to its env at once, so no
episode waits for another's action or env step. Up to `in_flight` episodes hold an env each
(an env's state is its episode's), from the moment their reset is sent until they end.

`stats` after `run`: `rollout_s` (wall), `env_wait_s` (wall time with an env reset or step
in flight), `act_s` (wall time with an action being produced), `peak_in_flight` (episodes at
once), `peak_requests` (actions being produced at once), `requests` (actions asked for).
"""

from __future__ import annotations

import queue
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from skyhub.chat import Episode

#: What an actor calls with its result for a slot (a value, or an exception to hand back).
Post = Callable[[Any, float], None]


class Actor(Protocol):
    """Who acts in the driver's episodes. Every method runs on the driver's thread except
    where `request` hands work to other threads, which then call `post`."""

    def leased(self, slot: int, ep: Episode) -> None:
        """`ep` got env `slot`; its reset is about to be sent."""

    def started(self, slot: int, ep: Episode) -> bool:
        """`ep`'s reset is recorded (prompt, first observation); True to end it now."""

    def request(self, slot: int, ep: Episode, post: Post) -> None:
        """Produce `ep`'s next action: `post(result, seconds)`, now or from another thread."""

    def action(self, slot: int, ep: Episode, result: Any, seconds: float) -> str | None:
        """The action text for a posted `result`, or None when the actor ended the episode
        instead (it recorded why, e.g. an agent's infra error). May raise to stop the run."""

    def observed(self, slot: int, ep: Episode) -> bool:
        """A step of `ep` that did not end it is recorded; True to end it now (the actor
        recorded why: a turn cap, a context limit, a step guard)."""

    def finished(self, slot: int, ep: Episode) -> None:
        """`ep` is over (ended by its env, an infra error or the actor)."""


class EpisodeDriver:
    """Plays `Episode`s (each created with its `seed` and `task_id`) on `venv`, a VectorEnv
    made with `autoreset_mode="disabled"`, at most `in_flight` at once."""

    def __init__(self, venv: Any, actor: Actor, in_flight: int | None = None) -> None:
        self.venv, self.actor = venv, actor
        self.in_flight = min(venv.num_envs, in_flight or venv.num_envs)
        self.stats: dict[str, float] = {}
        self._posted: queue.SimpleQueue[tuple[int, Any, float]] = queue.SimpleQueue()

    def post_for(self, slot: int) -> Post:
        def post(result: Any, seconds: float) -> None:  # any thread
            self._posted.put((slot, result, seconds))
            self.venv.wake()
        return post

    def run(self, episodes: Sequence[Episode],
            running: dict[int, Episode] | None = None) -> None:
        """Play `episodes` to their ends, leased in order; and `running` (slot -> episode),
        episodes already under way on those slots (forked: `VectorEnv.fork`), whose next
        action is asked for at once."""
        venv, actor = self.venv, self.actor
        running = dict(running or {})
        todo = deque(episodes)
        free = deque(s for s in range(self.in_flight) if s not in running)
        live: dict[int, Episode] = dict(running)  # slot -> its episode
        fresh: set[int] = set()  # slots whose reset is in flight
        pending: dict[int, str] = {}  # slot -> the action sent, its step in flight
        clock = _Busy()
        envs_busy = acting = peak = peak_acting = asked = 0

        def end(slot: int) -> None:
            ep = live.pop(slot)
            free.append(slot)
            actor.finished(slot, ep)

        def ask(slot: int) -> None:
            nonlocal acting, peak_acting, asked
            acting += 1
            asked += 1
            peak_acting = max(peak_acting, acting)
            actor.request(slot, live[slot], self.post_for(slot))

        t0 = time.perf_counter()
        for slot in running:
            ask(slot)
        while todo or live:
            while todo and free:  # lease envs to new episodes
                slot, ep = free.popleft(), todo.popleft()
                live[slot] = ep
                fresh.add(slot)
                actor.leased(slot, ep)
                options = None if ep.task_id is None else {"task_id": ep.task_id}
                venv.async_reset([slot], seed=[ep.seed], options=[options], record_task=True)
                envs_busy += 1
            peak = max(peak, len(live))
            clock.mark(acting, envs_busy)
            block = not envs_busy  # nothing else to wait for
            while acting:  # actions that arrived go to their envs
                try:
                    slot, result, seconds = self._posted.get(block=block)
                except queue.Empty:
                    break
                block, acting = False, acting - 1
                action = actor.action(slot, live[slot], result, seconds)
                if action is None:
                    end(slot)
                    continue
                pending[slot] = action
                venv.send([action], [slot])
                envs_busy += 1
            clock.mark(acting, envs_busy)
            if not envs_busy:
                if not acting and live:
                    raise RuntimeError(f"episode driver stalled: {len(live)} episodes live "
                                       "with no env call or action in flight (a bug)")
                continue
            ids, obs, rewards, terms, truncs, infos = venv.recv(min_ready=1)  # or a wake()
            envs_busy -= len(ids)
            for i, o, r, te, tr, info in zip(ids, obs, rewards, terms, truncs, infos,
                                             strict=True):
                slot = int(i)
                ep = live[slot]
                if slot in fresh:  # the reset: the episode's prompt
                    fresh.discard(slot)
                    # the prompt may change per episode (data that carries its own chat):
                    # read it after this reset, from the slot just received (not in flight)
                    ep.system_prompt = venv.get_attr("system_prompt", env_ids=[slot])[0]
                    ep.first_observation = o
                    ep.task_id = info.get("task_id", ep.task_id)
                    # what the record shows a person (never the actor: not in the messages)
                    task_record = venv.last_task_record(slot) or {}
                    ep.question = task_record.get("question")
                    ep.expected = task_record.get("expected")
                    if info.get("infra_error"):
                        ep.add("", "", 0.0, False, True, info)
                        end(slot)
                    elif actor.started(slot, ep):
                        end(slot)
                    else:
                        ask(slot)
                    continue
                ep.add(pending.pop(slot), o, float(r), bool(te), bool(tr), info)
                if ep.done or actor.observed(slot, ep):
                    end(slot)
                else:
                    ask(slot)
            clock.mark(acting, envs_busy)
        clock.mark(0, 0)
        self.stats = {"rollout_s": time.perf_counter() - t0, "act_s": clock.act_s,
                      "env_wait_s": clock.env_s, "peak_in_flight": float(peak),
                      "peak_requests": float(peak_acting), "requests": float(asked)}


class _Busy:
    """Wall time during which actions, and env calls, were in flight (each a union of
    intervals, as the driving thread sees the counts change)."""

    def __init__(self) -> None:
        self.act_s = self.env_s = 0.0
        self._act_since: float | None = None
        self._env_since: float | None = None

    def mark(self, acting: int, envs: int) -> None:
        now = time.perf_counter()
        if acting and self._act_since is None:
            self._act_since = now
        elif not acting and self._act_since is not None:
            self.act_s += now - self._act_since
            self._act_since = None
        if envs and self._env_since is None:
            self._env_since = now
        elif not envs and self._env_since is not None:
            self.env_s += now - self._env_since
            self._env_since = None
