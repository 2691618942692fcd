"""An eval run directory (`skyhub eval --out DIR`, the format: docs/eval.md): `run.json` (what
was run), `episodes.jsonl` (one line per episode, appended as episodes finish) and
`summary.json`, each written as strict JSON (`skyhub.json_safe.dumps`: no NaN or
Infinity, which other parsers refuse).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyhub.errors import UsageError
from skyhub.json_safe import dumps

if TYPE_CHECKING:
    from skyhub.eval.metrics import Summary

# What must match for `resume` to continue a run rather than mix two different ones.
#: What must be the same to resume a run: the env, the agent and every agent setting that
#: changes results, the seed, the attempts per task (a larger `n` extends the sample) and the
#: protocol ("tools" or "text": native tool calls or the env's text protocol).
_RUN_KEYS = ("env_id", "env_kwargs", "agent", "agent_settings", "seed", "attempts",
             "protocol")
_RUN_DEFAULTS = {"agent_settings": {}, "attempts": 1, "protocol": "text"}


class RunDir:
    """An eval run directory being written: `open`, then `append` each episode, then
    `write_summary`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def open(self, config: dict[str, Any], *, resume: bool, overwrite: bool = False,
             rerun_errors: Collection[str] | None = None) -> list[dict[str, Any]]:
        """Start or continue a run; returns the episodes kept from an earlier attempt: on
        resume, all but the infra errors, or with `rerun_errors` all but the infra errors of
        those types (`error_type`; the others are kept as they are).
        `overwrite` first deletes what an earlier run wrote there (`WRITTEN`), nothing else."""
        episodes = self.path / "episodes.jsonl"
        if resume and overwrite:
            raise UsageError("--resume continues the run in --out and --overwrite deletes it: "
                             "pass one of them")
        if overwrite:
            self.clear()
        kept: list[dict[str, Any]] = []
        if resume and (self.path / "run.json").is_file():
            before = json.loads((self.path / "run.json").read_text())
            for k, default in _RUN_DEFAULTS.items():  # a run.json from before the key
                before.setdefault(k, default)
            changed = [line for k in _RUN_KEYS
                       for line in changes(k, before.get(k), config.get(k))]
            if changed:
                raise UsageError(
                    f"--resume: {self.path} holds a different run; changed: "
                    + "; ".join(changed)
                    + ". Resume with the same env, kwargs, --agent and its settings, --seed, "
                    "--attempts and protocol (--tools or --no-tools), or pick a new --out "
                    "directory (or --overwrite it)")
            kept = [r for r in load_records(self.path) if not r["infra_error"] or (
                rerun_errors is not None and error_type(r) not in rerun_errors)]
        elif resume:
            raise UsageError(f"--resume: {self.path} holds no run (no run.json); drop --resume "
                             "to start one there")
        elif episodes.is_file() and episodes.stat().st_size:
            raise UsageError(f"{episodes} already holds episodes: pass --resume to continue that "
                             "run, --overwrite to replace it, or choose another --out directory")
        self._resumed = resume
        # the folders `open` creates (the run's, and any missing parents such as runs/eval/):
        # a run that records nothing removes them again
        self._made = [d for d in (self.path, *self.path.parents) if not d.exists()]
        self._appended = 0
        self.path.mkdir(parents=True, exist_ok=True)
        from skyhub import __version__

        record = {**config, "skyhub_version": __version__,
                  "started": datetime.now(UTC).isoformat(timespec="seconds")}
        (self.path / "run.json").write_text(dumps(record, indent=2, default=str) + "\n")
        self._file = episodes.open("a", encoding="utf-8")
        return kept

    #: What a run writes into its directory (`--overwrite` deletes these, and only these).
    WRITTEN = ("run.json", "episodes.jsonl", "summary.json", "report.md", "report.html",
               "plots")

    def clear(self) -> None:
        """Delete what an eval run wrote here (`WRITTEN`); other files are left alone."""
        for name in self.WRITTEN:
            target = self.path / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()

    def discard_if_empty(self) -> bool:
        """A run that recorded no episode leaves nothing behind: delete the files `open`
        made (and the folders, if `open` made them). A resumed run is left as it was found.
        True if it was discarded."""
        if self._appended or self._resumed:
            return False
        self._file.close()
        for name in ("episodes.jsonl", "summary.json", "run.json"):
            (self.path / name).unlink(missing_ok=True)
        for folder in self._made:  # innermost first; one that is not empty stays
            with contextlib.suppress(OSError):
                folder.rmdir()
        return True

    def append(self, record: dict[str, Any]) -> None:
        self._appended += 1
        self._file.write(dumps(record, default=str, ensure_ascii=False) + "\n")
        self._file.flush()

    def write_summary(self, summary: Summary) -> None:
        self._file.close()
        (self.path / "summary.json").write_text(dumps(summary.to_dict(), indent=2) + "\n")


def changes(key: str, before: Any, now: Any) -> list[str]:
    """What differs between two run.json values, one `path: before there, now here` line per
    changed leaf (`agent_settings.temperature: 0.0 there, 0.7 now`), not the whole dicts."""
    if isinstance(before, dict) and isinstance(now, dict):
        return [line for k in sorted(set(before) | set(now), key=str)
                for line in changes(f"{key}.{k}", before.get(k), now.get(k))]
    if json.dumps(before, sort_keys=True, default=str) == json.dumps(now, sort_keys=True,
                                                                       default=str):
        return []
    return [f"{key}: {before!r} there, {now!r} now"]


def error_type(record: dict[str, Any]) -> str | None:
    """An infra error's kind, as Harbor's `exception_type` names one (None: no infra
    error): the exception's class name where the error starts with it (`SandboxUnavailable:
    building ...`), `AgentError` for the agent's model server, `InfraError` otherwise."""
    if not record.get("infra_error"):
        return None
    head = str(record.get("error") or "").split(":", 1)[0].strip()
    if head.isidentifier() and head[:1].isupper():
        return head
    return "AgentError" if record.get("error_source") == "agent" else "InfraError"


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The JSON-object lines of a JSONL file (metrics.jsonl, an episodes file), in file order;
    a torn or non-object line is skipped, and a missing or unreadable file is []."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def read_episodes(path: str | Path) -> list[dict[str, Any]]:
    """The episodes of an episodes JSONL file (an eval run's episodes.jsonl, a training run's
    episodes/step-N.jsonl), sorted by `index`: a line without one gets its position, and
    the last line for an index wins (a resumed run appends the episode it re-ran)."""
    by_index: dict[int, dict[str, Any]] = {}
    for n, rec in enumerate(read_jsonl(path)):
        index = rec.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            rec["index"] = index = n
        by_index[index] = rec
    return [by_index[k] for k in sorted(by_index)]


def load_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """The episodes of a run directory (`read_episodes` of its episodes.jsonl)."""
    path = Path(run_dir) / "episodes.jsonl"
    if not path.is_file():
        from skyhub.errors import DataNotFound

        raise DataNotFound(f"{path} not found: is {run_dir} the --out directory of a "
                           "`skyhub eval` run?")
    return read_episodes(path)


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file of a run directory (run.json, summary.json), or {} when it is
    missing, unreadable or not an object: a report still renders from episodes.jsonl."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


__all__ = ["RunDir", "changes", "error_type", "load_records", "read_json"]
