"""Evaluation suites: a named set of eval runs plus the published numbers to compare with.

    skyhub eval suite skyrl-sql --agent openai:my-model --base-url http://localhost:8000/v1

A suite is what a paper's results table is: the same agent on several datasets under one
protocol (turn budget, scoring), and reference rows from the literature. Env families
register their suites when the registry loads them (like their envs), so core knows none of
them by name: `envs/sql` registers `skyrl-sql` (SkyRL-SQL's Spider evaluation).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from skyhub.errors import UsageError


@dataclass(frozen=True)
class SuiteRun:
    """One column of the results table: `env_id` made with `kwargs`."""

    name: str  # the column header, e.g. "Spider-Dev"
    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_turns: int | None = None  # passed to the env as max_turns= when set
    data_hint: str = ""  # how to get the data when it is missing (shown in the report)


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    runs: tuple[SuiteRun, ...]
    # published results: row label -> column name -> accuracy in percent
    reference: dict[str, dict[str, float]] = field(default_factory=dict)
    source: str = ""  # where the reference rows come from (paper, blog, repository)

    def run(self, name: str) -> SuiteRun:
        for r in self.runs:
            if r.name == name:
                return r
        raise UsageError(f"suite {self.name!r} has no run {name!r}; its runs: "
                         f"{', '.join(r.name for r in self.runs)}")


_lock = threading.Lock()
_suites: dict[str, Suite] = {}


def register_suite(suite: Suite, *, override: bool = False) -> None:
    with _lock:
        if suite.name in _suites and not override:
            raise UsageError(f"suite {suite.name!r} is already registered; pass override=True "
                             "to replace it")
        _suites[suite.name] = suite


def get_suite(name: str) -> Suite:
    from skyhub.registry import load_plugins

    load_plugins()
    with _lock:
        if name not in _suites:
            known = ", ".join(sorted(_suites)) or "none"
            raise UsageError(f"no evaluation suite {name!r}; registered suites: {known}")
        return _suites[name]


def list_suites() -> list[Suite]:
    from skyhub.registry import load_plugins

    load_plugins()
    with _lock:
        return [_suites[k] for k in sorted(_suites)]
