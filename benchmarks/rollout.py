"""Rollout scheduling: every episode on its own against the batch barrier, with stragglers.

    python -m benchmarks.rollout [--episodes 128] [--envs 16] [--turns 4] [--latency 0.04]

A scripted engine whose per-request latency is controlled (one request in five takes 5x
`latency`) and an env whose steps take 20-100 ms: trajectories per second of one rollout step
of `skyhub.trainer.rollout.Rollout` (each episode submits its next turn when its env answers,
and steps its env when its completion arrives) against `BarrierRollout`, a faithful copy of
the scheduling `Rollout` had before (at most `num_envs` episodes; one `generate` call for
every episode waiting for its turn, waiting for all of it before any env sees a result), in
the same run, on the same engine. Three shapes:

1. the recipe's: more episodes than envs (`--episodes` on `--envs`); the request-level rollout
   has all of them in flight (it leases them envs of its own, see `Rollout`), the barrier
   `num_envs` at most. The goal row (>= 2.5x).
2. the same, with the request-level rollout held to the envs given (`max_in_flight=envs`):
   what the scheduling alone buys.
3. one env per episode for both (64 episodes): both play every episode at once, and a step
   lasts at least its slowest episode, which bounds what any scheduling can gain there.

The engine models a continuously batching server that is not compute bound: a request takes
its own latency whatever else runs, and a batch `generate` returns when its slowest request
is done. Both schedulers see the same engine, so the ratio is what scheduling alone buys.

The weight-sync section (in-memory against file sync) comes from
`benchmarks/_rollout_sync.py`'s `run_weight_sync()` when that file exists; its `results`
rows join this file's and its other keys go under `"weight_sync"`.
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from benchmarks._common import result, write
from skyhub import Task, TaskSet, TextEnv
from skyhub.chat import Episode
from skyhub.trainer.config import RolloutConfig
from skyhub.trainer.inference import Completion, SamplingParams
from skyhub.trainer.rollout import Rollout, Trajectory
from skyhub.vector import VectorEnv


class BarrierRollout(Rollout):
    """The rollout's scheduling before request-level episodes (the baseline, kept here):
    at most `num_envs` episodes, and whichever are waiting for their turn share one
    `generate` call, which every env result waits for."""

    def run(self, task_ids: Sequence[str], group_size: int, *, seed: int = 0
            ) -> list[Trajectory]:
        todo = deque(Trajectory(group=g, task_id=t, seed=seed * 1_000_003 + g * group_size + j)
                     for g, t in enumerate(task_ids) for j in range(group_size))
        episodes = list(todo)
        for t in episodes:
            t.episode = Episode(t.task_id, None, "", seed=t.seed, task_index=t.group)
        free = deque(range(self.venv.num_envs))
        live: dict[int, Trajectory] = {}
        self._sent: dict[int, str] = {}  # env id -> the action in flight (none: a reset)
        waiting: list[int] = []
        in_flight = 0
        t0, gen_s, env_wait_s = time.perf_counter(), 0.0, 0.0
        while todo or live:
            while free and todo:
                i, ep = free.popleft(), todo.popleft()
                live[i] = ep
                self.venv.async_reset([i], options=[{"task_id": ep.task_id}])
                in_flight += 1
            if waiting:
                t = time.perf_counter()
                self._act(waiting, live)
                gen_s += time.perf_counter() - t
                in_flight += len(waiting)
                waiting = []
            if in_flight:
                t = time.perf_counter()
                ids, obs, rewards, terms, truncs, infos = self.venv.recv(min_ready=1)
                env_wait_s += time.perf_counter() - t
                in_flight -= len(ids)
                for i, o, r, te, tr, info in zip(ids, obs, rewards, terms, truncs, infos,
                                                 strict=True):
                    ep = live[int(i)]
                    if self._result(int(i), ep, o, float(r), bool(te), bool(tr), info):
                        del live[int(i)]
                        free.append(int(i))
                    else:
                        waiting.append(int(i))
        self.stats = {"rollout_s": time.perf_counter() - t0, "generate_s": gen_s,
                      "env_wait_s": env_wait_s}
        return episodes

    def _result(self, i: int, t: Trajectory, obs: str, reward: float, terminated: bool,
                truncated: bool, info: dict[str, Any]) -> bool:
        """Record env `i`'s result as the episode driver does; True when the episode ends."""
        ep = t.episode
        assert ep is not None
        if i not in self._sent:  # the reset: the prompt
            ep.system_prompt = self.venv.get_attr("system_prompt", env_ids=[i])[0]
            ep.first_observation, ep.task_id = obs, info.get("task_id", ep.task_id)
            t.add(self.chat.prompt_ids(obs, ep.system_prompt), agent=False)
            t.prompt_len = len(t.token_ids)
            self._sent[i] = ""
            return False
        ep.add(self._sent[i], obs, reward, terminated, truncated, info)
        cut = None if ep.done else self._observe(t, obs)
        if not ep.done and cut is None:
            return False
        if cut is not None:
            ep.cut, ep.truncated = cut, True
            if cut == "overlong":
                ep.infos[-1] = {**ep.infos[-1], "overlong": True}
        if not ep.infra_error and cut != "overlong":
            self._close_message(t)
        t.ended(ep)
        del self._sent[i]
        return True

    def _act(self, env_ids: list[int], live: dict[int, Trajectory]) -> None:
        eps = [live[i] for i in env_ids]
        budget = [max(1, min(self.cfg.max_tokens_per_turn,
                             self.cfg.max_input_tokens - len(e.token_ids))) for e in eps]
        texts: list[str] = [""] * len(eps)
        for limit in sorted(set(budget)):
            idx = [k for k, b in enumerate(budget) if b == limit]
            params = SamplingParams(max_tokens=limit, temperature=self.cfg.temperature,
                                    top_p=self.cfg.top_p, stop=tuple(self.cfg.stop),
                                    stop_token_ids=self.chat.stop_token_ids)
            batch = [eps[k] for k in idx]
            outs = self.engine.generate([e.token_ids for e in batch], params,
                                        seeds=[e.seed * 64 + e.turns for e in batch])
            for k, e, c in zip(idx, batch, outs, strict=True):
                e.add(c.token_ids, agent=True, logprobs=c.logprobs, versions=c.versions)
                e.turns += 1
                e.finish_reason = c.finish_reason
                texts[k] = c.text
        self._sent.update(zip(env_ids, texts, strict=True))
        self.venv.send(texts, env_ids)


