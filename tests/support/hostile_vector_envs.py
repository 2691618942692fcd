"""An env that owns sandboxes and hangs (or dies) in step, for the hostile vector tests.

It lives here, not in the test module, because worker processes and Ray actors unpickle it
by module name (the test module itself is not importable under pytest's importlib mode).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from typing import Any

import skyhub
from skyhub import Task, TaskSet, TextEnv


class SandboxHangEnv(TextEnv):
    """Makes one sandbox per backend in `backends` when it is built (outside `step_timeout`,
    which also times resets) and, in the local one, a long-running process (`sleep
    <sleep_arg>`, as a kernel would be: it is not tied to the env's process); then `step`
    hangs (`on_step="hang"`) or kills its own process (`"segfault"`). Its reset info says
    which process owns the sandboxes."""

    def __init__(self, backends: tuple[str, ...] = ("docker", "local"), on_step: str = "hang",
                 sleep_arg: str = "") -> None:
        super().__init__()
        self.tasks = TaskSet([Task("t0", "hang", answer=None)])
        self.on_step = on_step
        self.sandboxes = [skyhub.sandbox.create(backend=b, memory_mb=256) for b in backends]
        self.streams = [sb.open_stream(["sleep", sleep_arg]) for sb in self.sandboxes
                        if sleep_arg and sb.backend == "local"]

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.start_episode(seed, options)
        names = {sb.backend: getattr(sb, "name", sb.id) for sb in self.sandboxes}
        return "ready", self.make_info(pid=os.getpid(), host=socket.gethostname(),
                                       sandboxes=names)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.on_step == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(600)
        raise AssertionError("unreachable: the executor kills a hung env")

    def close(self) -> None:
        for s in self.streams:
            s.close()
        for sb in self.sandboxes:
            sb.close()
        super().close()
