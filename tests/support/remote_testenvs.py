"""Envs for the remote server tests: they record, in this process, which ones were closed."""

from __future__ import annotations

import threading
import time
from typing import Any

from skyhub import Task, TaskSet, TextEnv

#: label -> number of close() calls that reached the env (the server runs in-process in tests)
CLOSED: dict[str, int] = {}
#: label -> names of the threads the env was made, reset, stepped and closed in
THREADS: dict[str, set[str]] = {}
_lock = threading.Lock()


def _seen(label: str) -> None:
    with _lock:
        THREADS.setdefault(label, set()).add(threading.current_thread().name)


class RecordingEnv(TextEnv):
    """Task k needs k+1 steps; obs echoes the action; records `close()` under `label`.

    `fail_on` makes a step with that action raise (an env bug); `delay` makes steps slow.
    """

    stop_strings = ("</x>",)

    def __init__(self, label: str = "", delay: float = 0.0, fail_on: str | None = None) -> None:
        super().__init__()
        self.label, self.delay, self.fail_on = label, delay, fail_on
        _seen(label)
        self.tasks = TaskSet([Task(f"t{k}", f"task {k}", answer=k + 1, meta={"k": k})
                              for k in range(3)])
        self.system_prompt = f"recording env {label}"

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        _seen(self.label)
        self.start_episode(seed, options)
        return f"start {self.task.id}", self.make_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        _seen(self.label)
        assert self.task is not None
        if self.delay:
            time.sleep(self.delay)
        if self.fail_on is not None and action == self.fail_on:
            raise RuntimeError("env bug")
        self.turn += 1
        done = self.turn >= self.task.answer
        info = self.make_info("success" if done else "running", echo=[action, self.turn],
                              **({"reward_breakdown": {"len": len(action)}} if done else {}))
        return f"{self.task.id}:{self.turn}:{action}", float(len(action)), done, False, info

    def reference_action(self) -> str | None:
        return None if self.task is None else f"ref-{self.task.id}-{self.turn}"

    def close(self) -> None:
        _seen(self.label)
        with _lock:
            CLOSED[self.label] = CLOSED.get(self.label, 0) + 1
