"""SWE-bench-format task instances, read from files as they are published.

SWE-bench, SWE-bench Lite/Verified and SWE-Gym publish one record per task with the same
fields: `instance_id`, `repo` (`owner/name`), `base_commit`, `patch` (the gold fix, source
files only), `test_patch` (the tests that check it), `problem_statement`, `FAIL_TO_PASS` and
`PASS_TO_PASS` (test names; in the Hugging Face files a JSON-encoded string, elsewhere a
list), and optionally `version`, `environment_setup_commit`, `hints_text`, `created_at`.
Datasets with prebuilt images name them in `image_name` (SWE-Gym's and SWE-smith's releases);
newer releases also say how to read their test logs (`log_parser`: a name in the `swebench`
package's `PARSER_REGISTRY`, `eval_type`: `pass_and_fail` or `fail_only`).
The files are JSON (a list of records, or one), JSON Lines, or Parquet; a directory is read
file by file in name order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyhub.errors import DataNotFound, UsageError

REQUIRED = ("instance_id", "repo", "base_commit", "patch", "problem_statement", "FAIL_TO_PASS")
SUFFIXES = (".json", ".jsonl", ".parquet")


@dataclass(frozen=True)
class Instance:
    """One SWE-bench task. `fail_to_pass` must fail before the gold patch and pass after it;
    `pass_to_pass` must pass both times."""

    instance_id: str
    repo: str
    base_commit: str
    patch: str
    problem_statement: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...] = ()
    test_patch: str = ""
    version: str | None = None
    environment_setup_commit: str | None = None
    hints_text: str = ""
    image_name: str | None = None
    log_parser: str | None = None
    eval_type: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_record(cls, record: dict[str, Any], where: str = "record") -> Instance:
        """An instance from one published record (unknown fields kept in `extra`)."""
        missing = [k for k in REQUIRED if not record.get(k)]
        if missing:
            raise UsageError(f"{where}: a SWE-bench instance needs {', '.join(missing)} "
                             f"(fields found: {', '.join(sorted(record)) or 'none'})")
        known = {"instance_id", "repo", "base_commit", "patch", "problem_statement",
                 "FAIL_TO_PASS", "PASS_TO_PASS", "test_patch", "version",
                 "environment_setup_commit", "hints_text", "image_name", "log_parser",
                 "eval_type"}
        version = record.get("version")
        return cls(
            instance_id=str(record["instance_id"]), repo=str(record["repo"]),
            base_commit=str(record["base_commit"]), patch=str(record["patch"]),
            problem_statement=str(record["problem_statement"]),
            fail_to_pass=test_names(record["FAIL_TO_PASS"], f"{where}: FAIL_TO_PASS"),
            pass_to_pass=test_names(record.get("PASS_TO_PASS") or [], f"{where}: PASS_TO_PASS"),
            test_patch=str(record.get("test_patch") or ""),
            version=None if version is None else str(version),
            environment_setup_commit=record.get("environment_setup_commit") or None,
            hints_text=str(record.get("hints_text") or ""),
            image_name=record.get("image_name") or None,
            log_parser=record.get("log_parser") or None,
            eval_type=record.get("eval_type") or None,
            extra={k: v for k, v in record.items() if k not in known})


def test_names(value: Any, where: str) -> tuple[str, ...]:
    """A list of test names, given as a list or as a JSON-encoded list (as in the Hugging
    Face releases)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise UsageError(f"{where}: expected a list of test names or a JSON list, got "
                             f"{value[:80]!r}") from None
    if hasattr(value, "tolist"):  # a numpy array, from parquet
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: expected a list of test names, got {type(value).__name__}")
    return tuple(value)


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of one file (.json, .jsonl or .parquet)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    return data if isinstance(data, list) else [data]


def load_instances(path: str | Path) -> list[Instance]:
    """Every instance in a file, or in the files of a directory (name order). Two instances
    with one id are refused: ids name tasks in results and replays."""
    root = Path(path)
    if root.is_dir():
        files = sorted(p for p in root.iterdir() if p.suffix in SUFFIXES)
    elif root.is_file():
        files = [root]
    else:
        raise DataNotFound(f"no SWE-bench instances at {root}: pass a .json, .jsonl or "
                           ".parquet file, or a directory of them")
    if not files:
        raise DataNotFound(f"{root} holds no .json, .jsonl or .parquet file of instances")
    out: list[Instance] = []
    seen: dict[str, str] = {}
    for f in files:
        if f.suffix not in SUFFIXES:
            raise UsageError(f"{f}: instances are read from {', '.join(SUFFIXES)} files")
        for i, record in enumerate(read_records(f)):
            where = f"{f.name} record {i}"
            inst = Instance.from_record(record, where)
            if inst.instance_id in seen:
                raise UsageError(f"instance {inst.instance_id!r} appears twice "
                                 f"({seen[inst.instance_id]} and {where}); ids must be unique")
            seen[inst.instance_id] = where
            out.append(inst)
    return out


__all__ = ["Instance", "load_instances", "read_records", "test_names"]
