"""`MathEnv` (`python-math`): math problems with a Python tool; exact-answer reward."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skyhub.errors import UsageError

from . import protocol
from .env import KernelEnv
from .math_check import check_answer, prewarm
from .math_extract import extract_answer
from .math_tasks import load_math_tasks


class MathEnv(KernelEnv):
    """Reward 1 when the final answer (`<answer>` or the last `\\boxed{}`) equals the gold
    answer numerically or symbolically (sympy), else 0. The comparison runs in a worker
    process under a time and memory budget (`math_check`): an answer that keeps it busy
    past `grade_timeout_s` seconds scores 0 (info `grading: "timed out"`).

    Kwargs: `data_dir` (where the tasks are: a JSONL file of skyhub's, GSM8K, MATH or
    MATH-500 rows; default the bundled set), `split`, `grade_timeout_s` (per comparison), and
    `KernelEnv`'s (`backend`, `max_turns`, `cell_timeout_s`, `warm_reset`, ...).
    """

    boxed_answers = True
    malformed = protocol.MALFORMED_MATH
    prompt_template = protocol.MATH_SYSTEM_PROMPT
    tools_prompt_template = protocol.MATH_TOOLS_SYSTEM_PROMPT
    submit_tool = protocol.SUBMIT_ANSWER_TOOL

    def __init__(self, *, data_dir: str | Path | None = None, split: str | None = None,
                 grade_timeout_s: float = 10.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if grade_timeout_s <= 0:
            raise UsageError(f"grade_timeout_s must be > 0 seconds, got {grade_timeout_s}")
        self.tasks = load_math_tasks(data_dir, split=split)
        self.grade_timeout = grade_timeout_s
        prewarm()

    def finish(self, content: str) -> tuple[float, str, dict[str, float], dict[str, Any]]:
        assert self.task is not None
        pred = extract_answer(content)
        if pred is None:
            pred = content.strip()
        verdict = check_answer(pred, str(self.task.answer), timeout_s=self.grade_timeout)
        ok = bool(pred) and verdict.correct
        extra: dict[str, Any] = {"answer": pred[:1000]}
        if verdict.timed_out:
            extra["grading"] = "timed out"
        return float(ok), "success" if ok else "failure", {"correct": float(ok)}, extra

    def reference_action(self) -> str | None:
        return None if self.task is None else f"<answer>{self.task.answer}</answer>"


__all__ = ["MathEnv"]
