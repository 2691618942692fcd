"""What the `terminus` harness asks of the model and how it reads the replies: Terminus-2's
two reply formats, JSON and XML, with its rules (our wording and our code).

    {"analysis": "...", "plan": "...",
     "commands": [{"keystrokes": "ls -la\\n", "duration": 0.1}], "task_complete": false}

    <response><analysis>...</analysis><plan>...</plan>
    <commands><keystrokes duration="0.1">ls -la
    </keystrokes></commands><task_complete>false</task_complete></response>

A reply that cannot be read is an `error` (nothing is typed; the model is told why and
answers again); small slips are `warnings`, shown to the model with the next output, and the
reply is played: text around the JSON object or the `<response>`, a missing duration (1 s), a
command that does not end in a newline before another one, fields out of order, unknown
fields or tags, XML entities (read literally). Two slips are mended, with a warning: a JSON
object missing its closing braces, a `<response>` missing `</response>`. A reply that says
`task_complete` plays even when its commands are malformed (they are dropped, with a warning).

Over ~400 lines, for a reason: the model-facing text of both formats (prompts, confirmation,
handover and error messages: closer to data than to logic) beside the two parsers whose rules
that text states.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from skyhub.harness.terminus_pane import Command

_WAIT_RULES = (
    "Durations: about 0.1 s for commands that return at once (cd, ls, echo, cat), about 1 s "
    "for quick programs (gcc, find), more for slow ones (make, pip install, a long script). "
    "A short wait is better than a long one: you can always wait again by sending empty "
    "keystrokes with a duration, e.g. {wait_again}. A command waits at most {max_duration:g} "
    "s, and the waits of one reply at most {max_wait:g} s in all; for long jobs, poll.")

JSON_PROMPT = """You are an AI agent solving a task in a Linux terminal. Each turn you see what \
the terminal printed, and you answer with the keystrokes to type next.

Answer with one JSON object, shaped like this:

{{
  "analysis": "What the terminal shows: what is done, what went wrong, what is left.",
  "plan": "What you will do next and why; what each command should achieve.",
  "commands": [
    {{"keystrokes": "ls -la\\n", "duration": 0.1}},
    {{"keystrokes": "cd src\\n", "duration": 0.1}}
  ],
  "task_complete": false
}}

Fields, in this order:
- "analysis" (required): your reading of the current state.
- "plan" (required): your next steps.
- "commands" (required): the keystrokes to send, in order; an empty list sends nothing and just \
shows the terminal again.
- "task_complete" (optional, default false): true once the task is done. You will be asked to \
confirm; after you confirm, your work is graded and cannot be changed.

Each command:
- "keystrokes" (required): typed into the terminal exactly as written, nothing added. End a \
command line with a newline ("\\n") or it is not run. For a special key, send its tmux name as \
the whole keystrokes: "C-c" is Ctrl+C, "C-d" is Ctrl+D; also "Escape", "Enter", "Tab", "Up", \
"Down".
- "duration" (optional, default 1.0): seconds to wait after sending the keystrokes, before the \
next command is sent and before you see the output.

{wait_rules}

Text before or after the JSON object is tolerated, with a warning. The JSON must be valid: \
escape quotes, backslashes and newlines inside strings.

Task:
{instruction}

Current terminal state:
{terminal}
"""

XML_PROMPT = """You are an AI agent solving a task in a Linux terminal. Each turn you see what \
the terminal printed, and you answer with the keystrokes to type next.

Answer with one <response> block, shaped like this:

<response>
<analysis>
What the terminal shows: what is done, what went wrong, what is left.
</analysis>
<plan>
What you will do next and why; what each command should achieve.
</plan>
<commands>
<keystrokes duration="0.1">ls -la
</keystrokes>
<keystrokes duration="0.1">cd src
</keystrokes>
</commands>
<task_complete>false</task_complete>
</response>

