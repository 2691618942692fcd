"""An eval run's episodes as training and interchange data (`skyhub eval export`).

Two formats, both read by Harbor's tools and by SFT trainers:

- **ATIF** (Harbor's Agent Trajectory Interchange Format, RFC 0001): one JSON file per
  episode, as Harbor writes one `trajectory.json` per trial. Steps are numbered from 1: the
  env's system prompt (`source: "system"`), the first observation (`"user"`), then one
  `"agent"` step per action whose `observation` holds the env's reply; the step's reward
  is in its `extra`. A tool turn's calls are the step's `tool_calls` and each result an
  observation result naming its call (`source_call_id`). `final_metrics` carries the token
  totals and the episode's verdict,
  and the root `extra` keeps every other field of the episodes.jsonl line, so nothing
  the run recorded is lost.
- **ShareGPT** (JSONL, one conversation per episode): `{"conversations": [{"from":
  "system"|"human"|"gpt", "value": ...}], ...}` with Harbor's row fields (`agent`, `model`,
  `task`, `episode`, `run_id`, `trial_name`, `result`, `date`). As in Harbor's trace
  export, the conversation ends with the agent's last message: the env's reply to it is no
  training target and is left out, and an episode in which the agent never acted gives no
  row. A tool turn's calls are written in the `gpt` value as hermes-style
  `<tool_call>{"name", "arguments"}</tool_call>` lines after its text.

Filters are Harbor's `--filter success`, and a reward floor: `success_only` keeps the
episodes whose outcome is `success` (skyhub's definition of accuracy, not a reward above 0);
`min_reward` keeps those whose reward is at least that. Either drops infra errors.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyhub.errors import UsageError
from skyhub.eval.rundir import read_episodes, read_json
from skyhub.json_safe import dumps

#: The ATIF version the exported files declare: the oldest that has every field they use
#: (root `extra` came in v1.1), so older readers accept them too.
ATIF_VERSION = "ATIF-v1.4"
FORMATS = ("atif", "sharegpt")
_ROLES = {"system": "system", "user": "human", "assistant": "gpt"}


@dataclass
class Turns:
    """An episode's conversation: the system prompt, the first observation, then each
    action with the env's reply to it ("" when none) and its reward (None when unknown)."""

    system: str | None
    first: str
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    rewards: list[float | None] = field(default_factory=list)
    calls: list[list[dict[str, Any]]] = field(default_factory=list)  # per action: tool_calls
    results: list[list[dict[str, Any]]] = field(default_factory=list)  # its `tool` messages


@dataclass
class Export:
    """What `export_run` wrote: the files, how many episodes, and why the others were not."""

    format: str
    out: Path
    written: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    files: list[Path] = field(default_factory=list)

    def describe(self) -> str:
        what = "ATIF trajectories" if self.format == "atif" else "ShareGPT conversations"
        line = f"wrote {self.written} {what} to {self.out}"
        if self.skipped:
            line += " (left out: " + ", ".join(f"{n} {why}" for why, n in
                                               sorted(self.skipped.items())) + ")"
        return line


