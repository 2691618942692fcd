"""`skyhub play`: episodes driven by a person, or a script, typing actions.

Actions are read line by line from a text stream, so piped input works as well as a terminal
(that is how the tests drive it). The input rules are in `INPUT_HELP`, which the command's
help text repeats.
"""

from __future__ import annotations

from typing import IO, Any

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

INPUT_HELP = (
    "Type an action over one or more lines and end it with a line holding only '.'. "
    "On the first line of an action, ':send TEXT' sends TEXT at once as a one-line action, "
    "':hint' shows the env's reference action (if it has one), ':call NAME {JSON}' calls one "
    "of the env's tools (its results are in the info's tool_results) and ':quit' quits. "
    "End of input (Ctrl-D, or the end of piped input) sends what was typed and quits."
)


class _Lines:
    """Lines from `stream` without their line ending; prompts only when a person is typing."""

    def __init__(self, stream: IO[str], console: Console) -> None:
        self.stream, self.console = stream, console
        self.calls = 0
        isatty = getattr(stream, "isatty", None)
        self.interactive = bool(isatty and isatty())

    def read(self, prompt: str) -> str | None:
        self.calls += 1
        if self.interactive:
            self.console.print(Text(prompt, style="bold cyan"), end="")
        line = self.stream.readline()
        if not line:
            return None
        return line.rstrip("\n").rstrip("\r")


def read_action(lines: _Lines, env: Any, console: Console) -> tuple[Any, bool]:
    """The next action and whether input has ended (quit or end of input) after it.

    The action is None when there is nothing to send: `:quit`, or end of input with nothing
    typed.
    """
    buffer: list[str] = []
    while True:
        line = lines.read("action> " if not buffer else "   ...> ")
        if line is None:
            return ("\n".join(buffer) if buffer else None), True
        if not buffer:
            command = line.strip()
            if command == ":quit":
                return None, True
            if command == ":hint":
                hint = env.reference_action()
                console.print(Panel(Text(hint), title="hint: reference action", style="green")
                              if hint is not None else Text("this env has no reference action",
                                                            style="yellow"))
                continue
            if command == ":send" or line.startswith(":send "):
                return line[len(":send "):], False
            if line.startswith(":call "):  # a tool call; the env answers a malformed one
                from skyhub.tools import ToolCall

                name, _, arguments = line[len(":call "):].strip().partition(" ")
                return ToolCall(f"call_{lines.calls}", name, arguments.strip()), False
        if line.strip() == ".":
            return "\n".join(buffer), False
        buffer.append(line)


def play(env: Any, *, stdin: IO[str], console: Console, seed: int | None = None,
         task_id: str | None = None) -> None:
    """Play episodes of `env` until the player quits or the input ends.

    The first episode uses `seed`; later ones continue the env's random stream (a new task),
    or replay `task_id` when one is given.
    """
    from skyhub.chat import Episode

    lines = _Lines(stdin, console)
    options = {"task_id": task_id} if task_id is not None else None
    if env.system_prompt:
        console.print(Panel(Text(env.system_prompt), title="system prompt", style="blue"))
    console.print(Text(INPUT_HELP, style="dim"))
    while True:
        obs, info = env.reset(seed=seed, options=options)
        seed = None
        episode = Episode.start(env, obs, info)
        console.print(Panel(Text(obs), title=f"observation · task {info.get('task_id')}"))
        stop = False
        while not episode.done and not stop:
            action, stop = read_action(lines, env, console)
            if action is None:
                break
            obs, reward, terminated, truncated, info = env.step(action)
            episode.add(action, obs, reward, terminated, truncated, info)
            if obs:
                console.print(Panel(Text(obs), title="observation"))
            console.print(f"reward {float(reward):g} · terminated {bool(terminated)} · "
                          f"truncated {bool(truncated)}", highlight=False)
            console.print_json(data=info, default=str)
        if not episode.done:
            console.print(Text(f"episode left unfinished after {len(episode.actions)} turn(s)",
                               style="yellow"))
            return
        style = "green" if episode.outcome == "success" else "red"
        console.print(Text(f"episode over: total reward {episode.total_reward:g}, outcome "
                           f"{episode.outcome}", style=f"bold {style}"))
        if stop:
            return
        again = lines.read("play again? [Y/n] ")
        if again is None or again.strip().lower() in ("n", "no", "q", ":quit"):
            return
        if not lines.interactive:
            console.print()


__all__ = ["INPUT_HELP", "play", "read_action"]
