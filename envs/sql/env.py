"""`SQLEnv`: multi-turn Text-to-SQL against a real database (SkyRL-SQL's protocol).

An episode: the first observation has the schema and the question; each turn the agent
thinks and either runs one `<sql>` (the result comes back as an `<observation>` table) or
ends with a `<solution>`. The final reward compares the solution's result with the gold
query's on the same engine (`reward="skyrl"` by default, or `"spider_exec"`: see reward.py).
Running out of turns truncates the episode.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path
from typing import Any

from skyhub.env import TextEnv

from . import protocol
from .datasets import load as load_dataset
from .engines import make_engine
from .engines.base import QueryResult, sqlite_schema
from .reward import score

_schema = lru_cache(maxsize=512)(sqlite_schema)


class _GoldCache:
    """Gold results shared by every env in the process, keyed by (engine, database file and
    its version, SQL):
    GRPO plays each prompt many times, and each episode needs the same gold result. Safe
    because agents can only read (every engine refuses writes)."""

    def __init__(self, size: int = 8192) -> None:
        self.size, self._data = size, OrderedDict[tuple, QueryResult]()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> QueryResult | None:
        with self._lock:
            r = self._data.get(key)
            if r is not None:
                self._data.move_to_end(key)
            return r

    def put(self, key: tuple, r: QueryResult) -> None:
        with self._lock:
            self._data[key] = r
            while len(self._data) > self.size:
                self._data.popitem(last=False)


_GOLD = _GoldCache()
_FULL = 100_000  # rows fetched to score a result (Spider's largest gold result has ~3k)


class SQLEnv(TextEnv):
    """Text-to-SQL episodes.

    Args:
        dataset: `spider` (default), `bird`, `synsql`, `skyrl653` or `synth`.
        data_dir: where the dataset lives (else `$SKYHUB_DATA/<dataset>`, else bundled data).
        split: which questions (`dev`, `train`, ... per dataset).
        engine: `sqlite` (default), `duckdb` or `postgres` (`dsn=` or SKYHUB_POSTGRES_DSN).
        reward: `skyrl` (default; -1 for a broken format) or `spider_exec`.
        max_turns: turns per episode (6, as SkyRL-SQL trains with).
        max_rows / max_chars: how much of a result an observation shows.
        timeout_s: per-statement time limit.
        result_cache: reuse the result of a query already run in the episode (an agent often
            submits the query it just checked) and gold results across episodes. Turn off for
            datasets whose queries are not deterministic (e.g. `random()`).
        dataset_kwargs: passed to the dataset loader (e.g. synth's `n_tasks`, `difficulty`).
    """

    stop_strings = protocol.STOP_STRINGS

    def __init__(self, *, dataset: str = "spider", data_dir: str | Path | None = None,
                 split: str = "dev", engine: str = "sqlite", reward: str = "skyrl",
                 max_turns: int = 6, max_rows: int = 50, max_chars: int = 4000,
                 timeout_s: float = 5.0, example_rows: int = 3, dsn: str | None = None,
                 result_cache: bool = True, **dataset_kwargs: Any) -> None:
        super().__init__()
        if reward not in ("skyrl", "spider_exec"):
            raise ValueError(f"reward must be 'skyrl' or 'spider_exec', got {reward!r}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.data = load_dataset(dataset, data_dir=data_dir, split=split, **dataset_kwargs)
        self.tasks = self.data.tasks
        self.reward_kind, self.max_turns = reward, max_turns
        self.max_rows, self.max_chars, self.example_rows = max_rows, max_chars, example_rows
        engine_kwargs: dict[str, Any] = {"timeout_s": timeout_s}
        if engine == "postgres":
            engine_kwargs["dsn"] = dsn
        self.engine = make_engine(engine, **engine_kwargs)
        self.system_prompt = protocol.SYSTEM_PROMPT.format(max_rows=max_rows)
        self.result_cache = result_cache
        self._paths: dict[str, Path] = {}
        self._results: dict[str, QueryResult] = {}  # this episode's queries, by SQL text
        self._actions: list[str] = []
        self._observations: list[str] = []

    # ------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task = self.start_episode(seed, options)
        self._actions, self._observations, self._results = [], [], {}
        db = task.meta["db_id"]
        path = self._db_path(db)
        self.engine.begin_episode(db, path)
        obs = protocol.FIRST_OBSERVATION.format(
            engine=self.engine.dialect, schema=_schema(path, self.example_rows),
            knowledge=task.meta.get("external_knowledge") or "None", question=task.prompt,
            max_turns=self.max_turns)
        return obs, self.make_info(db_id=db)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None, "call reset() before step()"
        self.turn += 1
        action = action if isinstance(action, str) else str(action)
        self._actions.append(action)
        turn = protocol.parse_turn(action)
        if turn.kind == "solution":
            return self._finish(turn.sql)
        sql_error = True
        if turn.kind == "invalid":
            body = f"Invalid turn: {turn.error}."
        else:
            r = self._run(turn.sql, self.max_rows)
            sql_error = not r.ok
            body = f"Error: {r.error}" if r.error else protocol.render_table(
                r.columns, r.rows, max_rows=self.max_rows, max_chars=self.max_chars) + \
                ("" if not r.truncated else "\n(the result has more rows than shown)")
        left = self.max_turns - self.turn
        if left <= 0:
            self._observations.append("")
            return self._end_without_solution()
        reminder = f"You have {left} turn{'s' if left != 1 else ''} left."
        if left == 1:
            reminder += " This is the last one: give the final query in <solution>...</solution>."
        obs = f"<observation>\n{body}\n\n{reminder}\n</observation>"
        self._observations.append(obs)
        return obs, 0.0, False, False, self.make_info(db_id=self.task.meta["db_id"],
                                                      sql_error=sql_error)

    # ------------------------------------------------------------------ scoring
    def _db_path(self, db: str) -> Path:
        p = self._paths.get(db)
        if p is None:
            p = self._paths[db] = self.data.db_path(db)
        return p

    def _run(self, sql: str, max_rows: int) -> QueryResult:
        """Run `sql` on the episode's database, reusing this episode's earlier result of the
        same text when it holds every row asked for."""
        assert self.task is not None
        r = self._results.get(sql) if self.result_cache else None
        if r is not None and (not r.truncated or len(r.rows) >= max_rows):
            if len(r.rows) <= max_rows:
                return r
            return QueryResult(r.columns, r.rows[:max_rows], r.error, True, r.timed_out)
        db = self.task.meta["db_id"]
        r = self.engine.execute(db, self._db_path(db), sql, max_rows=max_rows)
        if self.result_cache and not r.timed_out:
            self._results[sql] = r
        return r

    def gold_sql(self) -> str:
        """The gold query in the engine's dialect (datasets write it for SQLite)."""
        assert self.task is not None
        db = self.task.meta["db_id"]
        return self.engine.from_sqlite(db, self._db_path(db), str(self.task.answer))

    def gold_result(self) -> QueryResult:
        """The gold query's result on this engine (shared across envs of the process)."""
        assert self.task is not None
        gold = self.gold_sql()
        path = self._db_path(self.task.meta["db_id"])
        st = path.stat()  # a changed file must not be scored against its old gold results
        key = (self.engine.name, str(path), st.st_size, st.st_mtime_ns, gold)
        r = _GOLD.get(key) if self.result_cache else None
        if r is None:
            r = self._run(gold, _FULL)
            if r.ok and self.result_cache:
                _GOLD.put(key, r)
        return r

    def _finish(self, solution: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None
        self._observations.append("")
        violations = protocol.format_violations(self._actions, self._observations)
        gold = self.gold_result()
        db = self.task.meta["db_id"]
        if not gold.ok or gold.truncated:
            # the dataset's own query fails here: not the agent's fault, never a 0
            return "", 0.0, True, False, self.make_info(
                "error", infra_error=True, db_id=db, error=f"gold query failed: {gold.error}",
                reward_breakdown={"format": 0.0, "execution": 0.0})
        pred = self._run(solution, _FULL)
        correct = pred.ok and not pred.truncated and score(
            self.reward_kind, pred.rows, gold.rows, str(self.task.answer))
        fmt = -1.0 if violations else 0.0
        if self.reward_kind == "skyrl":
            reward = -1.0 if violations else float(correct)
        else:
            reward = float(correct)
        outcome = "success" if reward > 0 else "failure"
        return "", reward, True, False, self.make_info(
            outcome, db_id=db, solution_error=pred.error, format_violations=violations,
            reward_breakdown={"format": fmt, "execution": float(correct)})

    def _end_without_solution(self) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None
        reward = -1.0 if self.reward_kind == "skyrl" else 0.0
        return "", reward, False, True, self.make_info(
            "failure", db_id=self.task.meta["db_id"],
            format_violations=["no <solution> before the last turn"],
            reward_breakdown={"format": -1.0, "execution": 0.0})

    def reference_action(self) -> str | None:
        if self.task is None:
            return None
        return ("<think>The gold query answers this.</think>\n"
                f"<solution>{self.gold_sql()}</solution>")

    def close(self) -> None:
        self.engine.close()
