"""`terminus`: Harbor's Terminus-2 agent loop, through the gateway, in skyhub's shell envs.

The model gets one prompt with the reply format (`terminus_format`: JSON by default, or XML),
the task and the terminal, and answers each turn with its analysis, its plan and a batch of
commands, each keystrokes typed verbatim plus a duration to wait. Every reply is one env turn
(`Play.step`): the keystrokes go to a terminal in the env's sandbox (`terminus_pane`: a bash
on a pseudo-terminal, standing in for Terminus-2's tmux pane), and the next request carries
what the terminal printed since the last turn, cut to `max_output` bytes.

Terminus-2's rules, kept:
- a reply that cannot be parsed runs nothing: the model is told the error and answers again
  (the env's turn is an empty one, which the env counts as a format error); warnings come
  back with the next output; a reply cut off at the output limit runs nothing either;
- `task_complete` must be said twice in a row: the first time the commands run and the model
  is asked whether it is sure; the second time the commands run and the episode ends with the
  env's own ending action (`<done/>`), so the env's verifier gives the reward;
- durations are capped at `max_duration` seconds (60);
- with `context_tokens` set, when the conversation comes within `summarize_below` tokens of
  it (estimated from the gateway's `usage` of the last reply), the context is handed over in
  three requests: the model summarizes its work; a fresh conversation reads the task, the
  summary and the terminal and asks questions; the full conversation answers them. The agent
  then goes on in a new conversation (the first prompt, the questions, then the answers), so
  the gateway records a new segment.

Where skyhub differs, and why: the terminal has no screen emulation and an `exit` gets a new
shell (`terminus_pane`); one reply's waits together fit within the env's time limit per
command (the model is told the bound and told when a wait was cut); the first prompt has no
terminal screen yet (a harness can act only through turns, and a turn is the model's); the
pending terminal output goes into the summary request (Terminus-2 leaves it out); the first
prompt and the questions prompt become one user message, since many chat templates refuse
two user messages in a row; reaching `max_turns` ends the episode with `<done/>`, so the
verifier still decides, as Harbor grades a trial whose agent stopped; observations go back
as user messages, and sampling is the server's unless `temperature` is given (Terminus-2
sends 0.7). Terminus-2's fallback for a server that refuses a too-long prompt is not here:
the gateway reports no such error.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from skyhub.harness import terminus_format as fmt
from skyhub.harness.base import Endpoint, Harness, Play
from skyhub.harness.terminus_pane import Command, Pane

log = logging.getLogger(__name__)

FIRST_SCREEN = ("Current Terminal Screen:\n(a new terminal: a bash prompt in the task's "
                "working directory; it starts with your first keystrokes)")
#: seconds of the env's per-command limit left for the terminal helper itself
WAIT_MARGIN_S = 5.0


class Terminus(Harness):
    """Args:
        parser: the reply format, "json" or "xml".
        max_turns: replies before the episode is ended with `<done/>` (None: the env's own
            limits only).
        max_output: bytes of terminal output shown per turn (the middle is cut out beyond).
        max_duration: seconds one command may wait.
        context_tokens: the model's context budget in tokens; None: no summarization.
        summarize_below: free tokens under which the context is handed over (default
            min(8000, context_tokens // 4)).
        cols, rows: the terminal's size.
        max_tokens: a reply's limit (None: the gateway's).
        temperature: sampling temperature (None: the server's default).
        stop: stop strings sent with every request (None: none, as Terminus-2 sends).
        request_timeout: seconds one request may take before it fails (an infra error).
    """

    name = "terminus"
    families = ("terminal", "harbor")

    def __init__(self, *, parser: str = "json", max_turns: int | None = None,
                 max_output: int = 10000, max_duration: float = 60.0,
                 context_tokens: int | None = None, summarize_below: int | None = None,
                 cols: int = 160, rows: int = 40, max_tokens: int | None = None,
                 temperature: float | None = None, stop: list[str] | None = None,
                 request_timeout: float = 600.0) -> None:
        from skyhub.errors import UsageError

        if parser not in fmt.PARSERS:
            raise UsageError(f"terminus: parser must be one of {', '.join(fmt.PARSERS)}, "
                             f"not {parser!r}")
        if max_output < 100:
            raise UsageError(f"terminus: max_output must be at least 100 bytes, got "
                             f"{max_output}")
        self.parser, self.max_turns, self.max_output = parser, max_turns, max_output
        self.max_duration, self.cols, self.rows = max_duration, cols, rows
        self.context_tokens = context_tokens
        self.summarize_below = (summarize_below if summarize_below is not None else
                                None if context_tokens is None else
                                min(8000, context_tokens // 4))
        self.max_tokens, self.temperature = max_tokens, temperature
        self.stop = list(stop) if stop else None
        self.request_timeout = request_timeout

    def corpus(self) -> list[str]:
        """Every fixed text this harness sends: the first prompt's rules, the feedback and
        the handover prompts (their placeholders left empty)."""
        first = fmt.prompt(self.parser, instruction="", terminal=FIRST_SCREEN,
                           max_duration=self.max_duration, max_wait=self.max_duration)
        fixed = (fmt.CONFIRM, fmt.PARSE_ERROR, fmt.CUT_OFF, fmt.WARNINGS, fmt.SUMMARY_PROMPT,
                 fmt.QUESTIONS_PROMPT, fmt.ANSWERS_PROMPT, fmt.HANDOFF)
        return [first, *(re.sub(r"\{\w+\}", "", t) for t in fixed)]

    # -- the loop ------------------------------------------------------------------------
    def play(self, play: Play, endpoint: Endpoint) -> None:
        episode = _Episode(self, play, endpoint)
        episode.run()


class _Episode:
    """One episode's state: the conversation, the terminal, the pending confirmation, the
    size of the last request."""

    def __init__(self, harness: Terminus, play: Play, endpoint: Endpoint) -> None:
        self.h, self.play, self.endpoint = harness, play, endpoint
        self.client = endpoint.client(max_retries=2, timeout=harness.request_timeout)
        env = getattr(play.env, "unwrapped", play.env)
        limit = min(float(getattr(env, "command_timeout", 60.0)),
                    float(getattr(env, "turn_timeout", 120.0)))
        self.pane = Pane(max_output=harness.max_output, cols=harness.cols, rows=harness.rows,
                         max_wait=limit - WAIT_MARGIN_S)
        self.instruction = play.observation
        self.first = fmt.prompt(harness.parser, instruction=self.instruction,
                            terminal=FIRST_SCREEN, max_duration=harness.max_duration,
                            max_wait=self.pane.max_wait)
        self.chat: list[dict[str, Any]] = []
        self.screen = ""  # the terminal's last output, for a handover
        self.used: tuple[int, int] | None = None  # (tokens, characters) of the last exchange
        self.extra: dict[str, Any] = {}
        if harness.max_tokens is not None:
            self.extra["max_tokens"] = harness.max_tokens
        if harness.temperature is not None:
            self.extra["temperature"] = harness.temperature
        if harness.stop:
            self.extra["stop"] = harness.stop

    def run(self) -> None:
        h, play = self.h, self.play
        parse = fmt.PARSERS[h.parser]
        what, complete = fmt.NAMES[h.parser]
        message, pending, turns = self.first, False, 0
        while not play.done:
            if h.max_turns is not None and turns >= h.max_turns:
                play.step("<done/>")  # Harbor grades an agent that stopped: so does the env
                return
            if self._near_limit(message):
                message = self._hand_over(message)
            said, text, finish = self._ask([*self.chat, {"role": "user", "content": message}])
            self.chat += [{"role": "user", "content": message}, said]
            turns += 1
            reply = parse(text)
            if finish == "length" and (reply.error or reply.mended):
                limit = (f"{h.max_tokens} tokens" if h.max_tokens is not None else
                         "the maximum reply length")
                reply = fmt.Reply(error=fmt.CUT_OFF.format(limit=limit),
                                  warnings=reply.warnings)
            if reply.error:
                play.step("")  # a turn with no command: the env counts a format error
                message = fmt.PARSE_ERROR.format(feedback=reply.feedback(), what=what)
                continue
            commands = [Command(c.keystrokes, min(c.duration, h.max_duration))
                        for c in reply.commands]
            if reply.complete and pending:  # confirmed: run the commands, then the verifier
                play.step(self.pane.action(commands, done=True))
                return
            step = play.step(self.pane.action(commands))
            if play.done:
                return
            self.screen = terminal = self.pane.read(step.observation)
            if reply.complete:
                pending = True
                message = fmt.CONFIRM.format(terminal=terminal, complete=complete)
            else:
                pending = False
                warnings = "\n".join(f"- {w}" for w in reply.warnings)
                message = (fmt.WARNINGS.format(warnings=warnings, terminal=terminal)
                           if reply.warnings else terminal)

    # -- requests ------------------------------------------------------------------------
    def _ask(self, messages: list[dict[str, Any]], *,
             main: bool = True) -> tuple[dict[str, Any], str, str]:
        """The model's reply to `messages`: the message to send back as it came (so the
        gateway finds the conversation it extends), its text, its finish reason. For the main
        conversation, the size of the exchange is kept for `_near_limit`."""
        r = self.client.chat.completions.create(model=self.endpoint.model, messages=messages,
                                                **self.extra)
        choice = r.choices[0]
        text = choice.message.content or ""
        if main:
            chars = sum(len(m.get("content") or "") for m in messages) + len(text)
            usage = getattr(r, "usage", None)
            tokens = (usage.prompt_tokens + usage.completion_tokens if usage is not None
                      else chars // 4)
            self.used = (tokens, chars)
        return (choice.message.model_dump(exclude_none=True), text,
                choice.finish_reason or "stop")

    def _near_limit(self, message: str) -> bool:
        """Whether the conversation so far plus `message` comes within `summarize_below`
        tokens of `context_tokens` (the message's tokens estimated from the last exchange's
        tokens per character). Never right after a handover: that needs a turn first."""
        if self.h.context_tokens is None or self.used is None:
            return False
        tokens, chars = self.used
        estimate = tokens + len(message) * tokens / max(chars, 1)
        assert self.h.summarize_below is not None
        return self.h.context_tokens - estimate < self.h.summarize_below

    def _hand_over(self, message: str) -> str:
        """Terminus-2's handover: summary, questions from a fresh context, answers; the new
        conversation and the message to send next (the answers)."""
        log.debug("terminus: context near %s tokens: handing over", self.h.context_tokens)
        asked = [*self.chat, {"role": "user", "content": (
            f"{message}\n\n{fmt.SUMMARY_PROMPT.format(instruction=self.instruction)}")}]
        said, summary, _ = self._ask(asked, main=False)
        questions_prompt = fmt.QUESTIONS_PROMPT.format(
            instruction=self.instruction, summary=summary, terminal=self._screen_now(message))
        asked_back, questions, _ = self._ask([{"role": "user", "content": questions_prompt}],
                                             main=False)
        _, answers, _ = self._ask(
            [*asked, said, {"role": "user",
                            "content": fmt.ANSWERS_PROMPT.format(questions=questions)}],
            main=False)
        self.chat = [{"role": "user", "content": f"{self.first}\n\n{questions_prompt}"},
                     asked_back]
        self.used = None
        return fmt.HANDOFF.format(answers=answers)

    def _screen_now(self, message: str) -> str:
        """The terminal's last lines (what a screen would show)."""
        lines = (self.screen or message).splitlines()
        return "\n".join(lines[-self.h.rows:])


__all__ = ["Terminus"]
