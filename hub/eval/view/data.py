"""What `skyhub view` shows, read from run directories: the runs, their per-episode table,
one episode's whole trajectory, a paired comparison of two runs and a training run's curves
(the runs themselves are found and opened by `skyhub.eval.view.runs`).

Everything here is plain data (dicts and lists ready for JSON) computed from the files a run
leaves behind, so the web app (`skyhub.eval.view.app`) only routes and the tests can check
the figures without a browser. The figures are those of `skyhub.eval.metrics` (`headline`),
the comparison is `skyhub.eval.compare.compare_runs`, the episode files are read by
`skyhub.eval.rundir`: nothing is recomputed a second way here.

Two kinds of run directory are understood:
- an **eval run** (`skyhub eval --out DIR`): `episodes.jsonl`, with `run.json` and
  `summary.json` beside it;
- a **training run** (`skyhub train --out DIR`): `metrics.jsonl` (one line per step), with
  `config.yaml`, and the sample episodes of a step, when the run saved them, as
  `episodes/step-NNNNNN.jsonl` in the eval episodes' format.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skyhub.errors import UsageError
from skyhub.eval.breakdown import error_category, error_taxonomy, slice_keys, slice_table
from skyhub.eval.compare import compare_runs
from skyhub.eval.metrics import headline, is_infra, is_success, number, outcome_counts
from skyhub.eval.rundir import read_json
from skyhub.eval.view.runs import Run
from skyhub.json_safe import jsonable

#: The curves of a training run, in the order they are drawn: (title, metrics.jsonl keys).
#: A panel is shown when the run logged any of its keys; the keys the run logged outside
#: these panels are offered one by one (`curves`' "others").
CURVE_PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("reward_mean", "eval_reward_mean")),
    ("success rate", ("success_rate", "eval_success_rate")),
    ("loss", ("loss", "value_loss")),
    ("KL", ("kl", "approx_kl", "kl_penalty")),
    ("entropy", ("entropy",)),
    ("clip fraction", ("clip_frac", "dual_clip_frac")),
    ("response length (tokens)", ("response_tokens_mean", "response_tokens_min",
                                  "response_tokens_max")),
    ("tokens/s", ("gen_tokens_per_s", "train_tokens_per_s")),
    ("zero-variance groups", ("zero_variance_groups", "frac_reward_zero_std")),
    ("engine-learner |dlogp|", ("logp_gap_mean", "logp_gap_max")),
    ("turns", ("turns_mean", "eval_turns_mean")),
    ("step time (s)", ("step_s", "rollout_s", "train_s")),
    ("gradient norm", ("grad_norm",)),
)
# bookkeeping columns of metrics.jsonl that are not worth a curve
_NOT_CURVES = {"step", "world_size", "elapsed_s"}


# ---------------------------------------------------------------------------- the runs page
def run_info(run: Run) -> dict[str, Any]:
    """What the runs page says about a run: kind, env, agent, and its headline figures."""
    info: dict[str, Any] = {"id": run.id, "label": run.label, "path": str(run.path),
                            "kind": run.kind, "parent": run.parent,
                            "live": in_progress(run), "stamp": _stamp(run)}
    if run.kind == "eval":
        records = run.records()
        config = read_json(run.path / "run.json")
        first = records[0] if records else {}
        info.update(env_id=config.get("env_id") or first.get("env_id"),
                    agent=config.get("agent") or first.get("agent"), config=config,
                    headline=headline(records), outcomes=outcome_counts(records),
                    requested=config.get("n"),
                    slices={key: slice_table(records, key) for key in slice_keys(records)},
                    endings=[{"category": c, "n": n} for c, n in error_taxonomy(records)])
    else:
        rows = run.metrics()
        config_text = _read_text(run.path / "config.yaml")
        last = rows[-1] if rows else {}
        info.update(env_id=_yaml_env_id(config_text), steps=len(rows),
                    last_step=last.get("step"), last=last, config_text=config_text,
                    episode_steps=run.steps())
    return jsonable(info)


#: (the log a run appends to, the file it writes when it ends), by kind: an eval writes
#: summary.json after its last episode, a training run draws curves.png after its last step.
_LOG_AND_END = {"eval": ("episodes.jsonl", "summary.json"),
                "train": ("metrics.jsonl", "curves.png")}


def in_progress(run: Run) -> bool:
    """Whether `run` is still being written, as far as its files tell: the file it writes
    when it ends is missing, or older than its log (a `--resume` appending again). A run
    that was killed also reads as in progress: the page then keeps polling a run that no
    longer grows, which costs one small request every few seconds."""
    log, end = (run.path / name for name in _LOG_AND_END[run.kind])
    try:
        ended = end.stat().st_mtime_ns
    except OSError:
        return True
    try:
        return ended < log.stat().st_mtime_ns
    except OSError:
        return False


def _stamp(run: Run) -> str:
    """What changes when the run's log grows (its size and time): the page polls a run in
    progress and redraws when this changes."""
    try:
        st = (run.path / _LOG_AND_END[run.kind][0]).stat()
    except OSError:
        return ""
    return f"{st.st_size}-{st.st_mtime_ns}"


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _yaml_env_id(text: str | None) -> str | None:
    """`env.id` of a training run's config.yaml (read without a YAML parser: only this key)."""
    if not text:
        return None
    in_env = False
    for line in text.splitlines():
        if re.match(r"^env:\s*$", line):
            in_env = True
        elif in_env and (m := re.match(r"^\s+id:\s*(\S+)", line)):
            return m.group(1).strip("'\"")
        elif line and not line[0].isspace():
            in_env = False
    return None