class ScriptedEngine:
    """Answers every request with the same few tokens after a latency set by its seed: one
    request in five (drawn from the seed) takes `long_factor` x `latency`.

    `submit` completes each request on its own (a timer thread); `generate` sleeps for the
    slowest request of the batch, as a continuously batching server would return it."""

    version = 0

    def __init__(self, latency: float, long_factor: float = 5.0, long_share: float = 0.2,
                 tokens: Sequence[int] = (7, 8, 9, 10)) -> None:
        self.latency, self.long_factor, self.long_share = latency, long_factor, long_share
        self.tokens = list(tokens)
        self._heap: list[tuple[float, int, Future[Completion]]] = []
        self._cv = threading.Condition()
        self._n = 0
        self._closed = False
        self._timer = threading.Thread(target=self._fire, daemon=True)
        self._timer.start()

    def latency_of(self, seed: int) -> float:
        long = random.Random(seed).random() < self.long_share
        return self.latency * (self.long_factor if long else 1.0)

    def completion(self) -> Completion:
        n = len(self.tokens)
        return Completion(list(self.tokens), [-0.5] * n, [self.version] * n, "stop", "act")

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[Completion]:
        seeds = list(seeds) if seeds is not None else list(range(len(prompts)))
        time.sleep(max(self.latency_of(s) for s in seeds))
        return [self.completion() for _ in prompts]

    def submit(self, prompt: Sequence[int], params: SamplingParams, seed: int
               ) -> Future[Completion]:
        future: Future[Completion] = Future()
        with self._cv:
            self._n += 1
            heapq.heappush(self._heap, (time.monotonic() + self.latency_of(seed), self._n,
                                        future))
            self._cv.notify()
        return future

    def _fire(self) -> None:
        with self._cv:
            while not self._closed:
                if not self._heap:
                    self._cv.wait()
                    continue
                due = self._heap[0][0] - time.monotonic()
                if due > 0:
                    self._cv.wait(due)
                    continue
                _, _, future = heapq.heappop(self._heap)
                future.set_result(self.completion())

    def update_weights(self, weights: Any, version: int) -> None:
        self.version = version

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()