Sections, in this order:
- <analysis> (required): your reading of the current state.
- <plan> (required): your next steps.
- <commands> (required): one <keystrokes> element per command, in order; an empty \
<commands></commands> sends nothing and just shows the terminal again.
- <task_complete> (optional, default false): true once the task is done. You will be asked to \
confirm; after you confirm, your work is graded and cannot be changed.

Each <keystrokes> element's text is typed into the terminal exactly as written, byte for byte: \
write <, >, & and quotes as they are, never as XML entities (&lt; would be typed as the four \
characters). End a command line with a line break, or it is not run. For a special key, send its \
tmux name alone, e.g. <keystrokes duration="0.1">C-c</keystrokes> for Ctrl+C, C-d for Ctrl+D; \
also Escape, Enter, Tab, Up, Down. The duration attribute (default 1.0) is the seconds to wait \
after sending, before the next command is sent and before you see the output.

{wait_rules}

Write nothing outside the <response> block, and no other tags in it.

Task:
{instruction}

Current terminal state:
{terminal}
"""

CONFIRM = """Current terminal state:
{terminal}

You marked the task as complete. Are you sure? Your work will then be graded, and you will not \
be able to change anything. If so, reply again with {complete}; if not, carry on working."""

PARSE_ERROR = """Your last response could not be read, so nothing was typed:
{feedback}

Answer again with a valid {what}."""

CUT_OFF = ("your response was cut off at the output limit ({limit}), so none of its commands "
           "were run. Keep each response shorter: split long work (a long file, a long "
           "script) over several turns.")

WARNINGS = """Your last response had warnings:
{warnings}

{terminal}"""

SUMMARY_PROMPT = """Your context is nearly full. Another agent will take over this task and will \
only know what you write now.

Task:
{instruction}

Write a thorough summary of the work so far, in plain text:
1. Actions: the important commands you ran, and what each showed.
2. Findings: the files, paths, settings, error messages and system state that matter.
3. Problems: what went wrong, and how you dealt with it.
4. Status: exactly where the task stands, and what is left to do.

Leave nothing out that the next agent needs in order to carry on."""

QUESTIONS_PROMPT = """You are taking over a task that another agent started.

Task:
{instruction}

The previous agent's summary:
{summary}

The terminal now:
{terminal}

Before you start, ask the previous agent questions, at least five and more if needed, about \
whatever the summary leaves unclear about the state of the work. You cannot ask anything later, \
so ask all you need to know."""

ANSWERS_PROMPT = """The agent taking over has questions. Answer each of them, in detail:

{questions}"""

HANDOFF = """The previous agent's answers:

{answers}

