"""Remote envs (`skyhub serve` + `make_remote`) against the same env in-process, on loopback.

    python -m benchmarks.remote_env [--steps 3000] [--sessions 16] [--delay 0.01]

The server runs as its own process (as `skyhub serve` would), so client and server do not
share a GIL. Measured, in one run:
1. p50 and p99 step latency of toy-lookup, one remote session vs calling `step` in-process
   (goal: remote p50 < 2 ms on loopback).
2. steps/s of one remote session vs in-process (informative: the price of the network hop).
3. steps/s of `--sessions` concurrent remote sessions (one client thread each) vs one session
   (goal >= 2x: the server overlaps sessions).
4. the same through a `VectorEnv` of remote envs (lockstep), with the default inline
   fast-step path and with thread dispatch forced.
5. I/O-bound envs (each step sleeps `--delay` on the server): lockstep env-steps/s of a
   `VectorEnv` of `--sessions` remote envs vs the ideal `sessions / delay` (goal >= 0.8).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks._common import result, write

ENV = "toy-lookup"
SLEEP = "bench-sleep"
ACTION = "<lookup>k100</lookup>"
KW = {"max_turns": 10**9}  # episodes never end: every step is the same lookup

SERVER = f"""
import sys
import skyhub
from skyhub.remote.server import serve
skyhub.register({SLEEP!r}, "benchmarks.vector_env:make_sleep_env", override=True)
serve([{ENV!r}, {SLEEP!r}], "127.0.0.1", int(sys.argv[1]), max_sessions=256,
      allow_kwargs=("max_turns", "delay"), log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server() -> tuple[subprocess.Popen, str]:
    port = free_port()
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], cwd=root,
                            env={**os.environ, "PYTHONPATH": str(root)})
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                json.loads(r.read())
            return proc, f"ws://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("the benchmark's env server did not start") from None
            time.sleep(0.1)


def latencies(env: Any, steps: int) -> list[float]:
    """Seconds per step over `steps` steps (after a warm-up)."""
    env.reset(seed=0)
    for _ in range(50):
        env.step(ACTION)
    out = []
    for _ in range(steps):
        t = time.perf_counter()
        env.step(ACTION)
        out.append(time.perf_counter() - t)
    return out


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


def concurrent_rate(url: str, sessions: int, steps: int) -> float:
    """Total steps/s of `sessions` client threads, each stepping its own remote env."""
    from skyhub.remote import make_remote

    envs = [make_remote(ENV, url, **KW) for _ in range(sessions)]
    for e in envs:
        e.reset(seed=0)
    barrier = threading.Barrier(sessions + 1)

    def run(env: Any) -> None:
        barrier.wait()
        for _ in range(steps):
            env.step(ACTION)

    threads = [threading.Thread(target=run, args=(e,)) for e in envs]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    rate = sessions * steps / (time.perf_counter() - t0)
    for e in envs:
        e.close()
    return rate


def lockstep_rate(env_fn: Any, n: int, steps: int, **vec_kwargs: Any) -> float:
    from skyhub.vector import VectorEnv

    with VectorEnv([env_fn] * n, **vec_kwargs) as venv:
        venv.reset(seed=0)
        acts = [ACTION] * n
        for _ in range(5):
            venv.step(acts)
        t = time.perf_counter()
        for _ in range(steps):
            venv.step(acts)
        return steps * n / (time.perf_counter() - t)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3000, help="steps per latency measurement")
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--delay", type=float, default=0.01, help="seconds each I/O-bound step takes")
    args = ap.parse_args(argv)
    import skyhub
    from skyhub.remote import make_remote

    n, rows = args.sessions, []
    proc, url = start_server()
    try:
        # 1-2. one session vs in-process
        with skyhub.make(ENV, **KW) as local:
            lat_local = latencies(local, args.steps)
        with make_remote(ENV, url, **KW) as remote:
            lat_remote = latencies(remote, args.steps)
        p50_l, p50_r = pct(lat_local, 0.5) * 1e3, pct(lat_remote, 0.5) * 1e3
        rows.append(result("p50 step latency, toy-lookup, one remote session", p50_r,
                           "in-process step", p50_l, "< 2 ms on loopback", met=p50_r < 2,
                           unit="ms", note=f"p99: remote {pct(lat_remote, 0.99) * 1e3:.3f} ms, "
                                           f"in-process {pct(lat_local, 0.99) * 1e3:.4f} ms"))
        one = 1 / statistics.fmean(lat_remote)
        rows.append(result("steps/s, one remote session", one, "in-process steps/s",
                           1 / statistics.fmean(lat_local), "(informative: the network hop)"))

        # 3. concurrent sessions, one client thread each
        per = max(100, args.steps // n)
        many = concurrent_rate(url, n, per)
        rows.append(result(f"steps/s, {n} concurrent remote sessions", many,
                           "one remote session", one, ">= 2x one session",
                           met=many >= 2 * one))

        # 4. a VectorEnv of remote envs
        fn = functools.partial(make_remote, ENV, url, **KW)
        vec = lockstep_rate(fn, n, max(20, per // 2))
        vec_threads = lockstep_rate(fn, n, max(20, per // 2), inline_fast_steps=False)
        rows.append(result(f"VectorEnv lockstep env-steps/s, {n} remote envs", vec,
                           "one remote session", one, "(informative)",
                           note="default inline_fast_steps: sub-0.5 ms remote steps are "
                                "stepped inline, one at a time"))
        rows.append(result(f"VectorEnv lockstep env-steps/s, {n} remote envs, thread "
                           "dispatch forced", vec_threads, "one remote session", one,
                           ">= 2x one session", met=vec_threads >= 2 * one))

        # 5. I/O-bound remote envs: do the sessions overlap on the server?
        sleep_fn = functools.partial(make_remote, SLEEP, url, delay=args.delay)
        io = lockstep_rate(sleep_fn, n, 30)
        ideal = n / args.delay
        rows.append(result(f"VectorEnv lockstep env-steps/s, {n} remote envs, "
                           f"{args.delay * 1e3:.0f} ms steps", io, "ideal n/delay", ideal,
                           ">= 0.8 of ideal", met=io / ideal >= 0.8))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    write("remote_env", rows, params=vars(args))


if __name__ == "__main__":
    main()