class SlowStepEnv(TextEnv):
    """`turns` steps per episode, each sleeping 20-100 ms (drawn from the task and turn, so
    both schedulers see the same delays); reward 1 at the end."""

    system_prompt = "act"

    def __init__(self, turns: int = 4, low: float = 0.02, high: float = 0.1,
                 tasks: int = 64) -> None:
        super().__init__()
        self.turns, self.low, self.high = turns, low, high
        self.tasks = TaskSet([Task(id=f"t{k}", prompt="go") for k in range(tasks)])

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self.start_episode(seed, options)
        return "go", self.make_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn += 1
        rng = random.Random(f"{self.task.id}/{self.turn}/{id(self) % 7}")
        time.sleep(rng.uniform(self.low, self.high))
        if self.turn >= self.turns:
            return "", 1.0, True, False, self.make_info("success", reward_breakdown={})
        return "more", 0.0, False, False, self.make_info()


class FixedChat:
    """The chat format's interface with constant token ids: tokenization is not what this
    measures."""

    class tokenizer:  # stands in for a tokenizer object
        eos_token_id = 0

    stop_token_ids = (0,)

    def prompt_ids(self, obs: str, system: str | None) -> list[int]:
        return [1, 2, 3]

    def observation_ids(self, obs: str, ended_turn: bool) -> list[int]:
        return [4, 5]

    def check_inline(self) -> None:
        pass


def trajectories_per_s(cls: type[Rollout], engine: Any, args: argparse.Namespace, *,
                       episodes: int, envs: int, max_in_flight: int | None, seed: int
                       ) -> tuple[float, dict[str, float]]:
    """One step of `episodes` episodes (groups of `args.group`) on `envs` envs."""
    tasks = episodes // args.group
    fns = [lambda: SlowStepEnv(args.turns, tasks=tasks)] * envs
    with VectorEnv(fns, autoreset_mode="disabled") as venv:
        cfg = RolloutConfig(max_turns_cap=args.turns, max_tokens_per_turn=16, max_input_tokens=4096,
                            max_in_flight=max_in_flight)
        rollout = cls(venv, engine, FixedChat(), cfg)  # type: ignore[arg-type]
        t = time.perf_counter()
        played = rollout.run([f"t{k}" for k in range(tasks)], args.group, seed=seed)
        elapsed = time.perf_counter() - t
        rollout.close()
    assert all(e.turns == args.turns and e.reward == 1.0 for e in played), "episodes broke"
    return len(played) / elapsed, rollout.stats


def scheduling_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Three shapes, each request-level against the barrier on the same engine and envs:
    the recipe's (more episodes than envs; ours may have all in flight), the same with ours
    held to the envs given (scheduling alone), and one env per episode for both."""
    engine = ScriptedEngine(args.latency)
    n, e = args.episodes, args.envs
    shapes = [("all episodes in flight", n, e, None),
              (f"max_in_flight={e} (the scheduling alone)", n, e, e),
              ("one env per episode in both", args.group * 16, args.group * 16, None)]
    rows = []
    what = (f"{args.turns} turns; 1 request in 5 takes {5 * args.latency * 1e3:.0f} ms, the "
            f"others {args.latency * 1e3:.0f} ms; env steps 20-100 ms")
    try:
        for k, (label, episodes, envs, cap) in enumerate(shapes):
            ours, base, stats = [], [], {}
            for r in range(args.repeats):  # interleaved: drift on a shared machine hits both
                rate, stats = trajectories_per_s(Rollout, engine, args, episodes=episodes,
                                                 envs=envs, max_in_flight=cap, seed=r)
                ours.append(rate)
                base.append(trajectories_per_s(BarrierRollout, engine, args, episodes=episodes,
                                               envs=envs, max_in_flight=None, seed=r)[0])
            o, b = statistics.median(ours), statistics.median(base)
            goal = ">= 2.5x" if k == 0 else "(informative)"
            rows.append(result(
                f"trajectories/s, {episodes} episodes, {envs} envs, request-level, {label}",
                o, "batch-barrier rollout (the old scheduling), same envs", b, goal,
                met=o / b >= 2.5 if k == 0 else None,
                note=f"{what}; median of {args.repeats}; request-level peak "
                     f"{stats.get('peak_in_flight', 0):.0f} episodes and "
                     f"{stats.get('peak_requests', 0):.0f} requests in flight on "
                     f"{stats.get('envs', 0):.0f} envs"))
    finally:
        engine.close()
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=128, help="episodes per step")
    ap.add_argument("--envs", type=int, default=16, help="the VectorEnv's num_envs")
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--latency", type=float, default=0.04,
                    help="seconds a short request takes (a long one: 5x)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-sync", action="store_true",
                    help="skip the weight-sync section (benchmarks/_rollout_sync.py)")
    args = ap.parse_args(argv)
    rows = scheduling_rows(args)
    extra: dict[str, Any] = {"params": vars(args)}
    sync = None if args.no_sync else weight_sync()
    if sync is not None:
        rows += sync.pop("results", [])
        extra["weight_sync"] = sync
    write("rollout", rows, **extra)


def weight_sync() -> dict[str, Any] | None:
    """`benchmarks._rollout_sync.run_weight_sync()`'s dict, or None where that file is absent."""
    try:
        from benchmarks._rollout_sync import run_weight_sync
    except ModuleNotFoundError as e:
        if e.name != "benchmarks._rollout_sync":
            raise
        print("benchmarks/_rollout_sync.py is absent: no weight-sync section")
        return None
    return dict(run_weight_sync(repeats=5))  # alternating rounds; 5 to see past the noise


