"""A run broken down: by a meta slice (difficulty, dataset, db_id...), by turns used, by why
episodes ended (the error taxonomy), and example failures. Each row's figures are
`skyhub.eval.metrics`' (`headline`), so a slice's accuracy means what the run's does.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from skyhub.eval.metrics import headline, is_infra, is_success, number

# meta keys worth a per-value table, in the order their tables appear
SLICE_KEYS = ("dataset", "split", "difficulty", "hardness", "level", "category", "type",
              "source", "db_id")  # db_id last: the longest table
MAX_SLICE_VALUES = 50
# difficulty-like values sort in this order, before any other value
_DIFFICULTY_ORDER = ("easy", "medium", "hard", "extra", "extra hard", "extra_hard")


def _meta_value(rec: dict[str, Any], key: str) -> str | None:
    value = (rec.get("meta") or {}).get(key)
    return None if value is None else str(value)


def _sort_key(value: str, n: int, key: str) -> tuple[Any, ...]:
    """Difficulty words first in their natural order; `level` values by their number; else the
    largest slices first."""
    low = value.lower()
    if low in _DIFFICULTY_ORDER:
        return (0, _DIFFICULTY_ORDER.index(low), 0, ())
    if key == "level":
        digits = re.findall(r"\d+", value)
        if digits:
            return (1, int(digits[0]), 0, _natural(value))
    return (2, 0, -n, _natural(value))


def _natural(value: str) -> tuple[Any, ...]:
    """Natural order: db2 before db10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", value.lower()))


def slice_table(records: Sequence[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """One row per value of `meta[key]`: {value, n, accuracy, ci95, mean_reward, infra_errors}.
    `n` counts every episode with that value (infra errors included; accuracy and mean reward
    leave them out). Episodes without the key form a "(missing)" row when others have it."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        value = _meta_value(r, key)
        groups["(missing)" if value is None else value].append(r)
    if set(groups) == {"(missing)"}:
        return []
    rows = []
    for value, recs in groups.items():
        h = headline(recs)
        rows.append({"value": value, "n": h["episodes"], "accuracy": h["accuracy"],
                     "ci95": h["ci95"], "mean_reward": h["mean_reward"],
                     "infra_errors": h["infra_errors"]})
    rows.sort(key=lambda row: (row["value"] == "(missing)",
                               _sort_key(row["value"], row["n"], key)))
    return rows


def slice_keys(records: Sequence[dict[str, Any]]) -> list[str]:
    """The meta keys of SLICE_KEYS that split the run into 2..50 values (one value says
    nothing; hundreds are a task id, not a slice)."""
    keys = []
    for key in SLICE_KEYS:
        values = {v for v in (_meta_value(r, key) for r in records) if v is not None}
        if 2 <= len(values) <= MAX_SLICE_VALUES:
            keys.append(key)
    return keys


def _normalise_error(error: Any) -> str:
    """The first line of an error, with addresses and long numbers (ids, ports, timestamps)
    blanked so that the same failure groups together; short codes like HTTP 503 stay."""
    text = str(error or "").strip().splitlines()[0] if str(error or "").strip() else ""
    text = re.sub(r"0x[0-9a-fA-F]+", "0x…", text)
    text = re.sub(r"[0-9a-fA-F]{8}-[0-9a-fA-F-]{27,}", "<id>", text)
    text = re.sub(r"\d{4,}", "N", text)
    text = re.sub(r"\s+", " ", text).strip()
    return text[:60].rstrip()


def error_category(rec: dict[str, Any]) -> str:
    """Why an episode ended the way it did, from the generic record fields and, where an env
    provides them, `final_info["format_violations"]` / `final_info["solution_error"]`."""
    info = rec.get("final_info") or {}
    if not isinstance(info, dict):
        info = {}
    if is_infra(rec):
        source = rec.get("error_source") or "env"
        detail = _normalise_error(rec.get("error"))
        return f"infra: {source}: {detail}" if detail else f"infra: {source}"
    if is_success(rec):
        return "correct"
    if info.get("format_violations"):
        return "format violation"
    if info.get("solution_error"):
        return "solution error"
    if rec.get("truncated"):
        return "out of turns"
    if rec.get("outcome") == "failure":
        return "wrong answer"
    return str(rec.get("outcome") or "unknown")


def error_taxonomy(records: Iterable[dict[str, Any]]) -> list[tuple[str, int]]:
    """(category, count) for every category of `error_category`, largest first."""
    counts = Counter(error_category(r) for r in records)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def turns_histogram(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows {turns, episodes, infra_errors, successes, success_rate}; the rate is the accuracy
    of the episodes that used that many turns (None where none of them is scored)."""
    groups: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[int(number(r.get("turns")) or 0)].append(r)
    rows = []
    for turns in sorted(groups):
        h = headline(groups[turns])
        rows.append({"turns": turns, "episodes": h["episodes"], "infra_errors": h["infra_errors"],
                     "successes": h["successes"],
                     "success_rate": h["accuracy"] if h["scored"] else None})
    return rows


def last_assistant_message(rec: dict[str, Any]) -> str:
    for m in reversed(rec.get("messages") or []):
        if isinstance(m, dict) and m.get("role") == "assistant":
            return str(m.get("content") or "")
    return ""


def example_failures(records: Sequence[dict[str, Any]], k: int = 5,
                     width: int = 300) -> list[dict[str, Any]]:
    """Up to `k` scored failures (first by index): the agent's fault, not the infra's."""
    out = []
    for r in records:
        if is_infra(r) or is_success(r):
            continue
        text = last_assistant_message(r)
        if len(text) > width:
            text = text[:width] + "…"
        out.append({"index": r.get("index"), "task_id": r.get("task_id"),
                    "category": error_category(r), "message": text})
        if len(out) >= k:
            break
    return out


__all__ = ["SLICE_KEYS", "error_category", "error_taxonomy", "example_failures", "slice_keys",
           "slice_table", "turns_histogram"]
