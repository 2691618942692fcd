"""Run an agent on an env for N episodes, concurrently, and summarise.

    summary = skyhub.evaluate.run("toy-lookup", load_agent("oracle"), n=100, concurrency=8)

Episodes run through a `VectorEnv` with `send`/`recv`, so a slow episode never holds the
others back. Episode k plays the env's task k (cycling when `n` exceeds the task set, so
`n = len(tasks)` covers every task once) with seed `seed + k`: a run is reproducible
whatever the concurrency. Episodes that end in an infrastructure error are counted apart
and left out of the mean (never scored 0). `skyhub eval` is the command-line face of this module.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from skyhub.agents import Agent
from skyhub.chat import Episode


@dataclass
class Summary:
    env_id: str
    agent: str
    n: int
    mean_reward: float
    accuracy: float
    ci95: tuple[float, float]
    infra_errors: int
    mean_turns: float
    outcomes: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ci95"] = list(self.ci95)
        return d


def ci95(rewards: list[float]) -> tuple[float, float]:
    """95% interval of the mean: Wilson's score interval when every reward is 0 or 1 (it stays
    inside [0, 1] and behaves at 0% and 100%), else the normal approximation."""
    m = len(rewards)
    if m == 0:
        return (float("nan"), float("nan"))
    mean, z = sum(rewards) / m, 1.96
    if all(r in (0.0, 1.0) for r in rewards):
        centre = (mean + z * z / (2 * m)) / (1 + z * z / m)
        half = z * math.sqrt(mean * (1 - mean) / m + z * z / (4 * m * m)) / (1 + z * z / m)
        return (centre - half, centre + half)
    if m == 1:
        return (float("nan"), float("nan"))
    sd = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (m - 1))
    return (mean - z * sd / math.sqrt(m), mean + z * sd / math.sqrt(m))


def summarise(env_id: str, agent: str, episodes: list[Episode], seconds: float) -> Summary:
    """Mean reward and its 95% interval over episodes without infra errors; accuracy is the
    fraction whose outcome is `success`."""
    scored = [e for e in episodes if not e.infra_error]
    rewards = [e.total_reward for e in scored]
    m = len(rewards)
    mean = sum(rewards) / m if m else float("nan")
    outcomes: dict[str, int] = {}
    for e in episodes:
        outcomes[e.outcome] = outcomes.get(e.outcome, 0) + 1
    return Summary(
        env_id=env_id, agent=agent, n=len(episodes), mean_reward=mean,
        accuracy=(sum(e.outcome == "success" for e in scored) / m) if m else float("nan"),
        ci95=ci95(rewards), infra_errors=len(episodes) - m,
        mean_turns=(sum(len(e.actions) for e in episodes) / len(episodes)) if episodes else 0.0,
        outcomes=outcomes, seconds=seconds)


def run(env_id: str, agent: Agent, *, n: int = 100, concurrency: int = 8, seed: int = 0,
        env_kwargs: dict[str, Any] | None = None, max_steps: int = 100,
        on_episode: Callable[[Episode], None] | None = None) -> tuple[Summary, list[Episode]]:
    """Run `n` episodes of `env_id` with `agent`, `concurrency` at a time.

    `max_steps` guards against an env that never ends: such an episode is cut and counted as
    an infra error. `on_episode` is called as each episode finishes (progress bars, logs).
    """
    from skyhub.vector import infra_error_info, make_vec

    if n < 1 or concurrency < 1:
        raise ValueError("n and concurrency must be >= 1")
    width = min(concurrency, n)
    started, done = 0, 0
    episodes: list[Episode | None] = [None] * n
    running: dict[int, tuple[int, Episode | None]] = {}  # env id -> (episode index, record)
    last_action: dict[int, str] = {}  # env id -> the action in flight
    t0 = time.perf_counter()
    with make_vec(env_id, width, autoreset_mode="disabled", **(env_kwargs or {})) as venv:
        prompts = venv.get_attr("system_prompt")
        task_ids = [t.id for t in venv.get_attr("tasks", env_ids=[0])[0]]

        def start(i: int) -> None:
            nonlocal started
            running[i] = (started, None)
            options = {"task_id": task_ids[started % len(task_ids)]} if task_ids else None
            venv.async_reset([i], seed=[seed + started], options=[options])
            started += 1

        for i in range(width):
            start(i)
        while done < n:
            ids, obs, rewards, terms, truncs, infos = venv.recv()
            send_ids, actions = [], []
            for i, o, r, te, tr, info in zip(ids.tolist(), obs, rewards, terms, truncs, infos,
                                             strict=True):
                k, ep = running[i]
                if ep is None:  # the first observation of a new episode
                    ep = Episode(info.get("task_id"), prompts[i], o)
                    if info.get("infra_error"):
                        ep.add("", "", 0.0, False, True, info)
                else:
                    ep.add(last_action[i], o, float(r), bool(te), bool(tr), info)
                    if not ep.done and len(ep.actions) >= max_steps:
                        ep.add("", "", 0.0, False, True, infra_error_info(
                            f"episode cut after max_steps={max_steps}", ep.task_id, max_steps))
                if ep.done:
                    episodes[k], done = ep, done + 1
                    if on_episode is not None:
                        on_episode(ep)
                    if started < n:
                        start(i)
                    else:
                        running.pop(i)
                    continue
                running[i] = (k, ep)
                last_action[i] = agent.act(ep.messages(), lambda e=i: venv.call(
                    "reference_action", env_ids=[e])[0])
                send_ids.append(i)
                actions.append(last_action[i])
            if send_ids:
                venv.send(actions, send_ids)
    finished = [e for e in episodes if e is not None]
    return summarise(env_id, agent.name, finished, time.perf_counter() - t0), finished


def write_run(out: str | Path, summary: Summary, episodes: list[Episode]) -> Path:
    """`episodes.jsonl` (one line per episode) and `summary.json` under `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "episodes.jsonl").open("w", encoding="utf-8") as f:
        for e in episodes:
            f.write(json.dumps(e.to_dict(), default=str, ensure_ascii=False) + "\n")
    (out / "summary.json").write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    return out
