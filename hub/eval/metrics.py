"""The figures of an eval run, each defined once: the run's summary (`summarise`, what
`skyhub eval` prints and writes to summary.json), its report (`headline`, report.md) and the
comparisons (`skyhub eval compare`) all compute them here, from episodes.jsonl records.

The definitions (the run-directory contract, docs/eval.md):
- **episodes**: every recorded episode. **infra errors**: those with `infra_error` set (the
  env or the agent's model server failed, not the agent); they are counted apart and never
  scored 0. **scored**: the other episodes.
- **accuracy**: successes (`outcome == "success"`) / scored episodes. Its 95% interval,
  `ci95`, is Wilson's score interval over those successes (`wilson`). When a task has several
  scored episodes (`--attempts K`), its attempts are not independent observations: the
  interval is then clustered by task (`clustered_wilson`: Wilson's over the effective sample
  size that the cluster-robust variance gives), and `ci95_method` says which it is.
- **mean reward**: the mean of the scored episodes' rewards (a missing or non-finite reward is
  left out). Its own 95% interval, `mean_reward_ci95`, is the normal approximation
  (`mean_ci95`; with several episodes per task, the cluster-robust standard error over tasks:
  `clustered_mean_ci95`); rewards need not be 0/1 (SkyRL-SQL scores a broken format -1).
- **mean turns**: over every episode, infra errors included.
- **tokens**: prompt and completion totals over the episodes that know them (None when none
  does); `tokens_known` says how many episodes that is.
- **mean latency** (an episode's wall time) and **mean agent wait** (its time in the agent),
  over every episode.
- **pass@k** (runs with `--attempts K`, K episodes per task): the chance that at least one of
  k attempts at a task succeeds, by the unbiased estimator of Chen et al. (2021) per task,
  1 - C(n-c, k) / C(n, k) with n scored attempts and c successes, averaged over the tasks
  with at least k scored attempts (`pass_at_k`).
- **named rewards** (`rewards`): each name's mean over the scored episodes whose verdict has
  it (`skyhub.eval.named_rewards`), beside the scalar mean reward.
A number that does not exist (no scored episode, no episode) is NaN here and null in JSON.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from skyhub.eval.named_rewards import named_means
from skyhub.json_safe import jsonable


def is_infra(rec: dict[str, Any]) -> bool:
    """The episode ended in an infrastructure error (left out of accuracy and mean reward)."""
    return bool(rec.get("infra_error"))


def is_success(rec: dict[str, Any]) -> bool:
    return rec.get("outcome") == "success"


def number(x: Any) -> float | None:
    """A finite float, or None for anything else (null, missing, NaN, strings, bools)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def mean(xs: Sequence[float]) -> float:
    """The mean; NaN for no values."""
    return sum(xs) / len(xs) if xs else math.nan


# -- intervals ----------------------------------------------------------------------------------

def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's score interval of a proportion (95% by default): it stays inside [0, 1] and
    behaves at 0% and 100%. NaN for n = 0. Accuracy's interval."""
    if n <= 0:
        return (math.nan, math.nan)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """95% interval of a mean by the normal approximation (sample sd); NaN below 2 values.
    The mean reward's interval."""
    m = len(values)
    if m < 2:
        return (math.nan, math.nan)
    avg = sum(values) / m
    sd = math.sqrt(sum((v - avg) ** 2 for v in values) / (m - 1))
    return (avg - 1.96 * sd / math.sqrt(m), avg + 1.96 * sd / math.sqrt(m))


def ci95(values: Sequence[float]) -> tuple[float, float]:
    """95% interval of the mean of `values`: Wilson's when every value is 0 or 1 (a success
    rate: the same as `wilson(successes, n)`), else the normal approximation (`mean_ci95`)."""
    m = len(values)
    if m == 0:
        return (math.nan, math.nan)
    if all(v in (0.0, 1.0) for v in values):
        return wilson(int(sum(values)), m)
    return mean_ci95(values)


