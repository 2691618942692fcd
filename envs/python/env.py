"""`KernelEnv`: the multi-turn loop shared by the Python envs (cells in, outputs out).

Each env owns one `KernelSession` (a sandbox with a Jupyter kernel), made at the first
`reset` and reused: a later reset swaps in a standby sandbox that was emptied of every process,
restored and given a new kernel while the last episode ran, so an episode starts in
milliseconds and nothing of the previous one survives. Subclasses say how a final answer is
scored.

Blame (hub/env.py's infra-error rule): a cell that kills or hijacks the sandbox's Python
runtime gets an observation saying so, a new runtime, and `sandbox_broken=True` in the step's
info; only a sandbox that cannot be brought back (its container or daemon gone) is
`infra_error`.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from typing import Any, ClassVar

from skyhub.env import StepResult, TextEnv, check_protocol
from skyhub.errors import InfraError, UsageError
from skyhub.tools import ToolCall

from . import protocol as _protocol
from .kernel import KernelSession


class KernelEnv(TextEnv, metaclass=ABCMeta):
    """Run `<python>` cells in a real kernel until `<answer>`; `finish` scores the answer.

    Kwargs: `backend` ("auto": docker when a daemon answers, else local bubblewrap),
    `max_turns`, `cell_timeout_s` (the cell is interrupted, the kernel kept), `max_output`
    (bytes kept per output stream, head and tail), `cpus`, `memory_mb` (the sandbox's limits),
    `warm_reset` (keep a second, clean sandbox ready so resets take milliseconds; False
    halves the sandboxes and makes each reset wait for a kernel's cold start, ~1-2 s),
    `protocol` ("tags": the system prompt describes `<python>`/`<answer>`; "tools": it
    describes the `run_code` and `submit` tools). Both are accepted in `step` either way: a
    `run_code` call is a `<python>` turn, a `submit` call an `<answer>` turn, scored alike.
    """

    stop_strings = ("</python>", "</answer>")
    boxed_answers = False
    malformed = _protocol.MALFORMED
    prompt_template = ""
    tools_prompt_template = ""
    submit_tool: ClassVar[dict[str, Any]] = {}

    def __init__(self, *, backend: str = "auto", max_turns: int = 8, cell_timeout_s: float = 10.0,
                 max_output: int = 4096, cpus: float = 1.0, memory_mb: int = 2048,
                 warm_reset: bool = True, protocol: str = "tags") -> None:
        super().__init__()
        self.protocol = check_protocol(protocol)
        if cell_timeout_s <= 0:
            raise UsageError(f"cell_timeout_s must be > 0 seconds, got {cell_timeout_s}")
        if backend not in ("auto", "docker", "local"):
            raise UsageError(f"backend must be 'auto', 'docker' or 'local', not {backend!r}")
        self.backend, self.max_turns, self.cell_timeout = backend, max_turns, cell_timeout_s
        self.max_output, self.cpus, self.memory_mb = max_output, cpus, memory_mb
        self.warm_reset = warm_reset
        template = self.tools_prompt_template if protocol == "tools" else self.prompt_template
        self.system_prompt = template.format(max_turns=max_turns, timeout=cell_timeout_s)
        self.tools = [_protocol.RUN_CODE_TOOL, self.submit_tool]
        self._session: KernelSession | None = None
        self._stats: dict[str, float] = {}
        self._broken = False  # the agent broke its sandbox's runtime this episode

    # -- the kernel ------------------------------------------------------------------------
    @property
    def session(self) -> KernelSession:
        if self._session is None:
            self._session = KernelSession(self.backend, cpus=self.cpus, memory_mb=self.memory_mb,
                                          warm_reset=self.warm_reset, pool="python")
        return self._session

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task = self.start_episode(seed, options)
        self._stats = dict.fromkeys(("cells", "cell_errors", "timeouts", "restarts",
                                     "format_errors"), 0.0)
        self._broken = False
        if self._session is None:
            self.session  # noqa: B018  (a new session starts with a fresh kernel)
        else:
            self._session.reset()
        return task.prompt, self.make_info()

    # -- a turn ----------------------------------------------------------------------------
    def step(self, action: str) -> StepResult:
        assert self.task is not None, "call reset() before step()"
        self.next_turn()
        turn = action.turn if isinstance(action, _protocol.ToolAction) else \
            _protocol.parse(action, boxed_answers=self.boxed_answers)
        if turn is None:
            self._stats["format_errors"] += 1
            return self._continue(self.malformed, error="malformed turn")
        if turn.kind == "answer":
            reward, outcome, breakdown, extra = self.finish(turn.content)
            infra = outcome == "error"
            if self._broken:
                extra.setdefault("sandbox_broken", True)
            return "", reward, True, False, self.make_info(
                outcome, infra_error=infra, reward_breakdown={**self._stats, **breakdown},
                **extra)
        try:
            cell = self.session.run(turn.content, self.cell_timeout, self.max_output)
        except InfraError as e:
            return "", 0.0, True, False, self.make_info(
                "error", infra_error=True, reward_breakdown=dict(self._stats), error=str(e))
        self._stats["cells"] += 1
        self._stats["cell_errors"] += cell.error is not None
        self._stats["timeouts"] += cell.timed_out
        self._stats["restarts"] += cell.restarted is not None
        self._broken = self._broken or cell.broken
        return self._continue(_protocol.output(cell.render(self.cell_timeout)),
                              duration_s=cell.duration_s)

    def _continue(self, obs: str, **extra: Any) -> StepResult:
        if self._broken:
            extra["sandbox_broken"] = True
        if self.out_of_turns:
            extra["error"] = f"no answer within {self.max_turns} turns"
            return self.out_of_turns_step(obs, reward_breakdown=dict(self._stats), **extra)
        return f"{obs}\n{self.turns_left_note()}", 0.0, False, False, self.make_info(**extra)

    # -- tool calls ------------------------------------------------------------------------
    def tool_action(self, name: str, arguments: dict[str, Any]) -> str:
        """`run_code` is a `<python>` turn, `submit` an `<answer>` turn: the same `Turn`, so
        the verdict is the text protocol's (`protocol.ToolAction` carries it unparsed)."""
        return _protocol.tool_action(name, arguments)

    def tool_content(self, name: str, observation: str) -> str:
        return _protocol.tool_content(observation)

    def reference_tool_calls(self) -> list[ToolCall] | None:
        """`reference_action` as one `submit` call."""
        action = self.reference_action()
        if action is None:
            return None
        turn = _protocol.parse(action, boxed_answers=self.boxed_answers)
        if turn is None or turn.kind != "answer":
            return None
        key = next(iter(self.submit_tool["function"]["parameters"]["properties"]))
        return [ToolCall(f"call_{self.turn}", "submit", {key: turn.content})]

    @abstractmethod
    def finish(self, content: str) -> tuple[float, str, dict[str, float], dict[str, Any]]:
        """Score a final answer: (reward, outcome, reward breakdown, extra info). Each family
        scores its own way (math_env.py: the answer; code_env.py: the tests)."""

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


__all__ = ["KernelEnv"]
