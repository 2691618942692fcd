"""Terminal envs: time to a clean episode, and a command's round trip, in one run.

    python -m benchmarks.terminal_env [--n 10] [--cmds 200]

Time to a clean episode (from `reset()` called to the observation returned: a shell ready
in the task's starting state):
- cold: `harbor-examples` (a new container of the task's cached image, then a shell), the
  baseline; the image build itself is cached by content and not timed;
- snapshot-restored: `terminal-synth` on Docker (its one container's workdir and processes
  restored to the clean snapshot, the task's setup run, a new shell);
- pooled: a warm sandbox leased from `skyhub.sandbox.Pool` plus a new shell.
Goal: snapshot-restored and pooled >= 3x faster than cold.
Command round trip: `ShellSession.run("true")` on a live shell against `docker exec true`
through the Docker API (what running each command as its own exec would cost). Goal: <= 0.2x.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks._common import result, write

NEEDS = ("docker",)  # `python -m benchmarks` skips this benchmark without it


def median_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1e3


def episode_resets(env_id: str, n: int, **kwargs: object) -> list[float]:
    import skyhub

    out = []
    with skyhub.make(env_id, **kwargs) as env:
        env.reset(seed=0)  # builds (or finds) the image; not timed
        for i in range(n):
            t = time.perf_counter()
            env.reset(seed=i)
            out.append(time.perf_counter() - t)
    return out


def pooled_resets(n: int) -> list[float]:
    from skyhub.sandbox import Pool
    from skyhub.shell.session import ShellSession

    out = []
    with Pool(size=2, backend="docker") as pool:
        with pool.lease():
            pass
        for _ in range(n):
            time.sleep(0.5)  # the returned sandbox is cleaned in the background meanwhile
            t = time.perf_counter()
            with pool.lease() as sb:
                shell = ShellSession(sb)
                out.append(time.perf_counter() - t)
                shell.close()
    return out


def round_trips(n: int) -> tuple[list[float], list[float]]:
    from skyhub.sandbox import create
    from skyhub.shell.session import ShellSession

    ours, docker_exec = [], []
    with create(backend="docker") as sb, ShellSession(sb) as shell:
        shell.run("true")
        for _ in range(n):
            t = time.perf_counter()
            shell.run("true")
            ours.append(time.perf_counter() - t)
        for _ in range(min(n, 50)):
            t = time.perf_counter()
            sb.container.exec_run(["true"])
            docker_exec.append(time.perf_counter() - t)
    return ours, docker_exec


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10, help="episodes timed per variant")
    ap.add_argument("--cmds", type=int, default=200, help="commands timed")
    args = ap.parse_args(argv)

    cold = median_ms(episode_resets("harbor-examples", args.n))
    restored = median_ms(episode_resets("terminal-synth", args.n, backend="docker", n_tasks=50))
    pooled = median_ms(pooled_resets(args.n))
    ours, dexec = round_trips(args.cmds)
    rows = [
        result("clean episode, snapshot-restored (terminal-synth)", restored,
               "cold: new container (harbor-examples)", cold, ">= 3x faster",
               ratio=cold / restored, met=cold / restored >= 3, unit="ms",
               note="includes the task's setup script and a new shell"),
        result("clean episode, pooled sandbox + shell", pooled,
               "cold: new container (harbor-examples)", cold, ">= 3x faster",
               ratio=cold / pooled, met=cold / pooled >= 3, unit="ms"),
        result("command round trip p50", median_ms(ours), "docker exec per command",
               median_ms(dexec), "<= 0.2x", met=median_ms(ours) <= 0.2 * median_ms(dexec),
               unit="ms"),
    ]
    write("terminal_env", rows, n=args.n, cmds=args.cmds)


if __name__ == "__main__":
    main()
