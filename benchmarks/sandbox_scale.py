"""Many live docker sandboxes on one host: memory, creation rate, exec and lease under load.

    python -m benchmarks.sandbox_scale [--n 500] [--parallel 8] [--serial-n 20]

In one run, against baselines measured in the same run:
- creation, serial: `create(backend="docker")` to the first `exec("true")`, one at a time
  (`--serial-n` of them, closed after each); its mean gives the serial rate and its p50 is the
  fresh-container baseline of the lease;
- creation, parallel: a `Pool(size=n, create_parallel=k)` filled from empty (each sandbox
  created and snapshotted, k in flight, through the process's creation limiter): n / the
  time until all n are ready;
- host memory per idle sandbox: the drop in the host's MemAvailable from before the pool to
  all n ready, over n (the containers, their shims and the guests inside; the host is
  shared, so other work moves this figure: the load average is recorded);
- exec('true') p50 with n live (round robin over 50 leased sandboxes) against the p50 with
  one live sandbox;
- lease p50 from the pool of n (to the first `exec("true")` returning) against a fresh
  container's p50;
- every one of the n sandboxes leased at once and asked `echo`: how many answer.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks._common import result, write
from benchmarks.sandbox_reset import pct, timed

NEEDS = ("docker",)  # `python -m benchmarks` skips this benchmark without it
HOST_GIB, TARGET = 24, 500  # the goal: 500 live sandboxes on a 24 GiB host


def mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def container_mib(ids: list[str]) -> float | None:
    """Mean memory charged to these containers' own cgroups (v1 cgroupfs or v2), MiB."""
    found = []
    for cid in ids:
        for path in (f"/sys/fs/cgroup/memory/docker/{cid}/memory.usage_in_bytes",
                     f"/sys/fs/cgroup/docker/{cid}/memory.current",
                     f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/memory.current"):
            with contextlib.suppress(OSError, ValueError):
                found.append(int(Path(path).read_text()) / 2**20)
                break
    return statistics.mean(found) if found else None


def other_containers() -> int:
    r = subprocess.run(["docker", "ps", "-q"], capture_output=True, text=True, timeout=60)
    return len(r.stdout.split())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=TARGET, help="live sandboxes to hold")
    ap.add_argument("--parallel", type=int, default=8, help="creations in flight (the pool's "
                    "create_parallel; the process limiter allows 8 unless configured)")
    ap.add_argument("--serial-n", type=int, default=20, help="sandboxes created one at a time")
    ap.add_argument("--exec-n", type=int, default=300, help="samples of exec('true')")
    ap.add_argument("--lease-n", type=int, default=100, help="samples of a pool lease")
    args = ap.parse_args(argv)

    from skyhub.sandbox import Pool, create, images, ratelimit
    from skyhub.sandbox.docker_client import get_client

    images.build(quiet=True)
    ratelimit.configure(concurrency=max(args.parallel, ratelimit.DEFAULT_CONCURRENCY))
    load_start, others = os.getloadavg(), other_containers()

    # -- one live sandbox: the baselines
    fresh = []
    for _ in range(args.serial_n + 1):  # the first one warms up (image, client)
        t = time.perf_counter()
        sb = create(backend="docker")
        sb.exec("true")
        fresh.append(time.perf_counter() - t)
        sb.close()
    fresh = fresh[1:]
    serial_rate = 1 / statistics.mean(fresh)
    with create(backend="docker") as sb:
        exec_one = timed(lambda: sb.exec("true"), args.exec_n, warmup=5)

    # -- n live sandboxes
    before = mem_available_mib()
    t = time.perf_counter()
    pool = Pool(size=args.n, create_parallel=args.parallel, backend="docker")
    try:
        ready = pool.wait_ready(timeout=max(600, args.n * 4))
        fill_s = time.perf_counter() - t
        after = mem_available_mib()
        if ready < args.n:
            raise SystemExit(f"only {ready} of {args.n} sandboxes became ready in {fill_s:.0f} s"
                             f" ({pool.stats.last_error or 'no error'})")
        parallel_rate = args.n / fill_s
        per_sandbox = (before - after) / args.n
        own = container_mib([c.id for c in get_client().containers.list(
            filters={"label": f"skyhub.pool={pool.name}"})])

        leases = []
        for _ in range(args.lease_n):
            pool.wait_ready(timeout=60)  # the last lease cleaned: a lease, not a restore
            t = time.perf_counter()
            with pool.lease() as sb:
                sb.exec("true")
                leases.append(time.perf_counter() - t)
                sb.write_file("dirty.txt", "x")  # cleaned in the background

        pool.wait_ready(timeout=600)
        with contextlib.ExitStack() as stack:
            some = [stack.enter_context(pool.lease()) for _ in range(min(50, args.n))]
            k = iter(range(10**9))
            exec_n = timed(lambda: some[next(k) % len(some)].exec("true"), args.exec_n,
                           warmup=len(some))

        pool.wait_ready(timeout=600)
        with contextlib.ExitStack() as stack:  # all n at once, each asked to answer
            every = [stack.enter_context(pool.lease()) for _ in range(args.n)]
            answering = sum(sb.exec("echo ok").stdout == "ok\n" for sb in every)
            distinct = len({sb.id for sb in every})
        load_end = os.getloadavg()
    finally:
        t = time.perf_counter()
        pool.close()
        close_s = time.perf_counter() - t

    load = f"load average {load_start[0]:.1f} at start, {load_end[0]:.1f} at the end; " \
           f"{others} other containers running"
    budget = HOST_GIB * 1024 / TARGET
    fresh_p50, one_p50 = statistics.median(fresh) * 1e3, statistics.median(exec_one) * 1e3
    n_p50, lease_p50 = statistics.median(exec_n) * 1e3, statistics.median(leases) * 1e3
    rows = [
        result(f"host memory per idle sandbox, MiB ({args.n} live)", per_sandbox,
               f"budget for {TARGET} on a {HOST_GIB} GiB host, MiB", budget,
               f"<= {budget:.0f} MiB each", ratio=budget / per_sandbox if per_sandbox > 0
               else None, met=0 < per_sandbox <= budget, unit="MiB",
               note=f"MemAvailable {before:.0f} -> {after:.0f} MiB" + (
                   "" if own is None else f"; {own:.1f} MiB each in the containers' own "
                   "cgroups (the rest: shims, dockerd, the host's side)") +
               f"; shared host, {load}"),
        result("live docker sandboxes held, all answering exec", answering,
               "sandboxes asked for", args.n, f">= {TARGET}, all answering", ratio=None,
               met=answering == args.n >= TARGET and distinct == args.n, unit="sandboxes",
               note=f"all {args.n} leased at once; pool closed in {close_s:.0f} s"),
        result(f"creation rate, {args.parallel} in flight (pool fill), sandboxes/s",
               parallel_rate, "one at a time, sandboxes/s", serial_rate, "> serial",
               ratio=parallel_rate / serial_rate, met=parallel_rate > serial_rate,
               unit="/s", note=f"{args.n} created and snapshotted in {fill_s:.0f} s; serial: "
               f"{args.serial_n} created, p50 {fresh_p50:.0f} ms each; 2 cores"),
        result(f"exec('true') p50 ms with {args.n} live", n_p50,
               "exec p50 ms with 1 live", one_p50, "< 10 ms", ratio=one_p50 / n_p50,
               met=n_p50 < 10, unit="ms", note=f"p95 {pct(exec_n, 0.95) * 1e3:.2f} ms vs "
               f"{pct(exec_one, 0.95) * 1e3:.2f} ms with 1 live; round robin over 50"),
        result(f"pool lease p50 ms from a pool of {args.n}", lease_p50,
               "fresh container p50 ms", fresh_p50, ">= 10x faster than fresh (p50)",
               ratio=fresh_p50 / lease_p50, met=fresh_p50 / lease_p50 >= 10, unit="ms",
               note=f"p95 {pct(leases, 0.95) * 1e3:.1f} ms, n={len(leases)}; to the first "
               "exec('true') returning"),
    ]
    write("sandbox_scale", rows, params=vars(args))


if __name__ == "__main__":
    main()
