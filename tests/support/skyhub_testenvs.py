"""Envs shared by test files, importable by module name (worker processes unpickle them)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, ClassVar

from skyhub import Task, TaskSet, TextEnv
from skyhub.errors import InfraError, SandboxUnavailable


class SayEnv(TextEnv):
    """A correct one-turn env written the way the docs tell an author to: task `say-i` asks
    "Say i." and the reply `<answer>i</answer>` wins. With `strict`, any other reply raises, as
    a broken env would (what the contract checker must catch)."""

    system_prompt = "Say the number you are asked for, inside <answer></answer>."

    def __init__(self, n_tasks: int = 20, strict: bool = False) -> None:
        super().__init__()
        self.strict = strict
        self.tasks = TaskSet(Task(f"say-{i}", f"Say {i}.", str(i)) for i in range(n_tasks))

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.task = self.select_task(options)
        self.turn = 0
        return self.task.prompt, self.make_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None
        self.turn += 1
        correct = action.strip() == f"<answer>{self.task.answer}</answer>"
        if self.strict and not correct:
            raise ValueError("unexpected action")
        return "", float(correct), True, False, self.make_info(
            "success" if correct else "failure", reward_breakdown={"correct": float(correct)})

    def reference_action(self) -> str | None:
        return None if self.task is None else f"<answer>{self.task.answer}</answer>"


class FlakyEnv(TextEnv):
    """The ways an env fails, one task each, for the adapters' tests. t-ok: a reply with "ok"
    in it scores 1; t-flag: the step reports infra_error and cuts the episode (a container that
    died); t-raise: the step raises InfraError; t-once: only the first step of it in this
    process raises (a sandbox that died once; set `failed_once = False` to arm it again);
    t-reset: the reset cannot get a sandbox."""

    stop_strings = ("</ok>",)
    system_prompt = "Say ok."
    failed_once: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__(max_turns=2)  # so a cut episode is the flag's doing, not the budget's
        self.tasks = TaskSet([Task(i, f"task {i}", answer="ok")
                              for i in ("t-ok", "t-flag", "t-raise", "t-once", "t-reset")])

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task = self.start_episode(seed, options)
        if task.id == "t-reset":
            raise SandboxUnavailable("no Docker daemon answers")
        return task.prompt, self.make_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None
        self.next_turn()
        if self.task.id == "t-flag":
            return "", 0.0, False, True, self.make_info("error", infra_error=True,
                                                        error="container died")
        if self.task.id == "t-raise":
            raise InfraError("the sandbox host went away")
        if self.task.id == "t-once" and not FlakyEnv.failed_once:
            FlakyEnv.failed_once = True
            raise InfraError("the sandbox host went away")
        ok = "ok" in action
        return "", float(ok), True, False, self.make_info(
            "success" if ok else "failure", reward_breakdown={"ok": float(ok)})


class CountEnv(TextEnv):
    """Deterministic: task k lasts k+1 steps; obs echoes the action; reward = len(action)."""

    def __init__(self, delay: float = 0.0, crash_at: int | None = None,
                 hang_at: int | None = None, exit_once: str | None = None,
                 crash_task: str | None = None, reset_crash_task: str | None = None) -> None:
        super().__init__()
        self.tasks = TaskSet([Task(f"t{k}", f"task {k}", answer=k + 1) for k in range(3)])
        self.delay, self.crash_at, self.hang_at = delay, crash_at, hang_at
        self.steps_total = 0
        self.crash_task = crash_task  # steps of this task always raise
        self.exit_once = exit_once  # a path: the first env to step creates it, then dies
        self.reset_crash_task = reset_crash_task  # resets for this task raise (a failed build)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.start_episode(seed, options)
        if self.task.id == self.reset_crash_task:
            raise RuntimeError(f"cannot prepare {self.task.id}")
        return f"start {self.task.id}", self.make_info(thread=threading.current_thread().name)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None
        self.steps_total += 1
        if self.delay:
            time.sleep(self.delay)
        if self.crash_at == self.steps_total or self.task.id == self.crash_task:
            raise RuntimeError("env bug")
        if self.exit_once and not os.path.exists(self.exit_once):
            open(self.exit_once, "w").close()
            os._exit(3)
        if self.hang_at == self.steps_total:
            time.sleep(60)
        self.turn += 1
        done = self.turn >= self.task.answer
        info = self.make_info("success" if done else "running",
                              thread=threading.current_thread().name,
                              **({"reward_breakdown": {"len": len(action)}} if done else {}))
        return f"{self.task.id}:{self.turn}:{action}", float(len(action)), done, False, info


def count_env(**kw: Any) -> CountEnv:  # module-level: picklable for executor="processes"
    return CountEnv(**kw)
