"""`CodeEnv` (`python-code`): write a program with a kernel's help; hidden tests grade it.

The final program is graded in a *separate* sandbox, restored to a clean state (every process
killed) before each grading, so nothing the agent left in its kernel (monkeypatched builtins,
files, background processes) can make a test pass; within the grading, the tests run in a
process the program cannot reach (`skyhub.envs.python.sandbox_runner`). A program that breaks the
grading from inside (kills the harness or the in-sandbox guest) fails the tests it left
without a verdict, with `sandbox_broken=True`; only a grading sandbox that is gone (its
container or daemon) is an infra error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skyhub.env import clip_text
from skyhub.errors import InfraError, SandboxUnavailable
from skyhub.sandbox.base import Sandbox, Snapshot

from . import protocol
from .code_tasks import load_code_tasks
from .env import KernelEnv
from .grader import grade
from .runtime import make_sandbox


class CodeEnv(KernelEnv):
    """Reward 1 when the program in `<answer>` passes all of the task's tests (0 otherwise,
    or the fraction passed with `partial_credit=True`; the breakdown always has both).

    Kwargs: `data_dir` (where the tasks are: a JSONL file of skyhub's, MBPP, HumanEval or
    LiveCodeBench rows, or a directory holding `<split>.jsonl` or one `*.jsonl`; default the
    bundled set), `split`, `test_timeout_s` (per test), `partial_credit`, and `KernelEnv`'s.
    """

    prompt_template = protocol.CODE_SYSTEM_PROMPT
    tools_prompt_template = protocol.CODE_TOOLS_SYSTEM_PROMPT
    submit_tool = protocol.SUBMIT_PROGRAM_TOOL

    def __init__(self, *, data_dir: str | Path | None = None, split: str | None = None,
                 test_timeout_s: float = 10.0, partial_credit: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tasks = load_code_tasks(data_dir, split=split)
        self.test_timeout, self.partial_credit = test_timeout_s, partial_credit
        self._grader: tuple[Sandbox, str, Snapshot] | None = None

    def _grading_sandbox(self) -> tuple[Sandbox, str]:
        """The grading sandbox (made once, restored to clean before every use) and its
        python. One that no longer restores (the last program left what a restore cannot
        undo, or its container died) is replaced by a new one."""
        if self._grader is not None:
            sb, python, clean = self._grader
            try:
                sb.restore(clean, kill_processes=True)
                return sb, python
            except Exception:
                self._grader = None
                sb.close()
        sb, argv = make_sandbox(self.backend, cpus=self.cpus, memory_mb=self.memory_mb,
                                pool="python-grader")
        try:
            self._grader = (sb, argv[0], sb.snapshot())
        except BaseException:
            sb.close()
            raise
        return sb, argv[0]

    def finish(self, content: str) -> tuple[float, str, dict[str, float], dict[str, Any]]:
        assert self.task is not None
        program = protocol.program_from_answer(content)
        try:
            sb, python = self._grading_sandbox()
            result = grade(sb, program, self.task.meta["tests"], python=python,
                           timeout=self.test_timeout)
        except (InfraError, SandboxUnavailable) as e:
            return 0.0, "error", {"passed": 0.0, "total": 0.0, "fraction": 0.0}, {
                "error": f"grading failed: {e}"}
        breakdown = {"passed": float(result.passed), "total": float(result.total),
                     "fraction": result.fraction}
        extra: dict[str, Any] = {"error": result.error} if result.error else {}
        if result.sandbox_broken:
            extra["sandbox_broken"] = True
        if result.infra_error:
            return 0.0, "error", breakdown, extra
        reward = 1.0 if result.all_passed else (result.fraction if self.partial_credit else 0.0)
        return reward, "success" if result.all_passed else "failure", breakdown, extra

    def expected_answer(self) -> dict[str, Any] | None:
        """What a run records as the expected answer: the reference program (`program`, None
        where the dataset has none) and a short view of the tests that grade (`tests`: the
        first few asserts or cases, and how many there are)."""
        if self.task is None:
            return None
        answer = self.task.answer
        return {"program": clip_text(str(answer)) if answer else None,
                "tests": summarize_tests(self.task.meta.get("tests"))}

    def reference_action(self) -> str | None:
        if self.task is None or not self.task.answer:
            return None
        return f"<answer>\n```python\n{self.task.answer}\n```\n</answer>"

    def close(self) -> None:
        super().close()
        if self._grader is not None:
            self._grader[0].close()
            self._grader = None


SHOWN_TESTS, SHOWN_CHARS = 3, 300  # of a task's tests, what an episode record keeps


def summarize_tests(tests: Any) -> dict[str, Any] | None:
    """A few of a task's tests (`meta["tests"]`, code_tasks' formats), each clipped, with how
    many there are: enough to see what was asked, small enough for a record (LiveCodeBench's
    private cases can weigh megabytes)."""
    if not isinstance(tests, dict):
        return None
    kind = tests.get("kind")
    out: dict[str, Any] = {"kind": kind}
    if kind == "asserts":
        asserts = list(tests.get("asserts") or [])
        out.update(asserts=[clip_text(str(a), SHOWN_CHARS) for a in asserts[:SHOWN_TESTS]],
                   count=len(asserts))
    elif kind == "check":
        out.update(entry_point=tests.get("entry_point"),
                   code=clip_text(str(tests.get("code") or ""), 4 * SHOWN_CHARS))
    elif kind in ("stdio", "functional"):
        cases = list(tests.get("cases") or [])
        out.update(cases=[{k: clip_text(str(c.get(k, "")), SHOWN_CHARS)
                           for k in ("input", "output")} for c in cases[:SHOWN_TESTS]
                          if isinstance(c, dict)], count=len(cases))
        if kind == "functional":
            out["method"] = tests.get("method")
    return out


__all__ = ["CodeEnv"]