Now carry on with the task from where it was left. You can no longer ask questions: answer in \
the response format described at the start."""


@dataclass
class Reply:
    """One reply as read: the commands to type, whether it says the task is done, and what
    was wrong with it (`error`: not playable; `warnings`: played anyway)."""

    commands: list[Command] = field(default_factory=list)
    complete: bool = False
    error: str = ""
    warnings: list[str] = field(default_factory=list)
    analysis: str = ""
    plan: str = ""
    mended: bool = False

    def feedback(self) -> str:
        """The error and warnings as the model is told them."""
        parts = [f"ERROR: {self.error}"] if self.error else []
        if self.warnings:
            parts.append("WARNINGS:\n" + "\n".join(f"- {w}" for w in self.warnings))
        return "\n".join(parts)


def _truthy(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


# -- JSON ----------------------------------------------------------------------------------
def _json_object(text: str) -> tuple[int, int]:
    """Where the first balanced `{...}` of `text` starts and ends (braces inside strings do
    not count); end is -1 when it never closes."""
    start, depth, in_str, escaped = -1, 0, False, False
    for i, ch in enumerate(text):
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = start >= 0
        elif ch == "{":
            start = i if depth == 0 else start
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                return start, i + 1
    return start, -1


def parse_json(text: str) -> Reply:
    reply = Reply()
    start, end = _json_object(text)
    if start < 0:
        reply.error = "no JSON object found in the response"
        return reply
    if end < 0:  # mend: close what is open
        body = text[start:].rstrip()
        opened = _json_object(body + "}" * 64)[1]
        if opened < 0:
            reply.error = "the JSON object never closes"
            return reply
        body = (body + "}" * 64)[:opened]
        reply.mended = True
        reply.warnings.append("the JSON object was missing closing braces; they were added "
                              "(write complete JSON)")
    else:
        body = text[start:end]
        if text[end:].strip():
            reply.warnings.append("text after the JSON object was ignored")
    if text[:start].strip():
        reply.warnings.append("text before the JSON object was ignored")
    try:
        data = json.loads(body)
    except ValueError as e:
        preview = body if len(body) < 200 else body[:100] + "..."
        reply.error = f"invalid JSON: {e} (in {preview!r})"
        return reply
    missing = [k for k in ("analysis", "plan", "commands") if k not in data]
    if missing:
        reply.error = f"missing required field{'s' * (len(missing) > 1)}: {', '.join(missing)}"
        return reply
    reply.analysis, reply.plan = str(data["analysis"]), str(data["plan"])
    for k in ("analysis", "plan"):
        if not isinstance(data[k], str):
            reply.warnings.append(f'"{k}" should be a string')
    positions = [body.find(f'"{k}"') for k in ("analysis", "plan", "commands")]
    if positions != sorted(positions):
        reply.warnings.append('fields should come in the order "analysis", "plan", '
                              '"commands"')
    reply.complete = _truthy(data.get("task_complete", False))
    if not isinstance(data["commands"], list):
        problem = '"commands" must be a list'
    else:
        problem = _json_commands(data["commands"], reply)
    if problem:
        reply.commands = []
        if reply.complete:
            reply.warnings.append(f"{problem} (no command was run)")
        else:
            reply.error = problem
    return reply


def _json_commands(items: list[object], reply: Reply) -> str:
    for i, item in enumerate(items, 1):
        if not isinstance(item, dict):
            return f"command {i} must be an object"
        keys = item.get("keystrokes")
        if not isinstance(keys, str):
            return (f'command {i} has no "keystrokes"' if keys is None else
                    f'command {i}: "keystrokes" must be a string')
        duration = item.get("duration")
        if (isinstance(duration, bool) or not isinstance(duration, (int, float))
                or not math.isfinite(duration)):
            reply.warnings.append(f'command {i}: {"no" if duration is None else "invalid"} '
                                  '"duration", 1 s used')
            duration = 1.0
        unknown = sorted(set(item) - {"keystrokes", "duration"})
        if unknown:
            reply.warnings.append(f"command {i}: unknown fields {', '.join(unknown)}")
        if i < len(items) and not keys.endswith("\n"):
            reply.warnings.append(f"command {i} does not end with a newline, so the next "
                                  "command is typed on the same line")
        reply.commands.append(Command(keys, float(duration)))
    return ""


# -- XML -----------------------------------------------------------------------------------
_SECTIONS = ("analysis", "plan", "commands", "task_complete")
_KEYSTROKES = re.compile(r"<keystrokes([^>]*)>(.*?)</keystrokes>", re.S)
_DURATION = re.compile(r"""duration\s*=\s*["']([^"']*)["']""")
_ENTITIES = ("&lt;", "&gt;", "&amp;", "&quot;", "&apos;")


def _section(body: str, name: str) -> str | None:
    m = re.search(rf"<{name}>(.*?)</{name}>", body, re.S)
    if m:
        return m.group(1)
    return "" if re.search(rf"<{name}\s*/>", body) else None


def parse_xml(text: str) -> Reply:
    reply = Reply()
    start = text.find("<response>")
    if start < 0:
        reply.error = "no <response> block found"
        return reply
    end = text.find("</response>", start)
    if end < 0:
        reply.mended = True
        reply.warnings.append("</response> was missing and was added (close the block)")
        end = len(text)
    elif text[end + len("</response>"):].strip():
        reply.warnings.append("text after </response> was ignored")
        if text.count("<response>") > 1:
            reply.warnings.append("only the first <response> block was played: send one "
                                  "per reply")
    if text[:start].strip():
        reply.warnings.append("text before <response> was ignored")
    body = text[start + len("<response>"):end]
    found = {name: _section(body, name) for name in _SECTIONS}
    reply.analysis, reply.plan = (found["analysis"] or "").strip(), (found["plan"] or "").strip()
    reply.complete = (found["task_complete"] or "").strip().lower() == "true"
    for name in ("analysis", "plan"):
        if found[name] is None:
            reply.warnings.append(f"the <{name}> section is missing")
    tags = set(re.findall(r"<([A-Za-z_][\w-]*)[\s/>]", _outside_commands(body)))
    for tag in sorted(tags - set(_SECTIONS)):
        reply.warnings.append(f"unknown tag <{tag}> (expected {', '.join(_SECTIONS)})")
    if len(re.findall(r"<commands[\s>/]", body)) > 1:
        reply.warnings.append("only the first <commands> block was played: send one per reply")
    at = [body.find(f"<{n}") for n in ("analysis", "plan", "commands")]
    if all(p >= 0 for p in at) and at != sorted(at):
        reply.warnings.append("sections should come in the order <analysis>, <plan>, "
                              "<commands>")
    commands = found["commands"]
    if commands is None:
        if not reply.complete:
            reply.error = "the <commands> section is missing"
        return reply
    items = _KEYSTROKES.findall(commands)
    if not items and not reply.complete:
        reply.warnings.append("<commands> is empty: nothing was typed")
    for i, (attrs, keys) in enumerate(items, 1):
        m = _DURATION.search(attrs)
        duration = 1.0
        if m is None:
            reply.warnings.append(f"command {i}: no duration attribute, 1 s used")
        else:
            try:
                duration = float(m.group(1))
                if not math.isfinite(duration):
                    raise ValueError(m.group(1))
            except ValueError:
                duration = 1.0
                reply.warnings.append(f"command {i}: invalid duration {m.group(1)!r}, 1 s used")
        if i < len(items) and not keys.endswith("\n"):
            reply.warnings.append(f"command {i} does not end with a line break, so the next "
                                  "command is typed on the same line")
        reply.commands.append(Command(keys, duration))
    for entity in _ENTITIES:
        if entity in commands:
            reply.warnings.append(f"{entity} inside <keystrokes> is typed as those "
                                  "characters, not decoded: write the character itself")
    return reply


def _outside_commands(body: str) -> str:
    """`body` without the inside of its <commands> blocks (keystrokes may hold any tag)."""
    return re.sub(r"<commands>.*?</commands>", "<commands></commands>", body, flags=re.S)


PARSERS = {"json": parse_json, "xml": parse_xml}
PROMPTS = {"json": JSON_PROMPT, "xml": XML_PROMPT}
#: what the model is asked to send again, and how it confirms completion, per format
NAMES = {"json": ("JSON response", '"task_complete": true'),
         "xml": ("<response> block", "<task_complete>true</task_complete>")}
WAIT_AGAIN = {"json": '{"keystrokes": "", "duration": 10}',
              "xml": '<keystrokes duration="10"></keystrokes>'}


def prompt(fmt: str, *, instruction: str, terminal: str, max_duration: float,
           max_wait: float) -> str:
    """The first request's text: the rules of format `fmt`, the task, the terminal."""
    rules = _WAIT_RULES.format(wait_again=WAIT_AGAIN[fmt], max_duration=max_duration,
                               max_wait=max_wait)
    return PROMPTS[fmt].format(wait_rules=rules, instruction=instruction, terminal=terminal)


__all__ = ["ANSWERS_PROMPT", "CONFIRM", "CUT_OFF", "HANDOFF", "NAMES", "PARSERS",
           "PARSE_ERROR", "QUESTIONS_PROMPT", "SUMMARY_PROMPT", "WARNINGS", "Reply",
           "parse_json", "parse_xml", "prompt"]