def _wilson_p(p: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """Wilson's interval for proportion `p` over a (possibly fractional) sample size `n`."""
    if n <= 0:
        return (math.nan, math.nan)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _cluster_var(values: Sequence[float], clusters: Sequence[Any], centre: float) -> float:
    """The cluster-robust (CR1) variance of a mean: G/(G-1) * sum_g (sum_i (y_gi - centre))^2
    / N^2 over G clusters; NaN below two clusters."""
    sums: dict[Any, float] = {}
    for v, c in zip(values, clusters, strict=True):
        sums[c] = sums.get(c, 0.0) + (v - centre)
    g, n = len(sums), len(values)
    if g < 2:
        return math.nan
    return g / (g - 1) * sum(x * x for x in sums.values()) / (n * n)


def clustered_wilson(successes: Sequence[bool], clusters: Sequence[Any]) -> tuple[float, float]:
    """A success rate's 95% interval when episodes come in clusters (a task's attempts):
    Wilson's interval over the effective sample size N / deff, where the design effect deff
    is the cluster-robust variance over the independent one (at least 1, so never narrower
    than `wilson`). At 0% or 100% the variance says nothing: the tasks count as the sample."""
    n = len(successes)
    if n == 0:
        return (math.nan, math.nan)
    p = sum(successes) / n
    groups = len(set(clusters))
    if p in (0.0, 1.0):
        return _wilson_p(p, groups)
    var_c = _cluster_var([float(x) for x in successes], clusters, p)
    if not math.isfinite(var_c):
        return _wilson_p(p, groups)
    deff = max(1.0, var_c / (p * (1 - p) / n))
    return _wilson_p(p, n / deff)


def clustered_mean_ci95(values: Sequence[float], clusters: Sequence[Any]
                        ) -> tuple[float, float]:
    """95% interval of a mean from the cluster-robust standard error over `clusters` (never
    narrower than `mean_ci95`); NaN below two clusters."""
    m = len(values)
    if m < 2:
        return (math.nan, math.nan)
    avg = sum(values) / m
    var_c = _cluster_var(values, clusters, avg)
    if not math.isfinite(var_c):
        return (math.nan, math.nan)
    lo, hi = mean_ci95(values)
    half = max(1.96 * math.sqrt(var_c), (hi - lo) / 2 if math.isfinite(hi - lo) else 0.0)
    return (avg - half, avg + half)


def task_key(rec: dict[str, Any]) -> Any:
    """The task an episode played, for clustering its attempts: `task_index` (its place in
    the run's sample), else `task_id`, else the episode itself."""
    for key in ("task_index", "task_id"):
        if rec.get(key) is not None:
            return (key, rec[key])
    return ("index", rec.get("index"), id(rec))


# -- the run's figures --------------------------------------------------------------------------

def headline(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Every figure of the module docstring for `records` (episodes.jsonl lines), as a dict:
    episodes, scored, successes, accuracy, ci95, mean_reward, mean_reward_ci95, infra_errors,
    mean_turns, tokens {prompt, completion}, tokens_known, mean_latency_s, mean_agent_s."""
    scored = [r for r in records if not is_infra(r)]
    wins = sum(is_success(r) for r in scored)
    rewarded = [(x, task_key(r)) for r in scored if (x := number(r.get("reward"))) is not None]
    rewards = [x for x, _ in rewarded]
    tasks = [task_key(r) for r in scored]
    clustered = len(set(tasks)) < len(tasks)

    def over_all(key: str) -> list[float]:
        return [x for x in (number(r.get(key)) for r in records) if x is not None]

    tokens: dict[str, int | None] = {}
    tokens_known = 0
    for kind in ("prompt", "completion"):
        known = [x for x in (number((r.get("tokens") or {}).get(kind)) for r in records)
                 if x is not None]
        tokens[kind] = int(sum(known)) if known else None
        tokens_known = max(tokens_known, len(known))
    return {
        "episodes": len(records),
        "scored": len(scored),
        "successes": wins,
        "accuracy": wins / len(scored) if scored else math.nan,
        "ci95": (clustered_wilson([is_success(r) for r in scored], tasks) if clustered
                 else wilson(wins, len(scored))),
        "ci95_method": (f"clustered by task ({len(set(tasks))} tasks)" if clustered
                        else "wilson"),
        "mean_reward": mean(rewards),
        "mean_reward_ci95": (clustered_mean_ci95(rewards, [t for _, t in rewarded])
                             if clustered else mean_ci95(rewards)),
        "infra_errors": len(records) - len(scored),
        "mean_turns": mean(over_all("turns")),
        "tokens": tokens,
        "tokens_known": tokens_known,
        "mean_latency_s": mean(over_all("latency_s")),
        "mean_agent_s": mean(over_all("agent_s")),
    }


def pass_at_k_one(n: int, c: int, k: int) -> float:
    """One task's unbiased pass@k from n attempts with c successes (k <= n)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_k(records: Sequence[dict[str, Any]], ks: Sequence[int]) -> dict[str, Any]:
    """{"pass@k": value or NaN, ...} over the tasks (records grouped by `task_index`, else
    `task_id`) with at least k scored attempts; `tasks` counts the tasks with any."""
    per_task: dict[Any, list[bool]] = {}
    for r in records:
        if not is_infra(r):
            key = r.get("task_index", r.get("task_id"))
            per_task.setdefault(key, []).append(is_success(r))
    out: dict[str, Any] = {"tasks": len(per_task)}
    for k in ks:
        vals = [pass_at_k_one(len(v), sum(v), k) for v in per_task.values() if len(v) >= k]
        out[f"pass@{k}"] = mean(vals)
    return out


def outcome_counts(records: Sequence[dict[str, Any]]) -> dict[str, int]:
    """outcome -> episodes, in the order outcomes first appear."""
    counts: dict[str, int] = {}
    for r in records:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    return counts


def no_score_message(records: Sequence[dict[str, Any]]) -> str:
    """Why a run has no accuracy: no episode, or every one an infra error (with the first)."""
    if not records:
        return "no scored episode: no episode was recorded"
    first = next((r.get("error") for r in records if r.get("error")), None)
    return (f"no scored episode: every one of the {len(records)} episodes was an infra error"
            + (f" (first: {first})" if first else ""))


@dataclass
class Summary:
    """What a run scored: the figures of `headline` (see the module docstring) and how the run
    went. Numbers that do not exist (no scored episode) are NaN here and null in `to_dict`,
    with `message` saying why."""

    env_id: str
    agent: str
    n: int  # episodes recorded
    mean_reward: float
    accuracy: float
    ci95: tuple[float, float]  # accuracy's: Wilson over the successes
    infra_errors: int
    mean_turns: float
    outcomes: dict[str, int] = field(default_factory=dict)
    ci95_method: str = "wilson"  # or "clustered by task (N tasks)": see the module docstring
    seconds: float = 0.0
    requested: int = 0  # episodes asked for; n < requested when a run was interrupted
    complete: bool = True
    tokens: dict[str, int | None] = field(default_factory=dict)
    mean_reward_ci95: tuple[float, float] = (math.nan, math.nan)  # normal approximation
    scored: int = 0
    successes: int = 0
    message: str | None = None  # why accuracy and mean reward are missing
    attempts: int = 1  # episodes per task
    pass_at_k: dict[str, Any] = field(default_factory=dict)  # with attempts > 1: `pass_at_k`
    sampling: str | None = None  # a model agent's sampling settings and their source
    protocol: str | None = None  # "tools" (native tool calls) or "text": the run's protocol
    rewards: dict[str, Any] = field(default_factory=dict)  # each named reward's mean

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: tuples as lists, NaN and infinities as None."""
        d = asdict(self)
        d["ci95"] = list(self.ci95)
        d["mean_reward_ci95"] = list(self.mean_reward_ci95)
        return jsonable(d)


def summarise(env_id: str, agent: str, records: Sequence[dict[str, Any]], seconds: float,
              requested: int | None = None, attempts: int = 1) -> Summary:
    """The run's `Summary` from its records (episodes.jsonl lines): `headline`'s figures, the
    outcome counts, whether all `requested` episodes were recorded, and with `attempts` > 1
    pass@k for k = 1, 2, 4, ... up to `attempts` (and `attempts` itself)."""
    h = headline(records)
    ks = sorted({*(2 ** i for i in range(attempts.bit_length()) if 2 ** i <= attempts),
                 attempts})
    requested = len(records) if requested is None else requested
    return Summary(
        env_id=env_id, agent=agent, n=h["episodes"], mean_reward=h["mean_reward"],
        accuracy=h["accuracy"], ci95=h["ci95"], ci95_method=h["ci95_method"],
        infra_errors=h["infra_errors"],
        mean_turns=h["mean_turns"], outcomes=outcome_counts(records), seconds=seconds,
        requested=requested, complete=len(records) >= requested, tokens=h["tokens"],
        mean_reward_ci95=h["mean_reward_ci95"], scored=h["scored"], successes=h["successes"],
        message=None if h["scored"] else no_score_message(records), attempts=attempts,
        pass_at_k=pass_at_k(records, ks) if attempts > 1 else {},
        rewards=named_means(records))


__all__ = ["Summary", "ci95", "clustered_mean_ci95", "clustered_wilson", "headline",
           "is_infra", "is_success", "mean_ci95", "no_score_message", "pass_at_k", "summarise",
           "task_key", "wilson"]
