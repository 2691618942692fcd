"""The SkyRL-SQL turn protocol: prompts, parsing one turn, the trajectory's format rules, and
how a query result is shown to the agent.

Each turn the agent thinks in `<think>...</think>` and then either explores with one
`<sql>...</sql>` (answered with `<observation>...</observation>`) or ends with
`<solution>...</solution>`. Prompt structure, tags, the 50-row table and the format rules
follow SkyRL-SQL (NovaSky, 2025) so rewards and accuracies are comparable with its results.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from skyhub.protocol import find_tag

SYSTEM_PROMPT = """\
Task overview:
You are a data science expert. You are given a database schema and a question in natural \
language. Write a valid SQL query that answers the question, within a limited number of \
turns. Break the problem down, reason step by step, and explore the database when it helps.

Instructions:
- Return only what the question asks for: if it asks for one column, select only that column.
- The query must return all the information asked for, with nothing missing or extra.
- Before the final query, think it through: analyse the question, summarise what you found, \
brainstorm, check each step, fix errors, decide how to use the SQL tool, revisit earlier steps.

Format:
- Think inside <think>...</think> every time you receive a new observation.
- To explore or verify, write one query inside <sql>...</sql>. Its result is shown as a table \
inside <observation>...</observation> (at most {max_rows} rows). Then think again and refine.
- When no more exploration is needed, or at the last turn, give the final SQL query inside \
<solution>...</solution>. This ends the episode.

Example:
Question: How many pigs are on the farm?
<think>I should count the rows of the animals table whose species is pig.</think>
<sql>SELECT COUNT(*) FROM animals WHERE species = 'pig';</sql>
<observation>
COUNT(*)
--------
12
</observation>
<think>There are 12 pigs; the query answers the question.</think>
<solution>SELECT COUNT(*) FROM animals WHERE species = 'pig';</solution>"""

FIRST_OBSERVATION = """\
Database engine:
{engine}

Database schema:
{schema}
This schema describes the database: its tables, columns, primary and foreign keys, and a few \
example rows of each table.

External knowledge:
{knowledge}

Question:
{question}

You have {max_turns} turns."""

STOP_STRINGS = ("</sql>", "</solution>")
_FORBIDDEN_IN_SOLUTION = ("think", "sql", "observation")


@dataclass(frozen=True)
class Turn:
    """What one agent turn asks for: `kind` is `sql`, `solution` or `invalid` (with `error`
    saying what was wrong, for the observation)."""

    kind: str
    sql: str = ""
    error: str = ""


def parse_turn(action: str) -> Turn:
    """The agent's request in one turn. A `<solution>` anywhere ends the episode; otherwise
    the first `<sql>` is run. Never raises."""
    text = action if isinstance(action, str) else ""
    sol = find_tag(text, "solution")
    if sol is not None:
        if not sol.closed:
            return Turn("invalid", error="the <solution> tag is not closed; write "
                        "<solution>SQL</solution>")
        return Turn("solution", sql=sol.content.strip())
    q = find_tag(text, "sql")
    if q is None:
        if not text.strip():
            why = "the turn is empty"
        else:
            why = "no <sql>...</sql> or <solution>...</solution> was found"
        return Turn("invalid", error=f"{why}; explore with <sql>SQL</sql> or answer with "
                    "<solution>SQL</solution>")
    if not q.closed:
        return Turn("invalid", error="the <sql> tag is not closed; write <sql>SQL</sql>")
    if not q.content.strip():
        return Turn("invalid", error="the <sql> block is empty")
    return Turn("sql", sql=q.content.strip())


def trajectory_text(actions: list[str], observations: list[str]) -> str:
    """The agent's turns interleaved with the env's observations, as the model saw them."""
    parts = []
    for i, a in enumerate(actions):
        parts.append(a)
        if i < len(observations) and observations[i]:
            parts.append(observations[i])
    return "\n".join(parts)


_TAGS_RE = re.compile(r"<\s*(/)?\s*(think|sql|solution|observation)(?:\s[^<>]*)?\s*>",
                      re.IGNORECASE)


def format_violations(actions: list[str], observations: list[str]) -> list[str]:
    """SkyRL-SQL's format rules over a whole trajectory; an empty list means it is valid.

    1. exactly one `<solution>...</solution>` pair;
    2. at least one `<think>`;
    3. every `</observation>` is followed by a `<think>`;
    4. no think/sql/observation tags inside the solution.
    One scan of the trajectory's tags serves every rule (this runs at every episode's end).
    """
    text = trajectory_text(actions, observations)
    tags = [(m.group(2).lower(), m.group(1) is not None, m.start(), m.end())
            for m in _TAGS_RE.finditer(text)]
    opens = Counter(name for name, closing, _, _ in tags if not closing)
    closes = Counter(name for name, closing, _, _ in tags if closing)
    problems = []
    if (opens["solution"], closes["solution"]) != (1, 1):
        problems.append(f"expected exactly one <solution>...</solution>, found "
                        f"{opens['solution']} opening and {closes['solution']} closing tags")
    if opens["think"] < 1:
        problems.append("no <think> block")
    for k, (name, closing, _, end) in enumerate(tags):
        if name == "observation" and closing:
            nxt = tags[k + 1] if k + 1 < len(tags) else None
            if nxt is None or nxt[:2] != ("think", False) or text[end:nxt[2]].strip():
                problems.append("an observation is not followed by <think>")
                break
    inside = False
    for name, closing, _, _ in tags:
        if name == "solution":
            inside = not closing
        elif inside:
            problems.append("the solution contains think/sql/observation tags")
            break
    return problems


def render_table(columns: list[str], rows: list[tuple], *, max_rows: int, max_chars: int,
                 total_rows: int | None = None) -> str:
    """A plain-text table of at most `max_rows` rows and `max_chars` characters, saying what
    was cut (the agent must know a result is partial)."""
    shown = rows[:max_rows]
    cells = [[_cell(v) for v in r] for r in shown]
    widths = [len(c) for c in columns]
    for r in cells:
        widths = [max(w, len(v)) for w, v in zip(widths, r, strict=False)]
    widths = [min(w, 60) for w in widths]
    line = " | ".join(c.ljust(w)[:w] for c, w in zip(columns, widths, strict=False))
    out = [line, "-+-".join("-" * w for w in widths)]
    out += [" | ".join(v.ljust(w)[:w] for v, w in zip(r, widths, strict=False)) for r in cells]
    n = total_rows if total_rows is not None else len(rows)
    text = "\n".join(out)
    if n > len(shown):
        text += f"\n... {n - len(shown)} more rows not shown ({n} rows in all)" if \
            total_rows is not None else f"\n... more rows not shown (first {len(shown)} shown)"
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n... output truncated at {max_chars} characters"
    return text


def _cell(v: object) -> str:
    t = type(v)
    if t is str:
        return v.replace("\n", " ") if "\n" in v else v  # type: ignore[attr-defined]
    if t is int or t is float:
        return str(v)
    if v is None:
        return "NULL"
    if isinstance(v, bytes):
        return f"<{len(v)} bytes>"
    return str(v).replace("\n", " ")
