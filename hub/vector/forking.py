"""`VectorEnv.fork` and `VectorEnv.shrink`: episodes forked into new slots of a vector env,
and those slots removed again.

A fork appends slots at the end, so every other env keeps its id. Each new slot starts
mid-episode: its runner has the parent's task and turn, its last observation is the parent's,
and it needs no reset. How the child env is made depends on where envs live:
- threads (`LocalWorker`): the parent env's own `fork` runs in its dispatch thread (a state
  copy where the family has one, else a replay: `skyhub.fork`), and the new slot's worker
  takes the child as it is;
- processes or Ray: an env object cannot cross to another worker, so the new worker makes a
  fresh env and replays the parent's record of the episode (`ForkedFactory`,
  `skyhub.fork.replay_into`), which is checked as every replay is.
A fork that fails leaves nothing behind (the slots it added are closed and removed). The
slots stay until `shrink(num_envs)` closes every env from `num_envs` on (a tree rollout does
at the end of its step) or the VectorEnv closes.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from skyhub.errors import ForkUnavailable, UsageError
from skyhub.vector.executors import LocalWorker
from skyhub.vector.factories import ForkedFactory

if TYPE_CHECKING:
    from skyhub.env import TextEnv
    from skyhub.vector.env import VectorEnv


def fork_slots(venv: VectorEnv, env_id: int, n: int) -> list[int]:
    """`venv.fork(env_id, n)`: the ids of `n` new slots in env `env_id`'s state."""
    venv._check_open()
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UsageError(f"fork(env_id, n) needs a positive int n, got {n!r}")
    (i,) = venv._ids([env_id])
    slot = venv._slots[i]
    if slot.in_flight:
        raise UsageError(f"env {i} has a step in flight: recv() it before fork()")
    if slot.needs_reset:
        raise ForkUnavailable(f"env {i} has no running episode (it ended or was never "
                              "reset): fork a slot mid-episode")
    if isinstance(slot.runner.worker, LocalWorker):
        (children,) = venv._call("fork", (n,), {}, [i])
        fns = [ForkedFactory(venv.env_fns[i], child=c) for c in children]
    else:
        played = venv._call("_played", None, {}, [i])[0]
        why = ("it has no running episode" if played is None or played.done
               else played.unreplayable)
        if why:
            raise ForkUnavailable(f"env {i}'s episode cannot be forked by replay in a new "
                                  f"worker: {why}")
        fns = [ForkedFactory(venv.env_fns[i], played=played) for _ in range(n)]
    return _add_slots(venv, fns, parent=i)


def _add_slots(venv: VectorEnv, fns: list[Callable[[], TextEnv]], parent: int) -> list[int]:
    """New slots for `fns`, started, with `parent`'s bookkeeping (mid-episode)."""
    first = venv.num_envs
    venv.env_fns += fns
    venv._resize(first + len(fns))
    reply: queue.SimpleQueue[Any] = queue.SimpleQueue()
    source = venv._slots[parent]
    for k in range(len(fns)):
        slot = venv._new_slot(first + k, needs_reset=False)
        slot.runner.task_id, slot.runner.turn = source.runner.task_id, source.runner.turn
        venv._slots.append(slot)
        venv._last_obs.append(venv._last_obs[parent])
        slot.runner.inbox.put(("spawn", None, reply))
    errors = [v for v in (reply.get()[3] for _ in fns) if isinstance(v, BaseException)]
    if errors:  # a failed fork leaves nothing: the new slots' envs closed, the slots gone
        for slot in venv._slots[first:]:
            slot.runner.inbox.put(None)
        del venv._slots[first:], venv.env_fns[first:], venv._last_obs[first:]
        venv._resize(first)
        raise errors[0]
    return list(range(first, venv.num_envs))


def shrink(venv: VectorEnv, num_envs: int) -> None:
    """`venv.shrink(num_envs)`: close and remove every env from `num_envs` on."""
    venv._check_open()
    if not 1 <= num_envs <= venv.num_envs:
        raise UsageError(f"shrink(num_envs) needs 1 <= num_envs <= {venv.num_envs}, got "
                         f"{num_envs}")
    busy = [i for i in range(num_envs, venv.num_envs) if venv._slots[i].in_flight]
    if busy:
        raise UsageError(f"envs {busy} have a step in flight: recv() them before shrink()")
    gone = venv._slots[num_envs:]
    for slot in gone:
        slot.runner.inbox.put(None)  # its thread closes the env, then ends
    for slot in gone:
        slot.runner.thread.join(30.0)
    del venv._slots[num_envs:], venv.env_fns[num_envs:], venv._last_obs[num_envs:]
    venv._resize(num_envs)


__all__ = ["fork_slots", "shrink"]
