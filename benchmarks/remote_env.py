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

Each measurement runs `--repeats` times, the rounds interleaved (one session, then the
concurrent ones, then again), and the median counts: on a shared 2-core machine one run of
a second or two swings by a third. The notes give the range, and the CPU time the server and
the client spent per step: the server is one process (one GIL), so its CPU per step bounds
what concurrent sessions can reach.
"""

from __future__ import annotations

import argparse
import contextlib
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
from collections.abc import Iterator
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


def cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system, all threads) process `pid` has used so far (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Cpu:
    """CPU microseconds per step of the server (`pid`) and of this process (the client),
    over the timed part of a measurement only (not its setup)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.server_us: list[float] = []
        self.client_us: list[float] = []

    @contextlib.contextmanager
    def timed(self, steps: int) -> Iterator[None]:
        s0, c0 = cpu_s(self.pid), time.process_time()
        yield
        s1, c1 = cpu_s(self.pid), time.process_time()
        if s0 is not None and s1 is not None:
            self.server_us.append((s1 - s0) / steps * 1e6)
        self.client_us.append((c1 - c0) / steps * 1e6)

    def note(self) -> str:
        if not self.client_us:
            return ""
        server = (f"server {statistics.median(self.server_us):.0f} us"
                  if self.server_us else "server ?")
        return f"CPU per step: {server}, client {statistics.median(self.client_us):.0f} us"


def timed(cpu: Cpu | None, steps: int) -> Any:
    return contextlib.nullcontext() if cpu is None else cpu.timed(steps)


def spread(xs: list[float]) -> str:
    return f"median of {len(xs)}, range {min(xs):,.0f}-{max(xs):,.0f}"


def latencies(env: Any, steps: int, cpu: Cpu | None = None) -> list[float]:
    """Seconds per step over `steps` steps (after a warm-up)."""
    env.reset(seed=0)
    for _ in range(50):
        env.step(ACTION)
    out = []
    with timed(cpu, steps):
        for _ in range(steps):
            t = time.perf_counter()
            env.step(ACTION)
            out.append(time.perf_counter() - t)
    return out


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


def concurrent_rate(url: str, sessions: int, steps: int, cpu: Cpu | None = None) -> float:
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
    with timed(cpu, sessions * steps):
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        rate = sessions * steps / (time.perf_counter() - t0)
    for e in envs:
        e.close()
    return rate


def lockstep_rate(env_fn: Any, n: int, steps: int, cpu: Cpu | None = None,
                  **vec_kwargs: Any) -> float:
    from skyhub.vector import VectorEnv

    with VectorEnv([env_fn] * n, **vec_kwargs) as venv:
        venv.reset(seed=0)
        acts = [ACTION] * n
        for _ in range(5):
            venv.step(acts)
        with timed(cpu, steps * n):
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
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds (medians count)")
    args = ap.parse_args(argv)
    import skyhub
    from skyhub.remote import make_remote

    n, rows = args.sessions, []
    per = max(100, args.steps // n)
    vsteps = max(20, per // 2)
    proc, url = start_server()
    try:
        with skyhub.make(ENV, **KW) as local:
            lat_local = latencies(local, args.steps)
        fn = functools.partial(make_remote, ENV, url, **KW)
        sleep_fn = functools.partial(make_remote, SLEEP, url, delay=args.delay)
        lat_remote: list[float] = []
        ones, manys, vecs, vec_threads, ios = [], [], [], [], []
        cpu_one, cpu_many, cpu_vec, cpu_io = Cpu(proc.pid), Cpu(proc.pid), Cpu(proc.pid), \
            Cpu(proc.pid)
        for _ in range(args.repeats):
            # 1-2. one session
            with make_remote(ENV, url, **KW) as remote:
                lat = latencies(remote, args.steps, cpu_one)
            lat_remote += lat
            ones.append(1 / statistics.fmean(lat))
            # 3. concurrent sessions, one client thread each
            manys.append(concurrent_rate(url, n, per, cpu_many))
            # 4. a VectorEnv of remote envs
            vecs.append(lockstep_rate(fn, n, vsteps))
            vec_threads.append(lockstep_rate(fn, n, vsteps, cpu_vec, inline_fast_steps=False))
            # 5. I/O-bound remote envs: do the sessions overlap on the server?
            ios.append(lockstep_rate(sleep_fn, n, 30, cpu_io))

        p50_l, p50_r = pct(lat_local, 0.5) * 1e3, pct(lat_remote, 0.5) * 1e3
        rows.append(result("p50 step latency, toy-lookup, one remote session", p50_r,
                           "in-process step", p50_l, "< 2 ms on loopback", met=p50_r < 2,
                           unit="ms", note=f"p99: remote {pct(lat_remote, 0.99) * 1e3:.3f} ms, "
                                           f"in-process {pct(lat_local, 0.99) * 1e3:.4f} ms"))
        one = statistics.median(ones)
        rows.append(result("steps/s, one remote session", one, "in-process steps/s",
                           1 / statistics.fmean(lat_local), "(informative: the network hop)",
                           note=f"{spread(ones)}; {cpu_one.note()}"))
        many = statistics.median(manys)
        rows.append(result(f"steps/s, {n} concurrent remote sessions", many,
                           "one remote session", one, ">= 2x one session",
                           met=many >= 2 * one, note=f"{spread(manys)}; {cpu_many.note()}"))
        vec, vec_t = statistics.median(vecs), statistics.median(vec_threads)
        rows.append(result(f"VectorEnv lockstep env-steps/s, {n} remote envs", vec,
                           "one remote session", one, "(informative)",
                           note="default inline_fast_steps: sub-0.5 ms remote steps are "
                                f"stepped inline, one at a time; {spread(vecs)}"))
        rows.append(result(f"VectorEnv lockstep env-steps/s, {n} remote envs, thread "
                           "dispatch forced", vec_t, "one remote session", one,
                           ">= 2x one session", met=vec_t >= 2 * one,
                           note=f"{spread(vec_threads)}; {cpu_vec.note()}"))
        io = statistics.median(ios)
        ideal = n / args.delay
        rows.append(result(f"VectorEnv lockstep env-steps/s, {n} remote envs, "
                           f"{args.delay * 1e3:.0f} ms steps", io, "ideal n/delay", ideal,
                           ">= 0.8 of ideal", met=io / ideal >= 0.8,
                           note=f"{spread(ios)}; {cpu_io.note()}"))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    write("remote_env", rows, params=vars(args))


if __name__ == "__main__":
    main()
