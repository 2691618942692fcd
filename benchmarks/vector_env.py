"""VectorEnv throughput and overhead against a plain Python loop over the same envs.

    python -m benchmarks.vector_env [--envs 64] [--delay 0.02] [--steps 50]

1. I/O-bound envs (each step sleeps `delay`, like a database query or container exec):
   lockstep env-steps/s as a fraction of the ideal `envs / delay` (goal >= 80%).
2. Per-step overhead with a no-op env: extra microseconds per env-step over calling `step`
   in a loop (goal < 50 us).
3. Envs whose steps take 10-30 ms at random: the asynchronous `send`/`recv` loop against
   lockstep, which waits for the slowest env every step.
4. The same I/O-bound throughput with `executor="processes"` (fewer envs: each is a process).
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from benchmarks._common import result, write
from skyhub import Task, TaskSet, TextEnv
from skyhub.vector import VectorEnv


class SleepEnv(TextEnv):
    """Each step sleeps `delay` seconds (or a uniform draw from `delay_range`)."""

    def __init__(self, delay: float = 0.0, delay_range: tuple[float, float] | None = None,
                 seed: int = 0) -> None:
        super().__init__()
        self.delay, self.delay_range = delay, delay_range
        self.rng = random.Random(seed)
        self.tasks = TaskSet([Task("t0", "go")])

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.start_episode(seed, options)
        return "go", self.make_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        d = self.rng.uniform(*self.delay_range) if self.delay_range else self.delay
        if d:
            time.sleep(d)
        self.turn += 1
        return "ok", 0.0, False, False, self.make_info()


def make_sleep_env(delay: float, seed: int = 0) -> SleepEnv:  # picklable env_fn
    return SleepEnv(delay, seed=seed)


def lockstep_rate(venv: VectorEnv, steps: int) -> float:
    """Env-steps per second of `steps` lockstep steps (after a warm-up)."""
    venv.reset(seed=0)
    actions = ["a"] * venv.num_envs
    for _ in range(3):
        venv.step(actions)
    t = time.perf_counter()
    for _ in range(steps):
        venv.step(actions)
    return steps * venv.num_envs / (time.perf_counter() - t)


def loop_rate(envs: list[SleepEnv], steps: int) -> float:
    """Env-steps per second of the plain loop `for env in envs: env.step(a)`."""
    for e in envs:
        e.reset(seed=0)
    t = time.perf_counter()
    for _ in range(steps):
        for e in envs:
            e.step("a")
    return steps * len(envs) / (time.perf_counter() - t)


def async_rate(venv: VectorEnv, total: int) -> float:
    """Env-steps per second of a send/recv loop that re-sends each env as soon as it returns."""
    venv.async_reset()
    venv.recv(min_ready=venv.num_envs)
    done, t = 0, time.perf_counter()
    venv.send(["a"] * venv.num_envs)
    while done < total:
        ids, *_ = venv.recv(min_ready=1)
        done += len(ids)
        venv.send(["a"] * len(ids), ids)
    rate = done / (time.perf_counter() - t)
    venv.recv(min_ready=venv.num_envs)
    return rate


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=64)
    ap.add_argument("--delay", type=float, default=0.02, help="seconds each I/O-bound step takes")
    ap.add_argument("--steps", type=int, default=60, help="lockstep steps per measurement")
    ap.add_argument("--process-envs", type=int, default=16)
    args = ap.parse_args(argv)
    n, delay, rows = args.envs, args.delay, []

    # 1. I/O-bound lockstep throughput vs ideal, and vs a plain loop
    with VectorEnv([lambda: SleepEnv(delay)] * n) as venv:
        ours = lockstep_rate(venv, args.steps)
    ideal = n / delay
    loop = loop_rate([SleepEnv(delay) for _ in range(n)], 2)
    rows.append(result(f"lockstep env-steps/s, {n} envs, {delay * 1e3:.0f} ms steps", ours,
                       "ideal n/delay", ideal, ">= 0.8 of ideal", met=ours / ideal >= 0.8,
                       note=f"plain loop: {loop:.0f} env-steps/s ({ours / loop:.1f}x slower)"))
    rows.append(result("lockstep speed-up over a plain loop", ours / loop, "plain Python loop",
                       loop, f"~{n}x (all envs overlap)", ratio=ours / loop, unit="x"))

    # 2. per-env-step overhead of a no-op env
    steps0 = args.steps * 10
    with VectorEnv([lambda: SleepEnv(0.0)] * n) as venv:
        vec0 = lockstep_rate(venv, steps0)
    with VectorEnv([lambda: SleepEnv(0.0)] * n, inline_fast_steps=False) as venv:
        threaded0 = lockstep_rate(venv, steps0)  # every step through its dispatch thread
    loop0 = loop_rate([SleepEnv(0.0) for _ in range(n)], steps0)
    overhead_us = (1 / vec0 - 1 / loop0) * 1e6
    threaded_us = (1 / threaded0 - 1 / loop0) * 1e6
    rows.append(result("overhead per env-step, no-op env", overhead_us, "plain loop step time",
                       1e6 / loop0, "< 50 us", met=overhead_us < 50, unit="us", ratio=None,
                       note=f"a whole {n}-env lockstep step costs {n / vec0 * 1e3:.2f} ms; "
                            "fast envs are stepped inline"))
    rows.append(result("overhead per env-step, no-op env, thread dispatch forced", threaded_us,
                       "plain loop step time", 1e6 / loop0, "(informative)", unit="us",
                       ratio=None))

    # 3. heterogeneous step times: async send/recv vs lockstep
    fns = [lambda i=i: SleepEnv(delay_range=(0.01, 0.03), seed=i) for i in range(n)]
    with VectorEnv(fns) as venv:
        lock = lockstep_rate(venv, args.steps)
    with VectorEnv(fns) as venv:
        asy = async_rate(venv, args.steps * n)
    rows.append(result(f"async send/recv env-steps/s, {n} envs, 10-30 ms steps", asy,
                       "lockstep on the same envs", lock, "> lockstep (no waiting for the slowest)",
                       met=asy > lock))

    # 4. process executor, I/O-bound
    p = args.process_envs
    import functools

    # by module path, not __main__: worker processes import it to unpickle the env_fn
    from benchmarks.vector_env import make_sleep_env as env_fn

    with VectorEnv([functools.partial(env_fn, delay)] * p, executor="processes") as venv:
        procs = lockstep_rate(venv, args.steps)
    rows.append(result(f"processes: lockstep env-steps/s, {p} envs, {delay * 1e3:.0f} ms steps",
                       procs, "ideal n/delay", p / delay, ">= 0.8 of ideal",
                       met=procs / (p / delay) >= 0.8))
    write("vector_env", rows, params=vars(args))


if __name__ == "__main__":
    main()
