"""Time to a clean, usable sandbox, and the round trip of one command, in one run.

    python -m benchmarks.sandbox_reset [--n 15] [--exec-n 200]

"Usable" means the first `exec("true")` has returned, for every variant:
- fresh container: `create(backend="docker")` (the baseline a pool must beat by >= 10x);
- pool lease: `Pool(size=4)`, warm, leased and returned in a loop (cleaning happens in the
  background between leases);
- snapshot restore: a workdir with 100 changed files put back to its snapshot;
- local backend: `create(backend="local")` (bubblewrap).
And p50/p95 of `exec("true")` on a warm docker sandbox (through skyhub's in-sandbox agent)
next to the Docker API's own `container.exec_run("true")`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from benchmarks._common import result, write

NEEDS = ("docker",)  # `python -m benchmarks` skips this benchmark without it


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def timed(fn: Callable[[], object], n: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def fresh_sandbox_times(backend: str, n: int) -> list[float]:
    """Seconds from `create` to the first `exec("true")` returning (removal is not timed)."""
    from skyhub.sandbox import create

    out = []
    for _ in range(n):
        t = time.perf_counter()
        sb = create(backend=backend)
        sb.exec("true")
        out.append(time.perf_counter() - t)
        sb.close()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=15, help="samples per reset variant")
    ap.add_argument("--exec-n", type=int, default=200, help="samples of exec('true')")
    args = ap.parse_args(argv)

    from rich.progress import Progress

    from skyhub.sandbox import Pool, create, images

    images.build(quiet=True)
    ms: dict[str, list[float]] = {}
    with Progress(transient=True) as progress:
        bar = progress.add_task("sandbox_reset", total=6)

        ms["fresh container"] = fresh_sandbox_times("docker", args.n)
        progress.advance(bar)

        with Pool(size=4, backend="docker") as pool:
            pool.wait_ready()
            leases = []
            for _ in range(args.n * 2):
                pool.wait_ready(timeout=30)
                t = time.perf_counter()
                with pool.lease() as sb:
                    sb.exec("true")
                    leases.append(time.perf_counter() - t)
                    sb.write_file("dirty.txt", "x")  # cleaned before the next lease
            ms["pool lease"] = leases
        progress.advance(bar)

        with create(backend="docker") as sb:
            for i in range(100):
                sb.write_file(f"src/file{i}.txt", f"original {i}\n" * 20)
            snap = sb.snapshot()
            restores = []
            for _ in range(args.n):
                sb.exec("for i in $(seq 0 99); do echo changed >> src/file$i.txt; done; "
                        "mkdir -p junk && touch junk/a junk/b")
                t = time.perf_counter()
                sb.restore(snap)
                sb.exec("true")
                restores.append(time.perf_counter() - t)
            ms["snapshot restore (100 changed files)"] = restores
        progress.advance(bar)

        ms["local backend (bubblewrap)"] = fresh_sandbox_times("local", args.n)
        with create(backend="local") as sb:
            local_exec = timed(lambda: sb.exec("true"), max(args.exec_n // 2, 20), warmup=3)
        progress.advance(bar)

        with create(backend="docker") as sb:
            ours = timed(lambda: sb.exec("true"), args.exec_n, warmup=5)
            container = sb.container  # the same container, through Docker's exec API
            api = timed(lambda: container.exec_run("true"), max(args.exec_n // 4, 20), warmup=2)
        progress.advance(bar)

    fresh_p50 = statistics.median(ms["fresh container"])
    rows = []
    for name, xs in ms.items():
        p50, p95 = statistics.median(xs) * 1e3, pct(xs, 0.95) * 1e3
        goal = {"pool lease": ">= 10x faster than fresh (p50)",
                "snapshot restore (100 changed files)": "faster than fresh (p50)"}.get(name, "")
        met = None
        if name == "pool lease":
            met = fresh_p50 * 1e3 / p50 >= 10
        elif name.startswith("snapshot"):
            met = p50 < fresh_p50 * 1e3
        rows.append(result(f"{name}: p50 ms to a clean, usable sandbox", p50,
                           "fresh container p50 ms", fresh_p50 * 1e3,
                           goal or "(informative)", ratio=fresh_p50 * 1e3 / p50, met=met,
                           unit="ms", note=f"p95 {p95:.1f} ms, n={len(xs)}"))
    p50, p95 = statistics.median(ours) * 1e3, pct(ours, 0.95) * 1e3
    a50, a95 = statistics.median(api) * 1e3, pct(api, 0.95) * 1e3
    rows.append(result("exec('true') round trip p50 ms, warm docker sandbox", p50,
                       "Docker API exec_run p50 ms", a50, "< 10 ms", ratio=a50 / p50,
                       met=p50 < 10, unit="ms",
                       note=f"p95 {p95:.2f} ms vs Docker API p95 {a95:.1f} ms"))
    l50, l95 = statistics.median(local_exec) * 1e3, pct(local_exec, 0.95) * 1e3
    rows.append(result("exec('true') round trip p50 ms, local backend (bubblewrap)", l50,
                       "Docker API exec_run p50 ms", a50, "(informative)", ratio=a50 / l50,
                       unit="ms", note=f"p95 {l95:.2f} ms; a new bwrap process per command"))
    write("sandbox_reset", rows, params=vars(args))


if __name__ == "__main__":
    main()
