"""`TerminalEnv`: shell tasks in a sandbox, judged by the task's verifier script.

    <bash>ls -la</bash>   -> <output>...</output> [exit 0] /work
    <done/>               -> the verifier runs in the same sandbox; exit status 0 = reward 1

The episode (a persistent shell, turn and time limits, the verifier out of the agent's reach,
who is to blame when something breaks) is `skyhub.shell.env.ShellEnv`, which the Harbor
family shares; this family adds its task sources: generated tasks (`synth`) or a directory of
task directories.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skyhub.env import clip_text
from skyhub.errors import UsageError
from skyhub.shell.env import MAX_TOOL_CALLS, ShellEnv

BUNDLED_TASKS = Path(__file__).parent / "data" / "tasks"


class TerminalEnv(ShellEnv):
    """Kwargs: `synth` (generated tasks; `seed` picks the stream, `n_tasks` how many) or
    `data_dir` (a task directory or a directory of them; default the bundled examples);
    `backend` ("auto", "docker", "local"), `image` (docker; default skyhub's default image),
    `max_turns`, `command_timeout_s` (per command), `max_tool_calls` (commands per turn),
    `turn_timeout_s` (per turn, all its commands together; default twice `command_timeout_s`),
    `max_output` (bytes kept per command), `cpus`, `memory_mb`, `protocol` ("tags" or
    "tools": what the system prompt describes, `<bash>`/`<done/>` or the `bash`/`done`
    tools; both are accepted in `step`). `synth="relay"` (`terminal-relay`): long-horizon
    relays of `steps` commands (None: 20 to 50) over `n_words` words, scored by the fraction
    done (`skyhub.envs.terminal.relay`). `progress_reward`: each turn rewarded with what
    the score gained (scored tasks: relays), the total still the verifier's verdict."""

    def __init__(self, *, synth: bool | str = False, seed: int = 0, n_tasks: int = 1000,
                 data_dir: str | Path | None = None, backend: str = "auto",
                 image: str | None = None, max_turns: int = 30, command_timeout_s: float = 30.0,
                 max_output: int = 16384, cpus: float = 1.0, memory_mb: int = 1024,
                 max_tool_calls: int = MAX_TOOL_CALLS, turn_timeout_s: float | None = None,
                 protocol: str = "tags", steps: int | None = None, n_words: int = 6,
                 progress_reward: bool = False) -> None:
        if synth and data_dir is not None:
            raise UsageError("pass either synth=True (generated tasks) or data_dir=DIR, not both")
        super().__init__(tasks=_load_tasks(synth=synth, seed=seed, n_tasks=n_tasks,
                                           path=data_dir, steps=steps, n_words=n_words),
                         backend=backend, image=image, max_turns=max_turns,
                         command_timeout_s=command_timeout_s, max_output=max_output, cpus=cpus,
                         memory_mb=memory_mb, max_tool_calls=max_tool_calls,
                         turn_timeout_s=turn_timeout_s, protocol=protocol,
                         progress_reward=progress_reward)

    def expected_answer(self) -> dict[str, Any] | None:
        """What a run records as the expected answer: the task's solution script (`script`,
        clipped) and, for a task directory, the path of its `solution.sh` (`solution`)."""
        if self.task is None:
            return None
        source = self.task.meta.get("source")
        path = Path(source) / "solution.sh" if isinstance(source, str) and source else None
        answer = self.task.answer
        return {"solution": str(path) if path is not None and path.is_file() else None,
                "script": clip_text(str(answer)) if answer else None}


def _load_tasks(*, synth: bool | str, seed: int, n_tasks: int, path: str | Path | None,
                steps: int | None = None, n_words: int = 6) -> Any:
    if synth == "relay":
        from .relay import generate as relay

        return relay(seed, n_tasks, steps=steps, n_words=n_words)
    if synth not in (True, False):
        raise UsageError(f"synth must be true (shell chores) or 'relay' (long horizons), not "
                         f"{synth!r}")
    if synth:
        from .synth import generate

        return generate(seed, n_tasks)
    from .tasks import load_tasks

    return load_tasks(path if path is not None else BUNDLED_TASKS)


__all__ = ["TerminalEnv"]
