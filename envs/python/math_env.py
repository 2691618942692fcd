"""`MathEnv` (`python-math`): math problems with a Python tool; exact-answer reward."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import protocol
from .env import KernelEnv
from .math_grade import extract_answer, is_equiv
from .math_tasks import load_math_tasks


class MathEnv(KernelEnv):
    """Reward 1 when the final answer (`<answer>` or the last `\\boxed{}`) equals the gold
    answer numerically or symbolically (sympy), else 0.

    Kwargs: `data` (JSONL: skyhub's, GSM8K, MATH or MATH-500 rows; default the bundled set),
    `split`, and `KernelEnv`'s (`backend`, `max_turns`, `cell_timeout`, ...).
    """

    boxed_answers = True
    malformed = protocol.MALFORMED_MATH
    prompt_template = protocol.MATH_SYSTEM_PROMPT

    def __init__(self, *, data: str | Path | None = None, split: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tasks = load_math_tasks(data, split=split)

    def finish(self, content: str) -> tuple[float, str, dict[str, float], dict[str, Any]]:
        assert self.task is not None
        pred = extract_answer(content)
        if pred is None:
            pred = content.strip()
        ok = bool(pred) and is_equiv(pred, str(self.task.answer))
        return float(ok), "success" if ok else "failure", {"correct": float(ok)}, {
            "answer": pred}

    def reference_action(self) -> str | None:
        return None if self.task is None else f"<answer>{self.task.answer}</answer>"


__all__ = ["MathEnv"]
