"""`SQLEnv`: multi-turn Text-to-SQL against a real database (SkyRL-SQL's protocol).

An episode: the first observation has the schema and the question; each turn the agent
thinks and either runs one `<sql>` (the result comes back as an `<observation>` table) or
answers with a `<solution>`. Two protocols (`protocol=`), both SkyRL-SQL's:

- `skyrl-train` (default): skyrl-gym 0.4's `text2sql`, step for step. A turn that contains
  both `<solution>` and `</solution>` ends the episode (terminated), and so does the last of
  `max_turns` turns (truncated; 6 by default, SkyRL-SQL's training budget). The reward comes
  at the end: with `reward="skyrl"` (default) -1 when the agent's turns break SkyRL-SQL's
  format rules (proto.skyrl_format: strict lower-case tags, exactly one solution, a think
  block, a think after every observation; the env's own text is never read), else 1 when
  the solution's result rows, as a set, equal the gold's, else 0. Every action sequence gets
  the reward and the done/not-done skyrl-gym gives it (tests/envs/sql/
  test_skyrl_gym_parity.py) except in the cases listed below. With `reward="spider_exec"` the
  last `<solution>` of the final turn gets Spider's official execution verdict (1/0, no
  format rule).
- `skyrl-eval`: SkyRL-SQL's evaluation. Up to `max_turns` tool rounds (5 by default), then
  one final generation whose queries are not run; a turn with a complete
  `<solution>...</solution>` ends the episode. The prediction is the last `<solution>` of the
  agent's turns, with no format rule; a query that fails, runs past 40 s or is missing is
  wrong. Scored with `reward="spider_exec"` by default (the official evaluator's exec match,
  spider_eval.py), which is how SkyRL-SQL's published accuracies were measured. On DuckDB
  and PostgreSQL the official rules apply but for its `value` -> `1` substitution in the
  prediction (a placeholder of old Spider models that would break DuckDB's any_value).

Tool calls (`execute_sql`, `submit_solution`; `protocol="tools"` describes them in the
prompt) are played as the tag turns they stand for, under either protocol: tools.py.

What the agent reads: a task that carries its data's own chat (`meta["prompt_messages"]`,
SkyRL-SQL-653's `prompt`) starts with it verbatim, its system message as the episode's
`system_prompt` (None without one) and its user message as the first observation
(`data_prompt=False`: skyhub's, as for other tasks). Other tasks get skyhub's system prompt and
a first observation in SkyRL-SQL's order (engine, schema, knowledge, question, turn budget),
the schema being the data's own text where it has one (SkyRL-SQL's evaluation files). The
observations after each turn are skyhub's (a table with column names, at most `max_rows`
rows, the turns left), not skyrl-gym's text (a pandas rendering of the rows as a set, a
`<reminder>`): the model reads other words there, and no reward changes.

Where `skyrl-train` differs from skyrl-gym on purpose, with the reward skyhub gives:
- A solution that is not a read (INSERT/UPDATE/DELETE, DDL, ATTACH/DETACH, BEGIN/COMMIT,
  PRAGMA assignments, VACUUM, TEMP objects): skyrl-gym runs it on a read-write connection
  inside a transaction it then rolls back (ATTACH still creates the attached file) and
  scores its result, usually empty: 1.0 when the gold result is empty. skyhub's engines
  refuse it: 0.0 (-1.0 when the format is broken, as in skyrl-gym).
- Tags inside text the env wrote: skyrl-gym's format check reads its own observations,
  which carry database values, error messages and echoed SQL (`<sql>SELECT
  '<solution>...'</sql>` plants a solution there). skyhub reads the agent's turns with empty
  observation frames between them: the reward is the one skyrl-gym gives when no
  observation holds a tag.
- A solution result over 100,000 rows: skyrl-gym keeps all of it in memory and compares it;
  skyhub stops reading and scores 0.0.
- A task whose gold query fails: skyrl-gym scores 0.0 (-1.0 for a broken format); skyhub
  reports an infra error (reward 0.0, outcome `error`, masked by trainers) once the format
  is valid. Text that is not UTF-8 in a database: skyrl-gym cannot read those rows (0.0);
  skyhub decodes it leniently. (Neither happens on the bundled Spider dev data.)

Gold results per engine: the gold query (written for SQLite) runs on the episode's engine
in its dialect (`Engine.from_sqlite`). Where the engine cannot run it (DuckDB refuses
SQLite's text-vs-number comparisons), the canonical SQLite file's result is the gold, and
the reference action (the `oracle` agent's) returns those rows as a literal table, so the
oracle scores 1 on every task on every engine.

Over ~400 lines, for a reason: SkyRL-SQL's protocol step for step, both of its protocols in
one episode flow; split, the fidelity checks would have two places to read.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from skyhub.env import TextEnv
from skyhub.errors import InfraError, UsageError
from skyhub.task import Task

from . import protocol as proto
from . import spider_eval
from . import tools as calls
from .datasets import load as load_dataset
from .engines import make_engine
from .engines.base import Engine, QueryResult, sqlite_schema
from .reward import skyrl_match
from .tools import SQLTools

_schema = lru_cache(maxsize=512)(sqlite_schema)

REWARDS = ("skyrl", "spider_exec")
DEFAULT_MAX_TURNS = {"skyrl-train": 6, "skyrl-eval": 5}
#: the time limit of the solution's and the gold's queries: skyrl-gym scores with 30 s,
#: SkyRL-SQL's evaluation with 40 s (the agent's exploring queries have `query_timeout_s`)
SCORING_TIMEOUT_S = {"skyrl-train": 30.0, "skyrl-eval": 40.0}


class _GoldCache:
    """Gold results shared by every env in the process, keyed by (engine, database file and
    its version, SQL), each with whether the engine itself produced it:
    GRPO plays each prompt many times, and each episode needs the same gold result. Safe
    because agents can only read (every engine refuses writes)."""

    def __init__(self, size: int = 8192) -> None:
        self.size, self._data = size, OrderedDict[tuple, tuple[QueryResult, bool]]()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> tuple[QueryResult, bool] | None:
        with self._lock:
            r = self._data.get(key)
            if r is not None:
                self._data.move_to_end(key)
            return r

    def put(self, key: tuple, r: tuple[QueryResult, bool]) -> None:
        with self._lock:
            self._data[key] = r
            while len(self._data) > self.size:
                self._data.popitem(last=False)


_GOLD = _GoldCache()
_FULL = 100_000  # rows fetched to score a result (Spider's largest gold result has ~3k)
#: rows of the gold result that an episode record keeps (`SQLEnv.expected_answer`)
EXPECTED_ROWS = 5


class SQLEnv(SQLTools, TextEnv):
    """Text-to-SQL episodes.

    Args:
        dataset: `spider` (default), `bird`, `synsql`, `skyrl653` or `synth`.
        data_dir: where the dataset lives (else `$SKYHUB_DATA/<dataset>`, else bundled data).
        split: which questions (`dev`, `train`, ... per dataset).
        engine: `sqlite` (default), `duckdb` or `postgres` (`dsn=` or SKYHUB_POSTGRES_DSN).
        protocol: `skyrl-train` (default: skyrl-gym's episode and reward), `skyrl-eval`
            (SkyRL-SQL's evaluation: tool rounds, a final answer, the last solution scored)
            or `tools` (skyrl-train's episode and reward, a system prompt that describes the
            `execute_sql` and `submit_solution` tools instead of the tags; `tags` is
            skyrl-train). Tool calls are taken under every protocol (tools.py).
        reward: `skyrl` (set equality, -1 for a broken format; the default of skyrl-train)
            or `spider_exec` (Spider's official execution match; the default of skyrl-eval).
        max_turns: skyrl-train: turns per episode (6, as SkyRL-SQL trains with);
            skyrl-eval: tool rounds before the final answer (5, as SkyRL-SQL evaluates).
        max_rows / max_chars: how much of a result an observation shows.
        query_timeout_s: time limit of the agent's exploring queries.
        solution_timeout_s: time limit of the solution's and the gold's queries (30 s in
            skyrl-train as skyrl-gym, 40 s in skyrl-eval as SkyRL-SQL's evaluation).
        example_rows: rows of each table shown with the schema in the first observation.
        dsn: the PostgreSQL server of `engine=postgres` (default $SKYHUB_POSTGRES_DSN).
        result_cache: reuse the result of a query already run in the episode (an agent often
            submits the query it just checked) and gold results across episodes. Turn off for
            datasets whose queries are not deterministic (e.g. `random()`).
        data_prompt: where the task carries the chat its data was published with
            (`meta["prompt_messages"]`: SkyRL-SQL-653's `prompt`), show it as it is: its
            system message is the episode's system prompt (None when it has none) and its
            user message the first observation, whatever the engine (SkyRL-SQL's prompts
            say SQLite). False: skyhub's system prompt and first observation (which names
            the engine and the turn budget) for every task.
        dataset_kwargs: passed to the dataset loader (e.g. synth's `n_tasks`, `difficulty`).
    """

    stop_strings = proto.STOP_STRINGS
    slice_key = "db_id"  # a sample of the tasks is spread over the databases
    # forked by state copy: no statement changes a database (SQLite and DuckDB open them
    # read-only; PostgreSQL rolls every statement back), so an episode's state is its
    # transcript; each child gets its own engine (`fork_resources`)
    fork_state: ClassVar[tuple[str, ...] | None] = ("_actions",)
    #: The loaders' names for databases kept apart from `data_dir` (their docstrings say
    #: which): accepted, and shown by `skyhub info` in data_dir's row, not as kwargs of their
    #: own (one data kwarg per env, as in every family).
    kwarg_aliases: ClassVar[dict[str, str]] = {
        "spider_dir": "data_dir", "bird_dir": "data_dir", "synsql_dir": "data_dir",
        "db_root": "data_dir", "db_dir": "data_dir"}

    @staticmethod
    def kwargs_targets(kwargs: dict[str, Any]) -> list[Any] | None:
        """Where `**dataset_kwargs` go: the loader of the dataset `kwargs` names, so that
        `skyhub info` and make's kwarg check see that loader's kwargs, not every loader's
        (None for an unknown dataset: the loader call reports it)."""
        import importlib

        from .datasets import LOADERS

        target = LOADERS.get(kwargs.get("dataset", "spider"))
        if target is None:
            return None
        module, attr = target.split(":")
        return [getattr(importlib.import_module(module), attr)]

    def __init__(self, *, dataset: str = "spider", data_dir: str | Path | None = None,
                 split: str = "dev", engine: str = "sqlite", protocol: str = "skyrl-train",
                 reward: str | None = None, max_turns: int | None = None, max_rows: int = 50,
                 max_chars: int = 4000, query_timeout_s: float = 5.0,
                 solution_timeout_s: float | None = None, example_rows: int = 3,
                 dsn: str | None = None, result_cache: bool = True, data_prompt: bool = True,
                 **dataset_kwargs: Any) -> None:
        super().__init__()
        rules, prompt = calls.split_protocol(protocol)  # UsageError naming the choices
        reward = reward or ("skyrl" if rules == "skyrl-train" else "spider_exec")
        if reward not in REWARDS:
            raise UsageError(f"reward must be 'skyrl' or 'spider_exec', got {reward!r}")
        max_turns = DEFAULT_MAX_TURNS[rules] if max_turns is None else max_turns
        self.max_turns = max_turns  # ValueError below 1 (TextEnv), before any data is read
        self.data = load_dataset(dataset, data_dir=data_dir, split=split, **dataset_kwargs)
        self.tasks = self.data.tasks
        # `protocol` is "tools" or the rules ("skyrl-train" for "tags"); `rules` the rules
        self.rules, self.reward_kind = rules, reward
        self.protocol = "tools" if prompt == "tools" else rules
        self.tools = calls.schemas()
        self.max_rows, self.max_chars, self.example_rows = max_rows, max_chars, example_rows
        self.solution_timeout_s = (SCORING_TIMEOUT_S[rules] if solution_timeout_s is None
                                   else solution_timeout_s)
        engine_kwargs: dict[str, Any] = {"timeout_s": query_timeout_s}
        if engine == "postgres":
            engine_kwargs["dsn"] = dsn
        self.engine = make_engine(engine, **engine_kwargs)
        self._engine_args = (engine, engine_kwargs)
        self._sqlite: Engine | None = None  # the canonical files, where the engine fails a gold
        # the system prompt of the episode: skyhub's, or the data's own (set by reset)
        self.default_system_prompt = (calls.TOOLS_SYSTEM_PROMPT if prompt == "tools" else
                                      proto.SYSTEM_PROMPT).format(max_rows=max_rows)
        self.system_prompt: str | None = self.default_system_prompt
        self.data_prompt = data_prompt
        self.result_cache = result_cache
        self._paths: dict[str, Path] = {}
        self._results: dict[tuple[str, str], QueryResult] = {}  # (db, SQL) -> result
        self._actions: list[str] = []
        self._gold_sql: tuple[Task, str] | None = None

    # ------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task = self.start_episode(seed, options)
        self._actions, self._results, self._gold_sql = [], {}, None
        db = task.meta["db_id"]
        path = self._db_path(db)
        self.engine.begin_episode(db, path)
        messages = task.meta.get("prompt_messages") if self.data_prompt else None
        if messages:
            self.system_prompt, obs = _data_chat(task, messages)
            if self.protocol == "tools":  # the data's chat describes tags: skyhub's tools prompt
                self.system_prompt = self.default_system_prompt
            return obs, self.make_info(db_id=db)
        self.system_prompt = self.default_system_prompt
        if self.protocol == "tools":
            budget = calls.TOOLS_BUDGET.format(n=self.max_turns)
        elif self.rules == "skyrl-train":
            budget = f"You have {self.max_turns} turns."
        else:
            budget = (f"You have {self.max_turns} turns to run queries, then one more for the "
                      "final answer.")
        obs = proto.FIRST_OBSERVATION.format(
            engine=self.engine.dialect,
            schema=task.meta.get("schema_text") or _schema(path, self.example_rows),
            knowledge=task.meta.get("external_knowledge") or "None", question=task.prompt,
            budget=budget)
        return obs, self.make_info(db_id=db)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None, "call reset() before step()"
        self.next_turn()
        action = action if isinstance(action, str) else str(action)
        self._actions.append(action)
        if self.rules == "skyrl-train":
            if proto.ends_episode(action) or self.out_of_turns:
                return self._finish()
        elif proto.last_solution(action) is not None or self.out_of_turns:
            return self._finish()
        turn = proto.parse_turn(action)
        sql_error = True
        if turn.kind == "sql":
            r = self._run(turn.sql, self.max_rows)
            sql_error = not r.ok
            body = f"Error: {r.error}" if r.error else proto.render_table(
                r.columns, r.rows, max_rows=self.max_rows, max_chars=self.max_chars) + \
                ("" if not r.truncated else "\n(the result has more rows than shown)")
        elif turn.kind == "solution":  # skyrl-eval: both tags, but no complete block
            body = ("Invalid turn: no complete <solution>...</solution> block; write "
                    "<solution>SQL</solution>.")
        else:
            body = f"Invalid turn: {turn.error}."
        obs = f"<observation>\n{body}\n\n{self._reminder()}\n</observation>"
        return obs, 0.0, False, False, self.make_info(db_id=self.task.meta["db_id"],
                                                      sql_error=sql_error)

    @property
    def turns_left(self) -> int | None:
        """Turns the agent may still take: skyrl-eval's `max_turns` counts tool rounds, and
        one more turn follows them for the final answer."""
        extra = 1 if getattr(self, "rules", None) == "skyrl-eval" else 0
        return max(self.max_turns + extra - self.turn, 0)

    def _reminder(self) -> str:
        # The SQL protocol's own wording, not TextEnv.turns_left_note(): SkyRL-SQL's prompts
        # say "You have N turns" (and skyrl-eval counts queries, not turns); tests pin it.
        left = self.max_turns - self.turn
        if self.rules == "skyrl-eval":
            if left <= 0:
                return ("No more queries will run: give your final SQL query in "
                        "<solution>...</solution> now.")
            return f"You have {left} more turn{'s' if left != 1 else ''} to run queries."
        reminder = "You have 1 turn left." if left == 1 else f"You have {left} turns left."
        if left == 1:
            reminder += " This is the last one: give the final query in <solution>...</solution>."
        return reminder

    # ------------------------------------------------------------------ scoring
    def _db_path(self, db: str) -> Path:
        p = self._paths.get(db)
        if p is None:
            p = self._paths[db] = self.data.db_path(db)
        return p

    def _run(self, sql: str, max_rows: int, timeout_s: float | None = None) -> QueryResult:
        """Run `sql` on the episode's database, reusing this episode's earlier result of the
        same text when it holds every row asked for. `timeout_s` overrides the engine's
        limit for this statement (the solution's and the gold's)."""
        assert self.task is not None
        db = self.task.meta["db_id"]
        r = self._results.get((db, sql)) if self.result_cache else None
        if r is not None and (not r.truncated or len(r.rows) >= max_rows):
            if len(r.rows) <= max_rows:
                return r
            return QueryResult(r.columns, r.rows[:max_rows], r.error, True, r.timed_out)
        r = _execute(self.engine, db, self._db_path(db), sql, max_rows, timeout_s)
        if self.result_cache and not r.timed_out:
            self._results[(db, sql)] = r
        return r

    def _gold_text(self) -> str:
        """The dataset's gold query (SQLite), as the official evaluator runs it under
        spider_exec (spider_eval.gold_query: DISTINCT removed, ...)."""
        assert self.task is not None
        gold = str(self.task.answer)
        return spider_eval.gold_query(gold) if self.reward_kind == "spider_exec" else gold

    def gold_sql(self) -> str:
        """The gold query this env scores against, in the engine's dialect (datasets write
        it for SQLite)."""
        assert self.task is not None
        if self._gold_sql is None or self._gold_sql[0] is not self.task:
            db = self.task.meta["db_id"]  # once per task: a rewrite parses the query
            self._gold_sql = (self.task, self.engine.from_sqlite(db, self._db_path(db),
                                                                 self._gold_text()))
        return self._gold_sql[1]

    def gold_result(self) -> QueryResult:
        """The gold result of this task on this engine (shared across envs of the process):
        the gold query's on the engine, else, where the engine cannot run it, the canonical
        SQLite file's."""
        return self._gold()[0]

    def _gold(self) -> tuple[QueryResult, bool]:
        """(the gold result, whether the engine produced it: False when it is SQLite's)."""
        assert self.task is not None
        gold = self.gold_sql()
        db = self.task.meta["db_id"]
        path = self._db_path(db)
        st = path.stat()  # a changed file must not be scored against its old gold results
        key = (self.engine.name, str(path), st.st_size, st.st_mtime_ns, gold)
        hit = _GOLD.get(key) if self.result_cache else None
        if hit is not None:
            return hit
        r, own = self._run(gold, _FULL, self.solution_timeout_s), True
        if not r.ok and not r.timed_out and self.engine.name != "sqlite":
            if self._sqlite is None:
                self._sqlite = make_engine("sqlite", timeout_s=self.solution_timeout_s)
            canonical = _execute(self._sqlite, db, path, self._gold_text(), _FULL, None)
            if canonical.ok and not canonical.truncated:
                r, own = canonical, False
        if r.ok and self.result_cache:
            _GOLD.put(key, (r, own))
        return r, own

    def judge(self, prediction: str) -> tuple[bool, str | None]:
        """Whether `prediction` (a solution's SQL) answers this episode's task under the
        env's comparison (`reward`), with no format rule, as the final step scores it; and
        the error of the prediction's query, if any. Call after reset()."""
        assert self.task is not None, "call reset() before judge()"
        gold = self.gold_result()
        if not gold.ok or gold.truncated:
            raise InfraError(f"task {self.task.id}: the gold query cannot be scored on "
                             f"{self.engine.name}: {gold.error or 'more than 100000 rows'}")
        return self._judge(prediction, gold)

    def _judge(self, prediction: str, gold: QueryResult) -> tuple[bool, str | None]:
        assert self.task is not None
        if self.reward_kind == "skyrl":
            query: str | None = prediction
        else:  # `value` placeholders only where the official evaluator runs: SQLite
            query = spider_eval.prediction_query(prediction,
                                                 placeholders=self.engine.name == "sqlite")
            if query is None:
                return False, "the solution holds no SQL statement"
        pred = self._run(query, _FULL, self.solution_timeout_s)
        if not pred.ok:
            return False, pred.error
        if pred.truncated:
            return False, f"the solution's result has more than {_FULL} rows"
        if self.reward_kind == "skyrl":
            return skyrl_match(pred.rows, gold.rows), None
        return spider_eval.results_match(
            gold.rows, pred.rows,
            order_matters=spider_eval.order_matters(str(self.task.answer))), None

    def _prediction(self) -> str | None:
        """The solution scored without format rules: the last `<solution>` of the final turn
        (skyrl-train), of all the agent's turns (skyrl-eval)."""
        turns = self._actions[-1:] if self.rules == "skyrl-train" else self._actions
        for a in reversed(turns):
            s = proto.last_solution(a)
            if s is not None:
                return s
        return None

    def _finish(self) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self.task is not None
        db = self.task.meta["db_id"]
        last = self._actions[-1]
        answered = (proto.ends_episode(last) if self.rules == "skyrl-train"
                    else proto.last_solution(last) is not None)
        terminated, truncated = self.end_flags(task_ended=answered)  # hub/env.py's end rule
        # skyrl-eval has no format rule; skyrl-train reports SkyRL's verdict under either
        # reward (the format counts in the reward only with reward="skyrl")
        check = proto.skyrl_format(self._actions) if self.rules == "skyrl-train" else None
        violations = list(check.problems) if check is not None else []
        fmt = -1.0 if violations else 0.0
        if self.reward_kind == "skyrl" and check is not None:
            if not check.ok:
                return "", -1.0, terminated, truncated, self.make_info(
                    "failure", db_id=db, solution_error=None, format_violations=violations,
                    reward_breakdown={"format": -1.0, "execution": 0.0})
            prediction = check.solution
        else:
            prediction = self._prediction()
        if prediction is None:
            return "", 0.0, terminated, truncated, self.make_info(
                "failure", db_id=db, solution_error=None, format_violations=violations,
                reward_breakdown={"format": fmt, "execution": 0.0})
        gold = self.gold_result()
        if not gold.ok or gold.truncated:
            # the dataset's own query fails here: not the agent's fault, never a 0
            return "", 0.0, True, False, self.make_info(
                "error", infra_error=True, db_id=db, error=f"gold query failed: {gold.error}",
                reward_breakdown={"format": 0.0, "execution": 0.0})
        correct, error = self._judge(prediction, gold)
        reward = float(correct)
        return "", reward, terminated, truncated, self.make_info(
            "success" if correct else "failure", db_id=db, solution_error=error,
            format_violations=violations,
            reward_breakdown={"format": fmt, "execution": reward})

    def expected_answer(self) -> dict[str, Any] | None:
        """What a run records as the expected answer: the dataset's gold query (`sql`) and
        the first `EXPECTED_ROWS` rows of its result on this engine (`rows`, with `columns`
        and `row_count`; `error` where the gold query fails). The result is the one scoring
        compares against, kept in the gold cache (`result_cache`, the default), so scoring
        runs no query twice; without that cache only `EXPECTED_ROWS` rows are read."""
        if self.task is None or self.task.answer is None:
            return None
        out: dict[str, Any] = {"sql": str(self.task.answer)}
        if self.result_cache:
            r = self._gold()[0]
        else:
            r = self._run(self.gold_sql(), EXPECTED_ROWS, self.solution_timeout_s)
        if not r.ok:
            return {**out, "columns": [], "rows": [], "row_count": None,
                    "error": r.error or "timed out"}
        return {**out, "columns": [str(c) for c in r.columns],
                "rows": [[_json_cell(v) for v in row] for row in r.rows[:EXPECTED_ROWS]],
                "row_count": None if r.truncated else len(r.rows)}

    def reference_action(self) -> str | None:
        """The gold query as a solution; where the engine cannot run it (the gold result is
        SQLite's), a query that returns the gold rows as a literal table."""
        if self.task is None:
            return None
        gold, own = self._gold()
        query = self.gold_sql() if own or not gold.ok else \
            (literal_rows_query(gold.rows, len(gold.columns)) or self.gold_sql())
        return f"<think>The gold query answers this.</think>\n<solution>{query}</solution>"

    def fork_resources(self) -> None:
        """A forked child's own engine (it may run beside its parent, in another thread),
        ready for the episode's database (PostgreSQL: its own clone and role); the
        canonical-SQLite one is made when needed."""
        self.engine = make_engine(self._engine_args[0], **self._engine_args[1])
        self._sqlite = None
        # the episode's results so far, in a dict of its own (a result is never changed once
        # made: no need to copy its rows)
        self._results = dict(self._results)
        if self.task is not None:
            db = self.task.meta["db_id"]
            self.engine.begin_episode(db, self._db_path(db))

    def close(self) -> None:
        self.engine.close()
        if self._sqlite is not None:
            self._sqlite.close()


def _data_chat(task: Task, messages: Any) -> tuple[str | None, str]:
    """(system prompt, first observation) of a task's own chat: an optional system message,
    then one user message, each taken verbatim."""
    roles = [m.get("role") if isinstance(m, dict) else None for m in messages] \
        if isinstance(messages, list | tuple) else []
    ok = roles in (["user"], ["system", "user"]) and all(
        isinstance(m.get("content"), str) for m in messages)
    if not ok:
        raise UsageError(
            f"task {task.id}: its prompt_messages are not a system message and a user "
            f"message (roles: {roles or type(messages).__name__}), which an episode (a system "
            "prompt, then a first observation) can show as they are; pass data_prompt=False "
            "to use skyhub's prompt instead")
    system = messages[0]["content"] if roles[0] == "system" else None
    return system, messages[-1]["content"]


def _execute(engine: Engine, db: str, path: Path, sql: str, max_rows: int,
             timeout_s: float | None) -> QueryResult:
    """`engine.execute` with its time limit set to `timeout_s` for this statement. An env's
    steps never run concurrently, so the engine's limit can be swapped around the call."""
    if timeout_s is None or timeout_s == engine.timeout_s:
        return engine.execute(db, path, sql, max_rows=max_rows)
    old, engine.timeout_s = engine.timeout_s, timeout_s
    try:
        return engine.execute(db, path, sql, max_rows=max_rows)
    finally:
        engine.timeout_s = old


def _json_cell(v: object) -> object:
    """A result value as JSON keeps it: numbers, text, booleans and NULL as they are, the
    rest (bytes, decimals, dates) as their text."""
    return v if v is None or isinstance(v, bool | int | float | str) else str(v)


def _literal(v: object) -> str | None:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        text = repr(v) if math.isfinite(v) else \
            "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
        return f"CAST('{text}' AS FLOAT8)"
    if isinstance(v, str) and "\x00" not in v:
        return "'" + v.replace("'", "''") + "'"
    return None  # bytes, decimals and the like: no literal that every engine reads alike


def literal_rows_query(rows: list[tuple], width: int) -> str | None:
    """A query (DuckDB and PostgreSQL) whose result is `rows`, in order, or None when a value
    has no portable literal."""
    names = [f"c{i + 1}" for i in range(max(width, 1))]
    if not rows:
        return "SELECT " + ", ".join(f"NULL AS {n}" for n in names) + " WHERE 1 = 0"
    values = []
    for k, row in enumerate(rows):
        cells = [_literal(v) for v in row]
        if any(c is None for c in cells):
            return None
        values.append(f"({k}, {', '.join(cells)})")  # type: ignore[arg-type]
    return (f"SELECT {', '.join(names)} FROM (VALUES {', '.join(values)}) "
            f"AS t(k, {', '.join(names)}) ORDER BY k")
