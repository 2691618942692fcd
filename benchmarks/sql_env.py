"""SQL env throughput on Spider dev episodes: skyhub's `sql-spider` against skyrl-gym's
`text2sql` and against raw sqlite3 running the same queries, in one run.

    python -m benchmarks.sql_env [--episodes 972] [--repeats 4] [--profile]

Every contender plays the same episodes (dev question i of the bundled Spider subset, cycling):
reset; step `<think>...</think><sql>GOLD</sql>`; step `<think>...</think><solution>GOLD
</solution>`. "Steps" are the two `step()` calls; resets are timed apart (a skyhub reset
renders the schema prompt, cached per database file; a skyrl-gym "reset" is `skyrl_gym.make`
plus `init(prompt)` with the prompt built beforehand, as SkyRL's generator does).

1. skyhub, one env in this process, against skyrl-gym `text2sql` (goal >= 10x steps/s).
   skyrl-gym runs in a subprocess of this script (its own virtualenv: it pulls pandas; see
   benchmarks/requirements-bench.txt), in turn with the other contenders.
2. skyhub against raw sqlite3: the gold query executed twice per episode (once per step) on
   one reused read-only connection per database, `fetchall()` (goal >= 0.5 of its rate). The
   env does more per episode: its solution step also runs the gold query for the reward (once
   per task), so an informative row compares with raw sqlite3 running those 3 queries.
3. `skyhub.make_vec("sql-spider", k)` in lockstep (threads) for k = 1, 2, 4, 8 on the same
   episodes: steps/s against k = 1 (informative; SQLite releases the GIL while a statement
   runs, the Python around it does not).

Contenders take turns, pass after pass (the first pass of each is an untimed warm-up), and the
fastest pass of each counts: on a shared machine that is the least disturbed one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import result, write

REPO = Path(__file__).resolve().parents[1]
BENCH_VENV_PYTHON = REPO / ".venv-bench" / "bin" / "python"
CHUNK = 25  # episodes between progress updates (never inside a timed region)
VEC_SIZES = (1, 2, 4, 8)


def sql_action(gold: str) -> str:
    return f"<think>Let me look at what this query returns.</think>\n<sql>{gold}</sql>"


def solution_action(gold: str) -> str:
    return f"<think>The result answers the question.</think>\n<solution>{gold}</solution>"


def load_episodes(n: int, data_dir: str | None) -> tuple[list[dict[str, str]], Path]:
    """`n` episodes (dev task i mod the number of tasks) and the Spider root (holding
    `database/`)."""
    from skyhub.envs.sql.datasets import load

    data = load("spider", data_dir=data_dir, split="dev")
    tasks = list(data.tasks)
    paths = {db: str(data.db_path(db)) for db in {t.meta["db_id"] for t in tasks}}
    eps = [{"task_id": t.id, "db_id": t.meta["db_id"], "question": t.prompt,
            "gold": str(t.answer), "path": paths[t.meta["db_id"]]}
           for t in (tasks[i % len(tasks)] for i in range(n))]
    return eps, Path(eps[0]["path"]).parents[2]  # <root>/database/<db>/<db>.sqlite


class Bar:
    """A rich progress task advanced between timed regions (or nothing, without rich)."""

    def __init__(self, progress: Any = None, task: Any = None) -> None:
        self.progress, self.task = progress, task

    def advance(self, n: int) -> None:
        if self.progress is not None:
            self.progress.advance(self.task, n)


# ---------------------------------------------------------------------------- contenders
def run_raw(eps: list[dict[str, str]], queries: int = 2,
            bar: Bar | None = None) -> dict[str, float]:
    """Seconds for plain sqlite3 to run each episode's gold query `queries` times: 2 = the two
    steps (`fetchall`), 3 = what the env runs (the `<sql>` step's query, as it fetches up to 51
    rows, plus the reward's gold query and the solution). Connections (read-only, immutable,
    as skyhub's engine opens them) are opened before timing."""
    cons = {e["db_id"]: sqlite3.connect(f"file:{e['path']}?mode=ro&immutable=1", uri=True)
            for e in eps}
    wall = cpu = 0.0
    for start in range(0, len(eps), CHUNK):
        chunk = eps[start:start + CHUNK]
        t, c = time.perf_counter(), time.thread_time()
        if queries == 2:
            for e in chunk:
                con, gold = cons[e["db_id"]], e["gold"]
                con.execute(gold).fetchall()
                con.execute(gold).fetchall()
        else:
            for e in chunk:
                con, gold = cons[e["db_id"]], e["gold"]
                con.execute(gold).fetchmany(51)
                con.execute(gold).fetchall()
                con.execute(gold).fetchall()
        wall += time.perf_counter() - t
        cpu += time.thread_time() - c
        (bar or Bar()).advance(len(chunk))
    for con in cons.values():
        con.close()
    return {"step_s": wall, "cpu_s": cpu}


def run_skyhub(eps: list[dict[str, str]], data_dir: str | None, bar: Bar | None = None,
               profiler: Any = None, result_cache: bool = True) -> dict[str, Any]:
    """A fresh `sql-spider` env plays every episode; reset and step time apart. With
    `profiler` (a cProfile.Profile), only the episodes are profiled, not the env's creation.
    `result_cache=False` makes the env run every query (no reuse of a result within an
    episode, no gold results shared across envs)."""
    import skyhub

    env = skyhub.make("sql-spider", result_cache=result_cache,
                      **({"data_dir": data_dir} if data_dir else {}))
    acts = [(sql_action(e["gold"]), solution_action(e["gold"])) for e in eps]
    reset_s = step_s = cpu_s = 0.0
    rewards = []
    clock, cpu_clock = time.perf_counter, time.thread_time
    if profiler is not None:
        profiler.enable()
    for start in range(0, len(eps), CHUNK):
        for e, (a1, a2) in zip(eps[start:start + CHUNK], acts[start:start + CHUNK],
                               strict=True):
            t0 = clock()
            env.reset(options={"task_id": e["task_id"]})
            t1, c1 = clock(), cpu_clock()
            env.step(a1)
            _, reward, *_ = env.step(a2)
            t2, c2 = clock(), cpu_clock()
            reset_s += t1 - t0
            step_s += t2 - t1
            cpu_s += c2 - c1
            rewards.append(reward)
        (bar or Bar()).advance(min(CHUNK, len(eps) - start))
    if profiler is not None:
        profiler.disable()
    env.close()
    return {"reset_s": reset_s, "step_s": step_s, "cpu_s": cpu_s, "rewards": rewards}


def run_skyhub_vec(eps: list[dict[str, str]], k: int, data_dir: str | None,
                   bar: Bar | None = None, executor: str = "threads") -> dict[str, Any]:
    """`make_vec("sql-spider", k)`, lockstep: rounds of k episodes (reset, step, step);
    `ceil(len(eps) / k)` rounds, the last one topped up from the start of the list."""
    import skyhub

    rounds = math.ceil(len(eps) / k)
    venv = skyhub.make_vec("sql-spider", k, executor=executor,
                           **({"data_dir": data_dir} if data_dir else {}))
    reset_s = step_s = 0.0
    clock = time.perf_counter
    try:
        for r in range(rounds):
            batch = [eps[(r * k + j) % len(eps)] for j in range(k)]
            a1 = [sql_action(e["gold"]) for e in batch]
            a2 = [solution_action(e["gold"]) for e in batch]
            t0 = clock()
            venv.reset(options=[{"task_id": e["task_id"]} for e in batch])
            t1 = clock()
            venv.step(a1)
            venv.step(a2)
            t2 = clock()
            reset_s += t1 - t0
            step_s += t2 - t1
            (bar or Bar()).advance(k)
    finally:
        venv.close()
    return {"reset_s": reset_s, "step_s": step_s, "episodes": rounds * k}


# ------------------------------------------------------------------- skyrl-gym (subprocess)
def skyrl_worker() -> None:
    """Body of the skyrl-gym subprocess. Reads one JSON line {db_root, episodes}, then runs
    one pass per `pass` line, writing `progress N` lines and one `result {...}` line per pass;
    stops at `quit` or end of input. Needs only skyrl-gym (not skyhub, nor rich)."""
    from importlib.metadata import version

    import skyrl_gym
    from omegaconf import DictConfig

    req = json.loads(sys.stdin.readline())
    eps, cfg = req["episodes"], DictConfig({"db_path": req["db_root"]})
    acts = [(sql_action(e["gold"]), solution_action(e["gold"])) for e in eps]
    out, clock, cpu_clock = sys.stdout, time.perf_counter, time.process_time
    out.write("ready " + json.dumps({"version": version("skyrl-gym")}) + "\n")
    out.flush()
    for line in sys.stdin:
        if line.strip() != "pass":
            break
        reset_s = step_s = cpu_s = 0.0
        rewards = []
        for start in range(0, len(eps), CHUNK):
            for e, (a1, a2) in zip(eps[start:start + CHUNK], acts[start:start + CHUNK],
                                   strict=True):
                t0 = clock()
                env = skyrl_gym.make("text2sql", env_config=cfg, extras={
                    "db_id": e["db_id"], "reward_spec": {"ground_truth": e["gold"]},
                    "data": "spider", "max_turns": 6})
                env.init([{"role": "user", "content": e["question"]}])
                t1, c1 = clock(), cpu_clock()  # CPU time of all threads (skyrl's included)
                env.step(a1)
                reward = env.step(a2)["reward"]
                t2, c2 = clock(), cpu_clock()
                env.close()
                reset_s += t1 - t0
                step_s += t2 - t1
                cpu_s += c2 - c1
                rewards.append(reward)
            out.write(f"progress {min(CHUNK, len(eps) - start)}\n")
            out.flush()
        out.write("result " + json.dumps({"reset_s": reset_s, "step_s": step_s,
                                          "cpu_s": cpu_s, "rewards": rewards}) + "\n")
        out.flush()


class SkyrlRunner:
    """Drives the skyrl-gym worker subprocess, one pass at a time."""

    def __init__(self, python: str, eps: list[dict[str, str]], spider_root: Path) -> None:
        # skyrl-gym's text2sql wants <db_path>/spider/database/<db_id>/<db_id>.sqlite
        self._tmp = tempfile.TemporaryDirectory(prefix="skyhub-bench-skyrl-")
        (Path(self._tmp.name) / "spider").symlink_to(spider_root)
        self.cmd = f"{python} -m benchmarks.sql_env --skyrl-worker"
        self.proc = subprocess.Popen(
            [python, "-m", "benchmarks.sql_env", "--skyrl-worker"], cwd=REPO, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        episodes = [{k: e[k] for k in ("db_id", "question", "gold")} for e in eps]
        self._send(json.dumps({"db_root": self._tmp.name, "episodes": episodes}))
        self.version = self._wait("ready", Bar())["version"]

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def _wait(self, what: str, bar: Bar) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("progress "):
                bar.advance(int(line.split()[1]))
            elif line.startswith(what + " "):
                return json.loads(line[len(what) + 1:])
        raise SystemExit(f"the skyrl-gym worker ({self.cmd}) exited with status "
                         f"{self.proc.wait()} before answering; see its error above")

    def run_pass(self, bar: Bar) -> dict[str, Any]:
        self._send("pass")
        return self._wait("result", bar)

    def close(self) -> None:
        with contextlib.suppress(OSError):  # the worker may be gone already
            self._send("quit")
        self.proc.wait(30)
        self._tmp.cleanup()


def find_skyrl_python(explicit: str | None) -> str | None:
    """The interpreter that has skyrl-gym: `--skyrl-python`, else this one if it imports
    skyrl_gym, else `.venv-bench/bin/python`; None when there is none."""
    if explicit:
        return explicit
    import importlib.util

    if importlib.util.find_spec("skyrl_gym") is not None:
        return sys.executable
    if BENCH_VENV_PYTHON.exists():
        return str(BENCH_VENV_PYTHON)
    return None


# ---------------------------------------------------------------------------- main
def profile_skyhub(eps: list[dict[str, str]], data_dir: str | None, top: int = 15) -> None:
    import cProfile
    import pstats

    prof = cProfile.Profile()
    run_skyhub(eps, data_dir, profiler=prof)
    print(f"\ncProfile of one skyhub pass ({len(eps)} episodes, env creation excluded), "
          f"top {top} by own time:")
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=972,
                    help="episodes per pass (dev question i, cycling over the 972 bundled)")
    ap.add_argument("--repeats", type=int, default=4,
                    help="timed passes per contender (after one warm-up pass)")
    ap.add_argument("--data-dir", default=None, help="a Spider release (default: bundled)")
    ap.add_argument("--skyrl-python", default=None,
                    help="interpreter with skyrl-gym (default: this one, else .venv-bench)")
    ap.add_argument("--no-skyrl", action="store_true", help="skip the skyrl-gym comparison")
    ap.add_argument("--profile", action="store_true",
                    help="also print a cProfile of one skyhub pass (top 15)")
    ap.add_argument("--skyrl-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.skyrl_worker:
        return skyrl_worker()
    if args.episodes < 1 or args.repeats < 1:
        raise SystemExit("--episodes and --repeats must be >= 1")

    skyrl_python = None if args.no_skyrl else find_skyrl_python(args.skyrl_python)
    if not args.no_skyrl and skyrl_python is None:
        raise SystemExit(
            "skyrl-gym is not installed here nor in .venv-bench. Install it apart from skyhub "
            "(it pulls pandas): 'python -m venv .venv-bench && .venv-bench/bin/pip install "
            "-r benchmarks/requirements-bench.txt', or pass --skyrl-python PATH, or --no-skyrl")

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    eps, spider_root = load_episodes(args.episodes, args.data_dir)
    n, passes = len(eps), args.repeats + 1
    rl = None if skyrl_python is None else SkyrlRunner(skyrl_python, eps, spider_root)
    times: dict[str, list[Any]] = {}
    try:
        with Progress(TextColumn("{task.description:<30}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn()) as progress:
            def bar(label: str, total: int) -> Bar:
                return Bar(progress, progress.add_task(label, total=total))

            bars = {"raw2": bar("raw sqlite3, 2 queries/episode", n * passes),
                    "raw3": bar("raw sqlite3, 3 queries/episode", n * passes),
                    "skyhub": bar("skyhub sql-spider", n * passes),
                    "nocache": bar("skyhub, result_cache=False", n * passes),
                    "proc2": bar("skyhub make_vec k=2 processes", math.ceil(n / 2) * 2 * passes)}
            if rl is not None:
                bars["skyrl"] = bar(f"skyrl-gym {rl.version} text2sql", n * passes)
            for k in VEC_SIZES:
                bars[f"vec{k}"] = bar(f"skyhub make_vec k={k}", math.ceil(n / k) * k * passes)
            for p in range(passes):  # contenders take turns; pass 0 warms up
                got = {"raw2": run_raw(eps, 2, bars["raw2"]),
                       "raw3": run_raw(eps, 3, bars["raw3"]),
                       "skyhub": run_skyhub(eps, args.data_dir, bars["skyhub"]),
                       "nocache": run_skyhub(eps, args.data_dir, bars["nocache"],
                                             result_cache=False),
                       "proc2": run_skyhub_vec(eps, 2, args.data_dir, bars["proc2"],
                                               executor="processes")}
                if rl is not None:
                    got["skyrl"] = rl.run_pass(bars["skyrl"])
                for k in VEC_SIZES:
                    got[f"vec{k}"] = run_skyhub_vec(eps, k, args.data_dir, bars[f"vec{k}"])
                if p > 0:
                    for name, v in got.items():
                        times.setdefault(name, []).append(v)
    finally:
        if rl is not None:
            rl.close()

    def best(name: str, key: str = "step_s") -> Any:  # the least disturbed pass
        return min(times[name], key=lambda v: v[key])

    def cpu_ratio(name: str) -> float:  # ours/baseline in CPU time: less sensitive to load
        return best(name, "cpu_s")["cpu_s"] / best("skyhub", "cpu_s")["cpu_s"]

    steps = 2 * n
    hub = best("skyhub")
    hub_rate, hub_reset_us = steps / hub["step_s"], hub["reset_s"] / n * 1e6
    hub_ok = sum(r == 1.0 for r in hub["rewards"])
    raw2, raw3 = steps / best("raw2")["step_s"], steps / best("raw3")["step_s"]
    spread = (max(v["step_s"] for v in times["skyhub"]) / hub["step_s"] - 1) * 100
    common = (f"{n} episodes, best of {args.repeats} passes (skyhub's slowest pass "
              f"+{spread:.0f}%)")
    rows = []
    if rl is not None:
        sk = best("skyrl")
        rl_rate, rl_reset_us = steps / sk["step_s"], sk["reset_s"] / n * 1e6
        rl_ok = sum(r == 1.0 for r in sk["rewards"])
        agree = sum(a == b for a, b in zip(hub["rewards"], sk["rewards"], strict=True))
        base = f"skyrl-gym {rl.version} text2sql"
        rows.append(result(
            "steps/s, one env (Spider dev: gold <sql>, then <solution>)", hub_rate, base,
            rl_rate, ">= 10x", met=hub_rate / rl_rate >= 10,
            note=f"{common}; {1e6 / hub_rate:.0f} us vs {1e6 / rl_rate:.0f} us per step; "
                 f"in CPU time (all threads) {cpu_ratio('skyrl'):.1f}x; reward 1 in "
                 f"{hub_ok}/{n} (skyhub) and {rl_ok}/{n} (skyrl-gym) episodes, the same reward "
                 f"in {agree}/{n}"))
        rows.append(result(
            "episodes/s incl. reset, one env", n / (hub["step_s"] + hub["reset_s"]), base,
            n / (sk["step_s"] + sk["reset_s"]), "(informative)",
            note=f"reset {hub_reset_us:.0f} us (skyhub: schema prompt, cached per db) vs "
                 f"{rl_reset_us:.0f} us (skyrl-gym: make + init of a prompt built beforehand)"))
    rows.append(result(
        "steps/s, one env, against raw sqlite3 running the 2 queries", hub_rate,
        "raw sqlite3, 2 queries/episode", raw2, ">= 0.5 of raw", met=hub_rate / raw2 >= 0.5,
        note=f"{common}; in CPU time {cpu_ratio('raw2'):.2f}x; raw: one reused "
             "read-only connection per db, fetchall(); the env (result_cache on, its default) "
             "runs the <sql> step's query and reuses that result for the identical solution "
             "and gold query, renders the table and checks the trajectory's format; see the "
             "result_cache=False rows for every query run"))
    rows.append(result(
        "steps/s, one env, against raw sqlite3 running the env's 3 queries", hub_rate,
        "raw sqlite3, 3 queries/episode", raw3, "(informative)",
        note=f"in CPU time {cpu_ratio('raw3'):.2f}x; raw: the <sql> step's query (up to "
             "51 rows), the reward's gold query and the solution, as the env runs them"))
    nc = best("nocache")
    nc_rate = steps / nc["step_s"]
    if rl is not None:
        rows.append(result(
            "steps/s, one env, result_cache=False", nc_rate, f"skyrl-gym {rl.version} text2sql",
            rl_rate, "(informative: every query run)",
            note="no reuse of the <sql> step's result by the solution and the gold query: "
                 "the env runs 3 queries per episode, as skyrl-gym does"))
    rows.append(result(
        "steps/s, one env, result_cache=False, against raw sqlite3 running the same 3 queries",
        nc_rate, "raw sqlite3, 3 queries/episode", raw3, "(informative)",
        note=f"in CPU time {best('raw3', 'cpu_s')['cpu_s'] / nc['cpu_s']:.2f}x"))
    vec1 = best("vec1")
    base_vec = 2 * vec1["episodes"] / vec1["step_s"]
    for k in VEC_SIZES:
        v = best(f"vec{k}")
        rate = 2 * v["episodes"] / v["step_s"]
        rows.append(result(
            f"make_vec k={k}, lockstep steps/s", rate, "make_vec k=1", base_vec,
            "(informative: scaling with k)",
            note=f"{v['episodes']} episodes; {v['episodes'] / (v['step_s'] + v['reset_s']):.0f} "
                 f"episodes/s incl. reset; {os.cpu_count()} cores; one env without make_vec: "
                 f"{hub_rate:.0f} steps/s"))
    p2 = best("proc2")
    rows.append(result(
        "make_vec k=2, processes, lockstep steps/s", 2 * p2["episodes"] / p2["step_s"],
        "make_vec k=1", base_vec, "(informative: scaling across cores)",
        note="each env in its own process: the GIL no longer serialises the envs' Python"))
    write("sql_env", rows, params={k: v for k, v in vars(args).items()
                                   if k not in ("skyrl_worker", "skyrl_python")},
          skyrl_gym=None if rl is None else rl.version)
    if args.profile:
        profile_skyhub(eps, args.data_dir)


if __name__ == "__main__":
    main()