# ------------------------------------------------------------------------ the episode table
def _tokens(rec: dict[str, Any]) -> tuple[float | None, float | None]:
    tokens = rec.get("tokens") or {}
    return number(tokens.get("prompt")), number(tokens.get("completion"))


def task_text(rec: dict[str, Any]) -> str | None:
    """The task's own text, where the record has one: its "question" (episode records carry
    it), else the task meta's "question" (SQL records written before the key existed);
    None where neither is given (then the first user message stands for it)."""
    for text in (rec.get("question"), (rec.get("meta") or {}).get("question")):
        if isinstance(text, str) and text.strip():
            return text
    return None


def _question(rec: dict[str, Any], width: int = 160) -> str:
    """The task text of the table: `task_text`, else the task as the agent first saw it
    (the first user message), shortened."""
    text = task_text(rec)
    if text is None:
        text = next((str(m.get("content") or "") for m in rec.get("messages") or []
                     if m.get("role") == "user"), "")
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width] + "…"


def episode_row(rec: dict[str, Any]) -> dict[str, Any]:
    """One line of the per-task table."""
    prompt, completion = _tokens(rec)
    total = None if prompt is None and completion is None else (prompt or 0) + (completion or 0)
    return {"index": rec.get("index"), "task_id": rec.get("task_id"),
            "reward": number(rec.get("reward")), "outcome": rec.get("outcome"),
            "turns": rec.get("turns"), "tokens": total, "prompt_tokens": prompt,
            "completion_tokens": completion, "latency_s": number(rec.get("latency_s")),
            "infra_error": bool(rec.get("infra_error")), "error": rec.get("error"),
            "category": error_category(rec), "question": _question(rec)}


def _matches(rec: dict[str, Any], needle: str) -> bool:
    if needle in str(rec.get("task_id") or "").lower() or needle in str(
            rec.get("error") or "").lower():
        return True
    if needle in str(task_text(rec) or "").lower():
        return True
    return any(needle in str(m.get("content") or "").lower() for m in rec.get("messages") or [])


def episode_table(records: Sequence[dict[str, Any]], *, outcome: str | None = None,
                  infra: bool | None = None, reward_min: float | None = None,
                  reward_max: float | None = None, q: str | None = None,
                  meta: tuple[str, str] | None = None,
                  limit: int | None = None) -> dict[str, Any]:
    """The rows of the episodes that pass every filter given: `outcome` (exact), `infra`
    (True: infra errors only, False: none), rewards within [reward_min, reward_max] (an
    episode without a reward never is), and `q` found (case-insensitively) in the task id,
    the error or any message, and `meta` = (key, value) a slice of the task meta (as the
    report's slice tables group them). Also the headline figures of the rows shown, and the outcomes
    the filter can pick from. With `limit`, only the first `limit` rows are listed (the
    figures still cover every episode shown)."""
    shown = []
    needle = (q or "").strip().lower()
    for rec in records:
        if outcome and rec.get("outcome") != outcome:
            continue
        if infra is not None and bool(rec.get("infra_error")) != infra:
            continue
        if reward_min is not None or reward_max is not None:
            r = number(rec.get("reward"))
            if r is None or (reward_min is not None and r < reward_min) or (
                    reward_max is not None and r > reward_max):
                continue
        if needle and not _matches(rec, needle):
            continue
        if meta is not None and str((rec.get("meta") or {}).get(meta[0])) != meta[1]:
            continue
        shown.append(rec)
    return jsonable({"total": len(records), "shown": len(shown),
                   "outcomes": outcome_counts(records), "headline": headline(shown),
                   "rows": [episode_row(r) for r in shown[:limit]]})


# ------------------------------------------------------------------------------ a trajectory
def find_record(records: Sequence[dict[str, Any]], index: int) -> dict[str, Any]:
    for rec in records:
        if rec.get("index") == index:
            return rec
    raise UsageError(f"no episode with index {index} (the run has "
                     f"{len(records)} episodes)")


def action_text(message: dict[str, Any]) -> str | None:
    """An assistant message as the view shows it: its text, then one line per tool call,
    `-> name(arguments)  [call id]`."""
    calls = message.get("tool_calls")
    if not calls:
        return message.get("content")
    lines = [str(message.get("content") or "")] if message.get("content") else []
    for c in calls:
        fn = c.get("function") or {} if isinstance(c, dict) else {}
        lines.append(f"-> {fn.get('name', '')}({fn.get('arguments', '')})  "
                     f"[{c.get('id', '') if isinstance(c, dict) else ''}]")
    return "\n".join(lines)


