"""`TextEnv`: the base class of every skyhub environment.

An env author subclasses it like any gymnasium env::

    class MyEnv(skyhub.TextEnv):
        def __init__(self, max_turns: int = 4):
            super().__init__(max_turns=max_turns)       # the turn budget (None: no budget)
            self.tasks = skyhub.TaskSet([...])

        def reset(self, *, seed=None, options=None):
            task = self.start_episode(seed, options)   # seeds, picks the task, turn = 0
            return task.prompt, self.make_info()

        def step(self, action) -> skyhub.StepResult:
            self.next_turn()                            # count this turn: always first
            ...
            if <the agent answered>:
                return "", reward, True, False, self.make_info("success", ...)
            if self.out_of_turns:
                return self.out_of_turns_step(reward_breakdown=...)
            return f"{obs} {self.turns_left_note()}", 0.0, False, False, self.make_info()

The turn budget and the end rule (one rule, gymnasium's meaning of the two flags;
`end_flags` computes it, `out_of_turns_step` uses it):
- `terminated`: the task reached its own end: the agent answered, gave its solution or said
  it is done (on any turn, the last one included), whatever that scores. An episode of one
  turn (`max_turns=1`) always terminates: that turn *is* the task's one attempt, not a limit
  put on a longer task (and gymnasium's env checker rejects an env that truncates after one
  step).
- `truncated`: a budget of several turns (or a time limit) ran out before the task's end, a
  limit outside the task's own rules; the final step still carries the episode's score and
  `reward_breakdown` (a verifier may still run).
An episode's turns are counted by `next_turn()` (an env that forgets it never runs out of
turns: `skyhub check` fails it); `turns_left_note()` is the one wording of the reminder.

The contract every env keeps (checked by `skyhub check ID`):
- observations and actions are `str`; `observation_space`/`action_space` are `UnicodeText`;
- every info has `task_id`, `turn`, `outcome` (`running`/`success`/`failure`/`error`) and
  `infra_error`; the final step's info also has `reward_breakdown`;
- a malformed action is answered with an observation, never an exception;
- `reset(seed=s)` picks the same task for the same `s`; `close()` may be called twice.

Who is to blame (the infra-error rule). `infra_error=True` masks an episode from training,
so an agent must never be able to choose it:
- what the agent's own actions break *inside its sandbox* (killing its shell, kernel, grader
  or in-sandbox agent, filling its disk, writing a garbage or oversized reward file, a
  directory where a file should be, a fork bomb, running out of tool calls or time) is the
  agent's failure: the episode is scored by the env's rules (usually as a failure), with
  `sandbox_broken=True` in the info so it can be told apart;
- only what is outside the agent's reach is `infra_error`: the Docker daemon or the sandbox
  host going away, the host running out of memory, an image that does not build, a lost
  remote server, a bug of ours (a reference answer that fails).
`make_info(..., sandbox_broken=True)` records the first kind.

Tool calls. An env may declare `tools` (OpenAI function schemas); `step` then also takes
structured calls (a `skyhub.ToolCall`, a list of them, an OpenAI assistant message), which
`step_tools` plays through the text protocol (`tool_action` maps a call to a text action), so a
tool episode gets the same verdict as a text one; results come back in `info["tool_results"]`
(rules: `skyhub.tools.play_tool_turn`). `protocol="tools"` makes a family's system prompt
describe its tools instead of its tags.

What a run records about a task, besides the transcript (each line of episodes.jsonl, eval
and training alike): `display_question()`, the task text to show a person (SQL: the question,
not the schema), and `expected_answer()`, what a correct answer is (SQL: the gold query and
its first rows), which no agent ever sees; `expected_secret = True` keeps it out of records.

Over ~400 lines, for a reason: this is the whole contract an env author reads, in one
place (the base class and its documented helpers); the tool-turn and record logic live in
`skyhub.tools` and `skyhub.chat`.

Threads: a `VectorEnv` never calls one env concurrently, but may call it from different
threads (its dispatch thread, or the caller's for very fast steps). Don't bind resources to
the creating thread (open sqlite3 with `check_same_thread=False`), or pass
`inline_fast_steps=False` to `make_vec`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium

from skyhub.errors import UsageError
from skyhub.fork import Played
from skyhub.spaces import UnicodeText
from skyhub.task import Task
from skyhub.tools import ToolCall, as_tool_turn, play_tool_turn

OUTCOMES = ("running", "success", "failure", "error")
"""Values of `info["outcome"]`: `error` means the episode ended because something broke."""

REQUIRED_INFO_KEYS = ("task_id", "turn", "outcome", "infra_error")

StepResult = tuple[str, float, bool, bool, dict[str, Any]]
"""What `TextEnv.step` returns: `(observation, reward, terminated, truncated, info)`."""

EXPECTED_TEXT_MAX = 2000
"""Characters of a long text (a reference program, a solution script) that an episode record
keeps of it: enough to judge by eye, small enough for thousands of records."""


PROTOCOLS = ("tags", "tools")


def check_protocol(protocol: str) -> str:
    """A family's `protocol=` kwarg, checked: "tags" (its text protocol) or "tools"."""
    if protocol not in PROTOCOLS:
        raise UsageError(f"protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}: "
                         "'tags' describes the family's text protocol in the system prompt, "
                         "'tools' its native tool calls (env.tools)")
    return protocol