if __name__ == "__main__":
    main()


def device_sampling(device: str = "cuda", rows: int = 64, vocab: int = 151_936,
                    repeats: int = 5) -> list[dict[str, Any]]:
    """The HF engine's per-step sampling on `device` (`_sample`: temperature, top-p,
    per-row generators, logprobs; then the one host copy of ids and logprobs) against what
    it did before: the full-vocabulary log-softmax copied to the host and sampled there.
    For `benchmarks/trainer_gpu.py` on a GPU; on a CPU both do the same
    work, so there the ratio says nothing."""
    import torch

    from skyhub.trainer.inference.hf import _sample

    dev = torch.device(device)
    logits = torch.randn(rows, vocab, device=dev)
    temperature = torch.ones(rows, device=dev)
    top_p = torch.full((rows,), 0.95, device=dev)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def ours() -> None:
        gens = [torch.Generator(device=dev).manual_seed(k) for k in range(rows)]
        tokens, logps = _sample(logits, temperature, top_p, gens, [False] * rows)
        torch.stack((tokens.double(), logps.double())).cpu().tolist()

    def before() -> None:  # the step as it was: log-softmax to the host, sampled there
        gens = [torch.Generator().manual_seed(k) for k in range(rows)]
        logp = torch.log_softmax(logits, dim=-1).cpu()
        sorted_lp, order = logp.sort(dim=-1, descending=True)
        cum = sorted_lp.exp().cumsum(dim=-1)
        drop = torch.zeros_like(cum, dtype=torch.bool).scatter(
            -1, order, (cum - sorted_lp.exp()) >= 0.95)
        noise = torch.stack([torch.rand(vocab, generator=g) for g in gens])
        gumbel = -torch.log(-torch.log(noise.clamp(1e-20, 1.0 - 1e-7)))
        tokens = (logp.masked_fill(drop, float("-inf")) + gumbel).argmax(dim=-1)
        logp.gather(-1, tokens[:, None])

    times = {}
    for name, fn in (("ours", ours), ("before", before)):
        fn()
        sync()
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            sync()
            best = min(best, time.perf_counter() - t)
        times[name] = best * 1e3
    return [result(f"hf engine sampling step on {device}, {rows} rows x {vocab} vocab, top-p 0.95",
                   times["ours"], "log-softmax copied to the host and sampled there",
                   times["before"], "< the host path on a GPU" if dev.type == "cuda"
                   else "(informative: the same work on a CPU)",
                   ratio=times["before"] / times["ours"], unit="ms",
                   met=times["ours"] < times["before"] if dev.type == "cuda" else None,
                   note=f"host copy per step: {2 * rows * 8} bytes, was {rows * vocab * 4:,}")]