def observation_text(message: dict[str, Any]) -> str:
    """An env message as the view shows it; a tool result says which call it answers."""
    if message.get("role") == "tool":
        return (f"[{message.get('name') or 'tool'} {message.get('tool_call_id', '')}] "
                f"{message.get('content') or ''}")
    return str(message.get("content") or "")


def trajectory(rec: dict[str, Any]) -> dict[str, Any]:
    """An episode as a story: the task's text (`task_text`), the system prompt, the first
    observation, then each turn's action, the reward it got and the env's answer (tool
    output, feedback), then how it ended (outcome, reward breakdown, the env's final info: a
    verifier's output, per-check results, the infra error) and what a correct answer was
    (the record's "expected": gold SQL and its rows, the answer; None in records from
    before the key, or where the env keeps it secret)."""
    messages = list(rec.get("messages") or [])
    system = None
    if messages and messages[0].get("role") == "system":
        system = messages.pop(0).get("content")
    first = None
    if messages and messages[0].get("role") != "assistant":
        first = messages.pop(0).get("content")
    rewards = list(rec.get("rewards") or [])
    turns: list[dict[str, Any]] = []
    for m in messages:
        if m.get("role") == "assistant":
            k = len(turns)
            turns.append({"turn": k + 1, "action": action_text(m),
                          "reward": number(rewards[k]) if k < len(rewards) else None,
                          "observation": None})
        elif turns and turns[-1]["observation"] is None:
            turns[-1]["observation"] = observation_text(m)
        elif turns:  # a second message after one action (a tool result and a hint)
            turns[-1]["observation"] += "\n\n" + observation_text(m)
        else:
            first = (first or "") + "\n\n" + str(m.get("content"))
    final_info = dict(rec.get("final_info") or {})
    return jsonable({
        "row": episode_row(rec), "question": task_text(rec),
        "expected": expected if isinstance(expected := rec.get("expected"), dict) else None,
        "system_prompt": system, "first_observation": first,
        "turns": turns, "reward_breakdown": rec.get("reward_breakdown") or {},
        "final_info": final_info, "meta": rec.get("meta") or {},
        "seed": rec.get("seed"), "agent": rec.get("agent"), "env_id": rec.get("env_id"),
        "terminated": rec.get("terminated"), "truncated": rec.get("truncated"),
        "error_source": rec.get("error_source"), "agent_s": number(rec.get("agent_s"))})


# ------------------------------------------------------------------------------ comparisons
def comparison(base: Run, other: Run) -> dict[str, Any]:
    """Two eval runs side by side: `skyhub eval compare`'s statistics (its own function) and
    one row per episode index with both sides' result."""
    for r in (base, other):
        if r.kind != "eval":
            raise UsageError(f"{r.label} is a training run: only eval runs can be compared")
    cmp = compare_runs([base.path, other.path])
    a = {rec["index"]: rec for rec in base.records()}
    b = {rec["index"]: rec for rec in other.records()}
    rows = []
    for index in sorted(set(a) | set(b)):
        ra, rb = a.get(index), b.get(index)
        same = ra is not None and rb is not None and ra.get("task_id") == rb.get("task_id")
        rows.append({"index": index,
                     "task_id": (ra or rb or {}).get("task_id"),
                     "paired": same and not (ra.get("infra_error") or rb.get("infra_error")),
                     "same_task": same,
                     "a": None if ra is None else episode_row(ra),
                     "b": None if rb is None else episode_row(rb),
                     "verdict": _verdict(ra, rb) if same else None})
    return jsonable({"base": base.id, "other": other.id, "stats": cmp.to_dict(),
                   "markdown": cmp.to_markdown(), "rows": rows})


def _verdict(ra: Any, rb: Any) -> str:
    """How the pair went: both right, both wrong, "a only", "b only", or "infra"."""
    if is_infra(ra) or is_infra(rb):
        return "infra"
    sa, sb = is_success(ra), is_success(rb)
    return {(True, True): "both", (False, False): "neither", (True, False): "a only",
            (False, True): "b only"}[(sa, sb)]


# ------------------------------------------------------------------------ training curves
def curves(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A training run's curves: `panels` (CURVE_PANELS that have data), each with its series
    as [[step, value], ...], and `others`, every other logged number by key."""
    def series(key: str) -> list[list[float]]:
        pts = []
        for r in rows:
            step, v = number(r.get("step")), number(r.get(key))
            if step is not None and v is not None:
                pts.append([step, v])
        return pts

    keys: dict[str, None] = {}
    for r in rows:
        for k, v in r.items():
            if number(v) is not None and k not in _NOT_CURVES:
                keys[k] = None
    panels, used = [], set()
    for title, wanted in CURVE_PANELS:
        present = {k: series(k) for k in wanted if k in keys}
        present = {k: s for k, s in present.items() if s}
        used.update(wanted)
        if present:
            panels.append({"title": title, "series": present})
    others = {k: series(k) for k in keys if k not in used}
    return jsonable({"steps": len(rows), "panels": panels,
                   "others": {k: s for k, s in others.items() if s}})


__all__ = ["CURVE_PANELS", "comparison", "curves", "episode_row", "episode_table",
           "find_record", "in_progress", "run_info", "task_text", "trajectory"]