def clip_text(text: str, limit: int = EXPECTED_TEXT_MAX) -> str:
    """`text` cut to `limit` characters, saying how many were left out (for
    `TextEnv.expected_answer`)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


class TextEnv(gymnasium.Env[str, str]):
    """A gymnasium env whose observations and actions are text.

    Subclasses set `self.tasks` in `__init__` and implement `reset` and `step`; the helpers
    `select_task` and `make_info` keep the task choice and the info contract uniform.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    #: Instructions for the agent (protocol, tools, answer format); None when the first
    #: observation says it all. Trainers put it in the system message.
    system_prompt: str | None = None

    #: Strings at which an agent's turn ends (e.g. `</sql>`), for engines that support stop
    #: strings. The env must still accept text past them.
    stop_strings: tuple[str, ...] = ()

    #: The key of `task.meta` whose values are the dataset's slices (SQL: `db_id`, the
    #: database), or None. A sample of the tasks (`skyhub eval --n`) is spread over them.
    slice_key: str | None = None

    #: True when what a correct answer is must stay inside the env (a benchmark whose answers
    #: are private): runs then record `"expected": null` (see `expected_answer`).
    expected_secret: bool = False

    #: The env's tools as OpenAI function schemas (`skyhub.tools.function_tool`), or None for
    #: an env that takes text only. With tools, `step` also takes structured calls
    #: (`step_tools` says how); families keep their text protocol beside them.
    tools: list[dict[str, Any]] | None = None

    #: Which protocol the system prompt describes: "tags" (the family's text protocol) or
    #: "tools" (native tool calls). Both are accepted in `step` whatever it is.
    protocol: str = "tags"

    #: Regexes of what legitimately differs between two plays of the same episode (timings,
    #: ports, temp paths, memory addresses): `skyhub replay` and `skyhub check`'s replay
    #: check replace every match with `<ignored>` in both plays before comparing.
    replay_ignore: tuple[str, ...] = ()

    #: Forking (`fork`): the names of the attributes that hold this env's mutable
    #: per-episode state beyond the base's (turn, random generator, record), for a fork by
    #: state copy; None (the default) forks by replay. Set it only where the rest of the env
    #: is read-only during an episode (or given to each child by `fork_resources`).
    fork_state: ClassVar[tuple[str, ...] | None] = None
    #: How this env was made, if by `fork`: "state copy", "sandbox copy" or "replay".
    forked_by: str | None = None

    def __init__(self, *, max_turns: int | None = None) -> None:
        super().__init__()
        self.observation_space = UnicodeText()
        self.action_space = UnicodeText()
        self.tasks: Sequence[Task] = ()
        self.task: Task | None = None
        self.turn: int = 0
        self.render_mode: str | None = None
        self._closed = False
        if max_turns is not None:  # a subclass may also set self.max_turns itself
            self.max_turns = max_turns

    # ------------------------------------------------------------------ the turn budget
    @property
    def max_turns(self) -> int | None:
        """The most turns an episode may take (None: no budget). Set it (or pass it to
        `__init__`) once; a value below 1 is a `ValueError`."""
        return getattr(self, "_max_turns", None)

    @max_turns.setter
    def max_turns(self, value: int | None) -> None:
        if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
            raise UsageError(f"max_turns must be >= 1, got {value}")
        self._max_turns = None if value is None else int(value)

    def next_turn(self) -> int:
        """Count the turn this `step` is (its first line); returns the turn's number."""
        self.turn += 1
        return self.turn

    @property
    def turns_left(self) -> int | None:
        """Turns the agent may still take in this episode (None without a budget)."""
        return None if self.max_turns is None else max(self.max_turns - self.turn, 0)

    @property
    def out_of_turns(self) -> bool:
        """True once the turn budget is spent: the episode must end at this step."""
        return self.turns_left == 0  # turns_left is never below 0; None: no budget

    def turns_left_note(self) -> str:
        """The reminder every family appends to an observation: "(2 turns left)", "(1 turn
        left)"; "" without a budget."""
        left = self.turns_left
        if left is None:
            return ""
        return "(1 turn left)" if left == 1 else f"({left} turns left)"

    def end_flags(self, task_ended: bool) -> tuple[bool, bool]:
        """`(terminated, truncated)` of an episode's final step by the end rule (module
        docstring): `task_ended` when the agent answered / solved / said done; else the turn
        budget (or a time limit) ended it, which truncates unless the episode has one turn."""
        if task_ended or self.max_turns == 1:
            return True, False
        return False, True

    def out_of_turns_step(self, obs: str = "", *, reward: float = 0.0,
                          outcome: str = "failure", **info: Any) -> StepResult:
        """The step that ends an episode whose turn budget ran out (flags by `end_flags`),
        `outcome` "failure" unless said otherwise; `info` goes to `make_info` (give it
        `reward_breakdown`)."""
        terminated, truncated = self.end_flags(task_ended=False)
        return obs, float(reward), terminated, truncated, self.make_info(outcome, **info)

    # ------------------------------------------------------------------ helpers for authors
    def start_episode(self, seed: int | None = None,
                      options: dict[str, Any] | None = None) -> Task:
        """The usual first lines of `reset`: seed `np_random` (as `super().reset(seed=seed)`
        does), pick the task (`select_task`), set the turn counter to 0. Returns the task."""
        gymnasium.Env.reset(self, seed=seed)
        self.task = self.select_task(options)
        self.turn = 0
        return self.task

    def select_task(self, options: dict[str, Any] | None = None) -> Task:
        """The task for this episode: `options["task"]` (a Task), `options["task_id"]`, or a
        choice from `self.tasks` drawn with `self.np_random` (so `reset(seed=s)` repeats).

        Call after `super().reset(seed=seed)`. An unknown `task_id` is a usage error
        (`KeyError` naming known ids); an empty task set is `DataNotFound`.
        """
        options = options or {}
        if options.get("task") is not None:
            task = options["task"]
            if not isinstance(task, Task):
                raise TypeError(f"options['task'] must be a skyhub.Task, got {type(task).__name__}")
            return task
        if not self.tasks:
            from skyhub.errors import DataNotFound

            raise DataNotFound(f"{type(self).__name__} has no tasks: set self.tasks in __init__ "
                               "or pass options={'task': Task(...)} to reset()")
        if options.get("task_id") is not None:
            task_id = str(options["task_id"])
            get = getattr(self.tasks, "get", None)
            if get is not None:
                return get(task_id)
            for t in self.tasks:
                if t.id == task_id:
                    return t
            raise KeyError(f"no task with id {task_id!r} in {type(self).__name__}.tasks")
        return self.tasks[int(self.np_random.integers(len(self.tasks)))]

    def make_info(self, outcome: str = "running", *, infra_error: bool = False,
                  sandbox_broken: bool = False, reward_breakdown: dict[str, float] | None = None,
                  **extra: Any) -> dict[str, Any]:
        """An info dict with the contract's keys filled from the episode's state.
        `sandbox_broken` marks an episode whose agent broke its own sandbox (scored, not
        masked: see the module docstring's infra-error rule)."""
        if outcome not in OUTCOMES:
            raise UsageError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
        info: dict[str, Any] = {
            "task_id": self.task.id if self.task is not None else None,
            "turn": self.turn,
            "outcome": outcome,
            "infra_error": infra_error,
        }
        if sandbox_broken:
            info["sandbox_broken"] = True
        if reward_breakdown is not None:
            info["reward_breakdown"] = dict(reward_breakdown)
        info.update(extra)
        return info

    def reference_action(self) -> str | None:
        """An action a perfect agent would send now (gold SQL, a solution script), or None when
        the env has no reference. Used by the `oracle` agent and by `skyhub check`."""
        return None

    # ------------------------------------------------------------------ tool calls
    def tool_action(self, name: str, arguments: dict[str, Any]) -> str:
        """The text-protocol action that does what a valid call of tool `name` asks (SQL:
        `execute_sql` -> `<sql>...</sql>`), so that a tool episode is scored by exactly the
        rules of a text one. Families that declare `tools` implement it, or override
        `step_tools` where calls are not text actions."""
        raise NotImplementedError(f"{type(self).__name__} declares tools but no tool_action")

    def tool_content(self, name: str, observation: str) -> str:
        """A tool result's content from the observation its text action got (default: the
        observation; a family strips its protocol's wrapping, e.g. `<observation>` tags)."""
        return observation

    #: The text action that a malformed call is played as (the family's rules for a
    #: malformed turn then apply: its turn count, its format penalty, its end of budget).
    malformed_tool_action: str = ""

    def step_tools(self, content: str, calls: list[ToolCall]) -> StepResult:
        """One assistant turn of structured calls: what `step` does with a `ToolCall`, a list
        of them, or an assistant message. By default each call is played as one text turn
        (`tool_action`), so it counts against `max_turns` and is scored by the text protocol's
        rules; `skyhub.tools.play_tool_turn` states the rules. Override it where calls are not
        text actions (a remote env sends them to its server)."""
        return play_tool_turn(self, content, calls)

    def reference_tool_calls(self) -> list[ToolCall] | None:
        """`reference_action` as tool calls (what the `oracle` agent sends with `--tools`), or
        None when the env has no reference or no tools."""
        return None

    # ------------------------------------------------------------------ what a run records
    def display_question(self) -> str | None:
        """The current task's text to show a person next to an episode (`skyhub view`'s task
        column, a report): the question alone, without the schema or the protocol's
        instructions that the first observation also carries. Default: the task's
        `meta["question"]` when it is a string (SQL, search), else its `prompt`; None before
        the first reset. Override it where neither reads well."""
        if self.task is None:
            return None
        question = (self.task.meta or {}).get("question")
        return question if isinstance(question, str) else self.task.prompt

    def expected_answer(self) -> dict[str, Any] | None:
        """What a correct answer to the current task is, as a small JSON object, so that a
        person can judge a wrong answer by eye: `{"answer": ...}` by default (the task's
        `answer`, a long text clipped by `clip_text`), None when the task has none. Families
        say more where they can: SQL's gold query and the first rows of its result, Harbor's
        `solution/` path. Keep it small and cheap (it is computed once per episode, after
        reset, in the env's own thread or process).

        Runs record it (`"expected"` in each line of episodes.jsonl), never the agent: it is
        not in any observation, info or prompt, and is asked for only by the episode driver
        of `skyhub eval` and the trainer (`VectorEnv.async_reset(..., record_task=True)`).
        Set `expected_secret = True` to keep it out of records altogether."""
        if self.task is None or self.task.answer is None:
            return None
        answer = self.task.answer
        return {"answer": clip_text(answer) if isinstance(answer, str) else answer}

    def task_record(self) -> dict[str, Any]:
        """`{"question": ..., "expected": ...}`: what a run records about the current task
        (`display_question()`, and `expected_answer()` unless `expected_secret`), as plain
        JSON. Do not override it (override the two hooks); a hook that raises is recorded as
        `{"error": ...}` rather than stopping the run."""
        record: dict[str, Any] = {"question": None, "expected": None}
        try:
            question = self.display_question()
            record["question"] = None if question is None else str(question)
        except Exception as e:
            record["question"] = None
            record["expected"] = {"error": f"display_question() raised {type(e).__name__}: {e}"}
            return record
        if self.expected_secret:
            return record
        try:
            expected = self.expected_answer()
            if expected is not None and not isinstance(expected, dict):
                expected = {"answer": expected}
            # plain JSON, and a copy: a record never shares the task's mutable objects
            record["expected"] = None if expected is None else \
                json.loads(json.dumps(expected, default=str))
        except Exception as e:
            record["expected"] = {"error": f"expected_answer() raised {type(e).__name__}: {e}"}
        return record

    def sample_action(self, seed: int | None = None) -> str:
        """A random action, for the `random` agent: a benchmark's floor, and a fuzz test of
        the env's parser. The default draws from `action_space` (arbitrary text); override
        it to draw actions shaped like the env's protocol (its tags around random content,
        unclosed tags) so that a random baseline also reaches the code behind the parser.
        `seed` makes the draw reproducible."""
        if seed is not None:
            self.action_space.seed(seed)
        return self.action_space.sample()

    # ------------------------------------------------------------------ forking
    def fork(self, n: int = 1, *, factory: Any = None) -> list[TextEnv]:
        """n new envs in exactly this env's state now (same task, turn, history and family
        state), independent from then on; the caller closes them. By state copy where the
        family declares `fork_state`, else by replay into a fresh env (`env.spec.make()`,
        or `factory()`), checked against the episode's record; `skyhub.errors.
        ForkUnavailable` says why an env cannot fork. Rules: `skyhub.fork`."""
        from skyhub.fork import fork

        return fork(self, n, factory)

    def fork_resources(self) -> None:
        """Called on a child made by state copy, before it is returned: give it its own of
        what the parent must not share with it (a connection, an engine), and nothing of the
        parent's to close. Default: nothing to do."""

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Release resources. Idempotent: subclasses' `close` is wrapped so a second call is a
        no-op (see `__init_subclass__`)."""
        self._closed = True

    @property
    def closed(self) -> bool:
        return getattr(self, "_closed", False)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own_close = cls.__dict__.get("close")
        if own_close is not None and not getattr(own_close, "_skyhub_idempotent", False):
            @functools.wraps(own_close)
            def close(self: TextEnv) -> None:
                if getattr(self, "_closed", False):
                    return
                try:
                    own_close(self)
                finally:
                    self._closed = True

            close._skyhub_idempotent = True  # type: ignore[attr-defined]
            cls.close = close  # type: ignore[method-assign]
        own_reset = cls.__dict__.get("reset")
        if own_reset is not None and not getattr(own_reset, "_skyhub_recorded", False):
            # the episode's record (`skyhub.fork.Played`), kept by the outermost call only
            @functools.wraps(own_reset)
            def reset(self: TextEnv, *, seed: int | None = None,
                      options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
                if getattr(self, "_in_call", False):
                    return own_reset(self, seed=seed, options=options)
                self._played = None
                self._in_call = True
                try:
                    result = own_reset(self, seed=seed, options=options)
                finally:
                    self._in_call = False
                self._played = _record_reset(seed, options, result)
                return result

            reset._skyhub_recorded = True  # type: ignore[attr-defined]
            cls.reset = reset  # type: ignore[method-assign]
        own_step = cls.__dict__.get("step")
        if own_step is not None and not getattr(own_step, "_skyhub_tool_calls", False):
            # structured tool calls go to `step_tools`, which plays them as text actions;
            # the outermost call adds the turn to the episode's record
            @functools.wraps(own_step)
            def step(self: TextEnv, action: Any) -> StepResult:
                if getattr(self, "_in_call", False):
                    return _step_or_tools(self, own_step, action)
                played = getattr(self, "_played", None)
                self._in_call = True
                try:
                    result = _step_or_tools(self, own_step, action)
                except BaseException as e:
                    if played is not None:
                        played.unreplayable = (f"step {len(played.actions) + 1} raised "
                                               f"{type(e).__name__}")
                    raise
                finally:
                    self._in_call = False
                if played is not None:
                    _record_step(played, action, result)
                return result

            step._skyhub_tool_calls = True  # type: ignore[attr-defined]
            cls.step = step  # type: ignore[method-assign]

    def __del__(self) -> None:
        # Best effort: envs hold connections, kernels and containers.
        try:
            if not self.closed:
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        env_id = self.spec.id if self.spec is not None else None
        return f"<{type(self).__name__}{' ' + env_id if env_id else ''}>"


def _record_reset(seed: int | None, options: dict[str, Any] | None, result: Any) -> Played:
    """The record a reset starts (`skyhub.fork`); what breaks the API (not an `(obs, info)`
    pair) is left to the caller's checks, and only makes the episode unreplayable."""
    ok = isinstance(result, tuple) and len(result) == 2
    played = Played(seed, None if options is None else dict(options),
                    result[0] if ok else "")
    if not ok:
        played.unreplayable = "its reset did not return (observation, info)"
    elif isinstance(result[1], dict) and result[1].get("infra_error"):
        played.unreplayable = "its reset reported an infra error"
    return played


def _record_step(played: Played, action: Any, result: Any) -> None:
    """Add a step to the episode's record; a result that breaks the API (not a 5-tuple, a
    reward that is not a number) is left to the caller's checks and makes it unreplayable."""
    k = len(played.actions) + 1
    played.actions.append(action)
    try:
        obs, reward, terminated, truncated, info = result
        played.results.append((obs, float(reward), bool(terminated), bool(truncated)))
    except (TypeError, ValueError):
        played.results.append(("", 0.0, False, False))
        played.unreplayable = played.unreplayable or f"step {k} did not return a StepResult"
        return
    if isinstance(info, dict) and info.get("infra_error") and not played.unreplayable:
        played.unreplayable = f"step {k} was an infra error"


def _step_or_tools(env: TextEnv, own_step: Any, action: Any) -> StepResult:
    if not isinstance(action, str):
        turn = as_tool_turn(action)
        if turn is not None:
            return env.step_tools(*turn)
    return own_step(env, action)
