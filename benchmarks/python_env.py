"""Python envs: a cell's round trip and a reset's latency, pooled vs cold, in one run.

    python -m benchmarks.python_env [--backends local,docker] [--cells 200] [--resets 15]

- cell round trip: `KernelSession.run("1 + 1")` through skyhub's kernel bridge inside the
  sandbox, against the baseline of jupyter_client talking straight to a kernel on the host
  (no sandbox, no bridge): what the isolation costs per cell. Goal: <= 2x.
- reset: `KernelSession.reset()` with the session's standby sandbox (the default: a second
  sandbox, already recycled, with a fresh kernel), against `reset(cold=True)`, a full
  recycle then and there (every process killed, the workdir restored, a new bridge and
  kernel: what a reset costs without the standby). Goal: pooled >= 10x faster. Between
  resets we wait for the standby to be recycled, as an episode of a few turns would; only
  the reset call is timed.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks._common import result, write


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def raw_jupyter_cells(n: int) -> list[float]:
    """The baseline: a host kernel driven directly by jupyter_client."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel()
    try:
        kc.execute_interactive("1 + 1", timeout=30)
        out = []
        for _ in range(n):
            t = time.perf_counter()
            kc.execute_interactive("1 + 1", timeout=30, output_hook=lambda msg: None)
            out.append(time.perf_counter() - t)
        return out
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def session_times(backend: str, cells: int, resets: int) -> dict[str, list[float]]:
    from skyhub.envs.python.kernel import KernelSession

    times: dict[str, list[float]] = {"cell": [], "pooled": [], "cold": []}
    with KernelSession(backend) as s:
        s.run("1 + 1")
        for _ in range(cells):
            t = time.perf_counter()
            r = s.run("1 + 1")
            times["cell"].append(time.perf_counter() - t)
            assert r.result == "2", r
        for _ in range(resets):
            time.sleep(2.5)  # the standby is recycled while an episode runs
            t = time.perf_counter()
            s.reset()
            times["pooled"].append(time.perf_counter() - t)
        for _ in range(resets):
            time.sleep(2.5)
            t = time.perf_counter()
            s.reset(cold=True)
            times["cold"].append(time.perf_counter() - t)
    return times


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="local,docker",
                    help="comma-separated sandbox backends (docker is skipped without a daemon)")
    ap.add_argument("--cells", type=int, default=200, help="cells timed per backend")
    ap.add_argument("--resets", type=int, default=15, help="resets timed per variant")
    args = ap.parse_args(argv)

    from skyhub.sandbox import docker_available

    raw = raw_jupyter_cells(args.cells)
    raw_p50 = statistics.median(raw) * 1e3
    rows = []
    for backend in args.backends.split(","):
        if backend == "docker" and not docker_available():
            print("no Docker daemon: skipping the docker backend")
            continue
        t = session_times(backend, args.cells, args.resets)
        cell_p50 = statistics.median(t["cell"]) * 1e3
        rows.append(result(f"{backend}: cell round trip p50", cell_p50,
                           "jupyter_client on the host, no sandbox", raw_p50, "<= 2x",
                           met=cell_p50 <= 2 * raw_p50, unit="ms",
                           note=f"p95 {pct(t['cell'], 0.95) * 1e3:.2f} ms"))
        pooled, cold = statistics.median(t["pooled"]) * 1e3, statistics.median(t["cold"]) * 1e3
        rows.append(result(f"{backend}: reset, pooled kernel p50", pooled,
                           "cold kernel start", cold, ">= 10x faster", ratio=cold / pooled,
                           met=cold / pooled >= 10, unit="ms"))
    write("python_env", rows, cells=args.cells, resets=args.resets)


if __name__ == "__main__":
    main()
