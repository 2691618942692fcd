"""The SkyRL-SQL turn protocol: prompts, parsing one turn, the trajectory's format rules, and
how a query result is shown to the agent.

Each turn the agent thinks in `<think>...</think>` and then either explores with one
`<sql>...</sql>` (answered with `<observation>...</observation>`) or ends with
`<solution>...</solution>`. Prompt structure, tags, the 50-row table and the format rules
follow SkyRL-SQL (NovaSky, 2025) so rewards and accuracies are comparable with its results.

Tag parsing and the format rules are skyrl-gym 0.4's (`text2sql`), as strict as it is: tags
match only as written in lower case (`<THINK>`, `<think >` and an unclosed `<think>` are no
think block; `<SOLUTION>` neither ends the episode nor counts as a solution). The rules read
the agent's turns only: each observation of the env counts as an empty observation frame
(`OBSERVATION_FRAME`), so nothing the env writes (reminders that mention `<solution>`,
error messages, rows of the database) changes the agent's verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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

{budget}"""

STOP_STRINGS = ("</sql>", "</solution>")

# Tags are matched exactly as skyrl-gym writes them: lower case, no spaces or attributes.
# `<SOLUTION>`, `<solution >` and `<Think>` are text, not tags (the regexes below are the
# only exceptions, and say so).
SOLUTION_OPEN, SOLUTION_CLOSE = "<solution>", "</solution>"
_SQL = re.compile(r"<sql>(.*?)</sql>", re.S)
_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_SOLUTIONS = re.compile(r"<solution>(.*?)</solution>", re.S)
_TAG_IN_SOLUTION = re.compile(r"</?(think|sql|observation)\b", re.I)  # any case, as SkyRL
_OBSERVATION_END = re.compile(r"</observation>", re.I)
_LOOSE_TAG = re.compile(r"<\s*/?\s*(sql|solution)\b[^>]*>", re.I)

#: What stands for each observation of the env when the format rules read a trajectory:
#: skyrl-gym's observation frame with no text inside. The rules read the agent's turns
#: and the frames between them, never text the env wrote (a reminder, an error message, a
#: row of the database), so no such text can break or fake the agent's format.
OBSERVATION_FRAME = "\n\n<observation>\n</observation>\n\n"


@dataclass(frozen=True)
class Turn:
    """What one agent turn asks for: `kind` is `sql`, `solution` or `invalid` (with `error`
    saying what was wrong, for the observation)."""

    kind: str
    sql: str = ""
    error: str = ""


def ends_episode(action: str) -> bool:
    """skyrl-gym's rule: a turn that contains both `<solution>` and `</solution>` (in any
    order, anywhere) ends the episode; its reward then comes from `skyrl_format`."""
    return SOLUTION_OPEN in action and SOLUTION_CLOSE in action


def last_solution(text: str) -> str | None:
    """The content of the last `<solution>...</solution>` in `text` (stripped), or None."""
    found = _SOLUTIONS.findall(text)
    return found[-1].strip() if found else None


def parse_turn(action: str) -> Turn:
    """The agent's request in one turn. A turn that ends the episode (`ends_episode`) is a
    `solution` (its last complete `<solution>` block, "" if none); otherwise the first
    `<sql>...</sql>` is run, as skyrl-gym does. Never raises."""
    text = action if isinstance(action, str) else ""
    if ends_episode(text):
        return Turn("solution", sql=last_solution(text) or "")
    q = _SQL.search(text)
    if q is not None and q.group(1).strip():
        return Turn("sql", sql=q.group(1).strip())
    if q is not None:
        why = "the <sql> block is empty"
    elif not text.strip():
        why = "the turn is empty"
    elif SOLUTION_OPEN in text:
        why = "the <solution> tag is not closed; write <solution>SQL</solution>"
    elif "<sql>" in text:
        why = "the <sql> tag is not closed; write <sql>SQL</sql>"
    elif (loose := _LOOSE_TAG.search(text)) is not None:
        why = (f"{loose.group(0)!r} is not a tag here: write the tags exactly as "
               "<sql>...</sql> and <solution>...</solution> (lower case, no spaces)")
    else:
        why = "no <sql>...</sql> or <solution>...</solution> was found"
    if q is None and SOLUTION_OPEN not in text:
        why += "; explore with <sql>SQL</sql> or answer with <solution>SQL</solution>"
    return Turn("invalid", error=why)


@dataclass(frozen=True)
class FormatCheck:
    """SkyRL-SQL's verdict on a trajectory's format: `ok`, the `solution` it extracts (when
    ok) and, for the info dict, what was wrong (`problems`, empty when ok)."""

    ok: bool
    solution: str | None
    problems: tuple[str, ...]


def skyrl_format(actions: list[str]) -> FormatCheck:
    """skyrl-gym's format rules (`text2sql`, 0.4) over the agent's turns, joined by empty
    observation frames (`OBSERVATION_FRAME`), as its chat history joins them:

    1. exactly one `<solution>`, and after it exactly one `</solution>` (exact, lower case);
    2. no think/sql/observation tag, opening or closing, in any case, inside the solution;
    3. at least one `<think>...</think>` (exact, lower case) anywhere;
    4. before the solution, each `</observation>` is followed (after white space) by
       `<think>`, compared in lower case (so `<THINK>` passes here, though not rule 3).
    The solution is the text between the tags, stripped."""
    text = OBSERVATION_FRAME.join(a if isinstance(a, str) else str(a) for a in actions)
    problems = []
    solution = None
    opens = text.count(SOLUTION_OPEN)
    if opens != 1:
        problems.append(f"expected exactly one <solution>, found {opens}")
    else:
        before, after = text.split(SOLUTION_OPEN, 1)
        closes = after.count(SOLUTION_CLOSE)
        if closes != 1:
            problems.append(f"expected exactly one </solution> after <solution>, found {closes}")
        else:
            body = after.split(SOLUTION_CLOSE, 1)[0]
            if _TAG_IN_SOLUTION.search(body):
                problems.append("the solution contains think/sql/observation tags")
            solution = body.strip()
        for m in _OBSERVATION_END.finditer(before):
            if not before[m.end():].lstrip().lower().startswith("<think>"):
                problems.append("an observation is not followed by <think>")
                break
    if _THINK.search(text) is None:
        problems.append("no <think> block")
    ok = not problems
    return FormatCheck(ok, solution if ok else None, tuple(problems))


def format_violations(actions: list[str]) -> list[str]:
    """What breaks SkyRL-SQL's format rules in the agent's turns (`skyrl_format`); empty
    when the format is valid."""
    return list(skyrl_format(actions).problems)


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