def read_run(run_dir: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`(run.json, episodes)` of an eval run directory, or a UsageError saying what is
    missing. A torn last line (a run stopped mid-write) is left out, as everywhere else; a
    broken line before it means the file was damaged or is not an episodes file."""
    path = Path(run_dir)
    episodes = path / "episodes.jsonl"
    if not path.is_dir():
        raise UsageError(f"{path} is not a directory: pass the --out directory of a "
                         "`skyhub eval` run")
    if not episodes.is_file():
        raise UsageError(f"{path} holds no episodes.jsonl: is it the --out directory of a "
                         "`skyhub eval` run?")
    lines = episodes.read_text(encoding="utf-8", errors="replace").splitlines()
    for n, line in enumerate(lines[:-1], 1):
        try:
            ok = isinstance(json.loads(line), dict)
        except json.JSONDecodeError:
            ok = False
        if not ok:
            raise UsageError(f"{episodes}, line {n}, is not a JSON object: the file is "
                             "damaged; fix or delete that line, or re-run the eval")
    records = read_episodes(episodes)
    if not records:
        raise UsageError(f"{episodes} holds no episodes: run `skyhub eval ... --out {path}` "
                         "first (or wait for its first episode to finish)")
    return read_json(path / "run.json"), records


def turns_of(record: dict[str, Any]) -> Turns:
    """The conversation of one episodes.jsonl line (its `messages`: system, the first user
    message, then assistant messages each followed by the env's replies). A message after an
    action that is not the agent's is the env's reply; two in a row are joined."""
    where = f"episode {record.get('index')} (task {record.get('task_id')!r})"
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        raise UsageError(f"{where} has no messages: the line is not a `skyhub eval` episode "
                         "record (see docs/eval.md, 'One line of episodes.jsonl')")
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str)
                and isinstance(m.get("content"), str)):
            raise UsageError(f"{where}: message {i} is not a {{'role': str, 'content': str}} "
                             f"object ({str(m)[:80]!r}); the record is damaged")
    i, system = 0, None
    if messages[0]["role"] == "system":
        system, i = messages[0]["content"], 1
    if i >= len(messages) or messages[i]["role"] != "user":
        raise UsageError(f"{where}: its messages do not start with the task (a user message "
                         "after the optional system prompt); the record is damaged")
    turns = Turns(system, messages[i]["content"])
    for m in messages[i + 1:]:
        if m["role"] == "assistant":
            turns.actions.append(m["content"])
            turns.observations.append("")
            calls = m.get("tool_calls")
            turns.calls.append([c for c in calls if isinstance(c, dict)]
                               if isinstance(calls, list) else [])
            turns.results.append([])
        elif not turns.actions:
            turns.first += "\n\n" + m["content"]
        else:
            last = turns.observations[-1]
            turns.observations[-1] = f"{last}\n\n{m['content']}" if last else m["content"]
            if m["role"] == "tool":
                turns.results[-1].append(m)
    rewards = record.get("rewards")
    if isinstance(rewards, list) and rewards and len(rewards) != len(turns.actions):
        raise UsageError(f"{where} has {len(turns.actions)} actions but {len(rewards)} "
                         "per-step rewards; the record is damaged")
    turns.rewards = [_number(r) for r in rewards] if isinstance(rewards, list) and rewards \
        else [None] * len(turns.actions)
    return turns


def _function(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function")
    return fn if isinstance(fn, dict) else call


def _arguments(args: Any) -> dict[str, Any]:
    """A call's arguments as an object (ATIF's type): parsed JSON text, else `{"raw": text}`
    (a malformed call is recorded as the agent sent it)."""
    if isinstance(args, dict):
        return args
    try:
        value = json.loads(args) if isinstance(args, str) and args.strip() else {}
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"raw": args}


def keep(record: dict[str, Any], *, success_only: bool = False,
         min_reward: float | None = None) -> str | None:
    """Why the filters leave `record` out, or None to keep it."""
    if (success_only or min_reward is not None) and record.get("infra_error"):
        return "infra errors"
    if success_only and record.get("outcome") != "success":
        return "not successful"
    if min_reward is not None:
        reward = _number(record.get("reward"))
        if reward is None or reward < min_reward:
            return f"reward below {min_reward:g}"
    return None


def to_atif(record: dict[str, Any], run: dict[str, Any], run_id: str) -> dict[str, Any]:
    """One episode as an ATIF trajectory (a dict ready for `json.dumps`)."""
    turns = turns_of(record)
    steps: list[dict[str, Any]] = []
    if turns.system:
        steps.append({"step_id": 1, "source": "system", "message": turns.system})
    steps.append({"step_id": len(steps) + 1, "source": "user", "message": turns.first})
    for k, (action, observation) in enumerate(zip(turns.actions, turns.observations,
                                                  strict=True)):
        step: dict[str, Any] = {"step_id": len(steps) + 1, "source": "agent", "message": action}
        if turns.calls[k]:
            step["tool_calls"] = [{"tool_call_id": str(c.get("id", "")),
                                   "function_name": str(_function(c).get("name", "")),
                                   "arguments": _arguments(_function(c).get("arguments"))}
                                  for c in turns.calls[k]]
            known = {c["tool_call_id"] for c in step["tool_calls"]}
            step["observation"] = {"results": [
                {"source_call_id": r.get("tool_call_id"), "content": r["content"]}
                if r.get("tool_call_id") in known else {"content": r["content"]}
                for r in turns.results[k]]}
            if not step["observation"]["results"]:
                del step["observation"]
        elif observation:
            step["observation"] = {"results": [{"content": observation}]}
        step["extra"] = {"turn": k + 1, "reward": turns.rewards[k]}
        steps.append(step)
    agent: dict[str, Any] = {"name": str(record.get("agent") or run.get("agent") or "unknown"),
                             "version": str(run.get("skyhub_version") or _version())}
    settings = run.get("agent_settings")
    if isinstance(settings, dict):
        if isinstance(settings.get("model"), str):
            agent["model_name"] = settings["model"]
        agent["extra"] = {"agent_settings": settings}
    tokens = record.get("tokens") if isinstance(record.get("tokens"), dict) else {}
    final: dict[str, Any] = {"total_steps": len(steps)}
    for ours, theirs in (("prompt", "total_prompt_tokens"),
                         ("completion", "total_completion_tokens")):
        if isinstance(tokens.get(ours), int) and not isinstance(tokens.get(ours), bool):
            final[theirs] = tokens[ours]
    final["extra"] = {k: record.get(k) for k in ("reward", "outcome", "infra_error",
                                                 "reward_breakdown")}
    return {"schema_version": ATIF_VERSION, "session_id": f"{run_id}__{_trial(record)}",
            "agent": agent, "steps": steps,
            "notes": f"exported by skyhub from eval run {run_id!r}, episode "
                     f"{record.get('index')}; the root extra is the episodes.jsonl line "
                     "without its messages",
            "final_metrics": final,
            "extra": {k: v for k, v in record.items() if k != "messages"}}


def to_sharegpt(record: dict[str, Any], run: dict[str, Any],
                run_id: str) -> dict[str, Any] | None:
    """One episode as a ShareGPT row, or None when the agent never acted."""
    turns = turns_of(record)
    if not turns.actions:
        return None
    conv = [{"from": "system", "value": turns.system}] if turns.system else []
    conv.append({"from": "human", "value": turns.first})
    for k, action in enumerate(turns.actions):
        if k:
            conv.append({"from": "human", "value": turns.observations[k - 1]})
        calls = [json.dumps({"name": _function(c).get("name", ""),
                             "arguments": _arguments(_function(c).get("arguments"))},
                            ensure_ascii=False) for c in turns.calls[k]]
        conv.append({"from": "gpt", "value": "\n".join(
            [action] * bool(action) + [f"<tool_call>{c}</tool_call>" for c in calls])})
    settings = run.get("agent_settings") if isinstance(run.get("agent_settings"), dict) else {}
    reward = _number(record.get("reward"))
    if record.get("infra_error"):
        result = f"infra_error ({record.get('error_source') or 'env'})"
    else:
        result = None if reward is None else str(reward)
    return {"conversations": conv, "agent": record.get("agent") or run.get("agent"),
            "model": settings.get("model"), "date": run.get("started"),
            "task": record.get("task_id"), "episode": f"episode-{len(turns.actions) - 1}",
            "run_id": run_id, "trial_name": _trial(record), "result": result,
            "reward": reward, "outcome": record.get("outcome"),
            "attempt": record.get("attempt"), "env_id": record.get("env_id")}


def export_run(run_dir: str | Path, fmt: str, out: str | Path, *, success_only: bool = False,
               min_reward: float | None = None) -> Export:
    """Write the episodes of an eval run directory as `fmt` (`atif`: one JSON file per
    episode in the folder `out`; `sharegpt`: the JSONL file `out`)."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    run, records = read_run(run_dir)
    run_id = Path(run_dir).resolve().name
    out = Path(out)
    result = Export(fmt, out)
    kept = []
    for rec in records:
        why = keep(rec, success_only=success_only, min_reward=min_reward)
        if why:
            result.skipped[why] += 1
        else:
            kept.append(rec)
    if fmt == "atif":
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {out} is a file: ATIF is one JSON file per episode, so "
                             "--out names a folder")
        docs = [(rec, to_atif(rec, run, run_id)) for rec in kept]  # all checked before writing
        out.mkdir(parents=True, exist_ok=True)
        for rec, doc in docs:
            path = out / f"{_trial(rec)}.json"
            path.write_text(dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            result.files.append(path)
        result.written = len(docs)
        return result
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder: ShareGPT is one JSONL file, so --out "
                         "names a file (e.g. sft.jsonl)")
    rows = []
    for rec in kept:
        row = to_sharegpt(rec, run, run_id)
        if row is None:
            result.skipped["without an agent turn"] += 1
        else:
            rows.append(row)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    result.files.append(out)
    result.written = len(rows)
    return result


def _trial(record: dict[str, Any]) -> str:
    """The episode's name, as Harbor names a trial `<task>__<id>`: its task id (made safe
    for a file name) and its index in the run."""
    task = str(record.get("task_id") or "episode")
    return f"{re.sub(r'[^A-Za-z0-9._-]+', '_', task)}__{record.get('index')}"


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x)


def _version() -> str:
    from skyhub import __version__

    return __version__


__all__ = ["ATIF_VERSION", "FORMATS", "Export", "Turns", "export_run", "keep", "read_run",
           "to_atif", "to_sharegpt", "turns_of"]
