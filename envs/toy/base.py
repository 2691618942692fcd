"""`ToyEnv`: what the toy envs share: their task sets, an answer's score, a malformed turn."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, ClassVar

from skyhub.env import StepResult, TextEnv, check_protocol

from .tasks import load_tasks

_WORDS = ("amber", "birch", "cobalt", "delta", "ember", "fjord", "0", "1", "42", "yes", "no")


def normalise(text: object) -> str:
    """Case- and whitespace-insensitive form of an answer, so 'New  York' matches 'new york'."""
    return " ".join(str(text).strip().lower().split())


class ToyEnv(TextEnv):
    """Loads `self.kind`'s tasks (generated from `seed`, the bundled `dev` split, or a
    `tasks_file`) and ends episodes by hub/env.py's end rule: an answer terminates the
    episode; running out of turns truncates it (terminates it when it has one turn)."""

    kind = ""
    # forked by state copy: the tasks are read-only; what an episode changes is listed
    fork_state: ClassVar[tuple[str, ...] | None] = ("_format_errors",)

    def __init__(self, *, max_turns: int = 1, split: str = "train", n_tasks: int = 1000,
                 seed: int = 0, tasks_file: str | Path | None = None, protocol: str = "tags",
                 **task_options: int) -> None:
        super().__init__(max_turns=max_turns)  # ValueError below 1
        self.protocol = check_protocol(protocol)
        self.tasks = load_tasks(self.kind, split=split, tasks_file=tasks_file, n=n_tasks,
                                seed=seed, **task_options)
        self._format_errors = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task = self.start_episode(seed, options)  # seeds np_random, picks the task, turn = 0
        self._format_errors = 0
        return task.prompt, self.make_info()

    def sample_action(self, seed: int | None = None) -> str:
        """Protocol-shaped randomness: the env's own tags around random words or numbers,
        and the malformed turns a policy produces (an empty turn, an unclosed tag, prose)."""
        rng = random.Random(seed)
        tags = [stop[2:-1] for stop in self.stop_strings if stop.startswith("</")]
        content = rng.choice(_WORDS) if rng.random() < 0.6 else str(rng.randint(-50, 2500))
        shapes = [f"<{t}>{content}</{t}>" for t in tags] + [
            f"<{rng.choice(tags)}>{content}" if tags else content, "", f"I think it is {content}."]
        return rng.choice(shapes)

    def breakdown(self, correct: float) -> dict[str, float]:
        """The final step's `reward_breakdown`."""
        return {"correct": correct, "format_errors": float(self._format_errors)}

    def finish(self, answer: str) -> StepResult:
        """The agent answered: score it and end the episode (terminated)."""
        assert self.task is not None
        correct = float(normalise(answer) == normalise(self.task.answer))
        info = self.make_info("success" if correct else "failure",
                              reward_breakdown=self.breakdown(correct), answer=answer)
        return "", correct, True, False, info

    def malformed(self, message: str) -> StepResult:
        """A turn the protocol cannot use: explain it, or end the episode if no turn is left."""
        self._format_errors += 1
        if self.out_of_turns:
            return self.out_of_turns_step(reward_breakdown=self.breakdown(0.0), error=message)
        return (f"{message} {self.turns_left_note()}", 0.0, False, False,
                self.make_info(error=message))
