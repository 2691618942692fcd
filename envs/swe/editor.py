"""The file editor SWE agents are trained with: `view`, `create`, `str_replace`, `insert` and
`undo_edit` on files in the episode's sandbox.

The semantics are those of the editor SWE-agent and OpenHands give their agents (Anthropic's
text-editor tool), so a model trained with one behaves as it learned:

- paths are absolute; every command but `create` needs the path to exist, `create` needs it
  not to (it never overwrites), and a directory only takes `view`;
- `view` of a file numbers its lines as `cat -n` does (tabs expanded), optionally only lines
  `view_range = [first, last]` (1-based, inclusive; last -1: to the end); `view` of a
  directory lists what is in it up to two levels deep, hidden entries left out;
- `str_replace` needs `old_str` to occur exactly once (and `new_str` to differ from it), and
  shows the edited part with a few lines around it;
- `insert` puts `new_str` after line `insert_line` (0: at the top);
- `undo_edit` puts back the file as it was before its last edit (each edit, `create`
  included, is kept per file for as long as the editor lives);
- tabs are expanded to spaces in what is shown and in what an edit writes back, as the
  reference editor does (an edited Makefile loses its tabs there too).

Every failure is a message the agent reads (`EditorError`, turned into an observation by
the env), never a crash; long outputs are clipped with a note saying how to see the rest.
The editor runs on the host and reaches the files only through the sandbox's own API, so it
can touch nothing outside the sandbox.
"""

from __future__ import annotations

import shlex
from typing import Any

from .errors import EditorError

COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")
CONTEXT_LINES = 4  # shown above and below an edit
MAX_OUTPUT = 16_000  # characters of one view before it is clipped
CLIPPED = ("\n<output clipped: only the start is shown. Search the file with `grep -n` and "
           "view the lines you need with view_range.>")


class Editor:
    """The editor over one sandbox (`exec`, `read_file`, `write_file`: see
    `skyhub.sandbox.Sandbox`), with the undo history of the files it edited."""

    def __init__(self, sandbox: Any, cwd: str = "/testbed") -> None:
        self.sandbox, self.cwd = sandbox, cwd
        self.history: dict[str, list[str]] = {}

    def __call__(self, command: str, path: str, *, file_text: str | None = None,
                 view_range: list[int] | None = None, old_str: str | None = None,
                 new_str: str | None = None, insert_line: int | None = None) -> str:
        """Run one command; returns what the agent sees, or raises EditorError."""
        if command not in COMMANDS:
            raise EditorError(f"Unknown command {command!r}: use one of "
                              f"{', '.join(COMMANDS)}.")
        if isinstance(path, str) and "\x00" in path:
            raise EditorError("The path holds a NUL byte, which no file name can: check it.")
        if not isinstance(path, str) or not path.startswith("/"):
            raise EditorError(f"The path {path!r} is not absolute: paths start with `/`, "
                              f"e.g. {self.cwd.rstrip('/')}/{str(path).lstrip('./')}.")
        kind = self._kind(path)
        if command == "create":
            if kind is not None:
                raise EditorError(f"{path} already exists; `create` never overwrites. Edit "
                                  "it with str_replace or insert.")
            if file_text is None:
                raise EditorError("`create` needs file_text: the content of the new file.")
            return self._create(path, file_text)
        if kind is None:
            raise EditorError(f"{path} does not exist. Check the path with "
                              f"`view {self.cwd}`.")
        if kind == "dir" and command != "view":
            raise EditorError(f"{path} is a directory: only `view` works on directories.")
        if command == "view":
            return self._view_dir(path, view_range) if kind == "dir" \
                else self._view(path, view_range)
        if command == "str_replace":
            if old_str is None:
                raise EditorError("`str_replace` needs old_str: the exact text to replace.")
            return self._str_replace(path, old_str, new_str or "")
        if command == "insert":
            if insert_line is None or new_str is None:
                raise EditorError("`insert` needs insert_line (insert after that line; 0: at "
                                  "the top) and new_str (the text to insert).")
            return self._insert(path, insert_line, new_str)
        return self._undo(path)

    # -- commands ----------------------------------------------------------------------
    def _create(self, path: str, text: str) -> str:
        parent = path.rsplit("/", 1)[0] or "/"
        if self._kind(parent) != "dir":
            raise EditorError(f"The directory {parent} does not exist: make it first "
                              f"(`mkdir -p {shlex.quote(parent)}`).")
        self._write(path, text)
        self.history.setdefault(path, []).append(text)  # as SWE-agent's: undo keeps it
        return f"Created {path}."

    def _view(self, path: str, view_range: list[int] | None) -> str:
        text = self._read(path)
        lines = text.split("\n")
        first = 1
        if view_range is not None:
            if (not isinstance(view_range, (list, tuple)) or len(view_range) != 2
                    or not all(isinstance(n, int) for n in view_range)):
                raise EditorError("view_range must be two integers: [first, last] (last -1: "
                                  "to the end of the file).")
            first, last = view_range
            n = len(lines)
            if not 1 <= first <= n:
                raise EditorError(f"view_range {list(view_range)}: the first line must be "
                                  f"between 1 and {n}, the file's length.")
            if last == -1:
                last = n
            if last > n:
                raise EditorError(f"view_range {list(view_range)}: the file has {n} lines.")
            if last < first:
                raise EditorError(f"view_range {list(view_range)}: the last line comes "
                                  "before the first.")
            lines = lines[first - 1:last]
        return numbered("\n".join(lines), path, first)

    def _view_dir(self, path: str, view_range: list[int] | None) -> str:
        if view_range is not None:
            raise EditorError(f"{path} is a directory: view_range works on files only.")
        r = self.sandbox.exec(f"find {shlex.quote(path)} -maxdepth 2 -not -path '*/.*' "
                              "| sort", timeout=30)
        if r.exit_code != 0:
            raise EditorError(f"Could not list {path}: {r.stderr.strip()[:300]}")
        return clip(f"Files and directories in {path}, two levels deep, hidden ones left "
                    f"out:\n{r.stdout.rstrip()}\n")

    def _str_replace(self, path: str, old: str, new: str) -> str:
        text = self._read(path)
        old, new = old.expandtabs(), new.expandtabs()
        count = text.count(old) if old else 0
        if count == 0:
            raise EditorError(f"Nothing replaced: old_str did not occur verbatim in {path}. "
                              "Copy it exactly from `view`, whitespace included.")
        if count > 1:
            at = [i + 1 for i, line in enumerate(text.split("\n")) if old in line]
            where = f" (lines {at})" if at else ""
            raise EditorError(f"Nothing replaced: old_str occurs {count} times in {path}"
                              f"{where}. Include more of the surrounding lines so that it "
                              "occurs once.")
        if new == old:
            raise EditorError("Nothing replaced: new_str is the same as old_str.")
        updated = text.replace(old, new)
        self._write(path, updated)
        self.history.setdefault(path, []).append(text)
        line = text.split(old)[0].count("\n")  # 0-based line where the edit starts
        start = max(1, line + 1 - CONTEXT_LINES)
        end = min(line + 1 + new.count("\n") + CONTEXT_LINES, len(updated.split("\n")))
        snippet = "\n".join(updated.split("\n")[start - 1:end])
        return (f"Edited {path}. " + numbered(snippet, f"part of {path}", start)
                + "Check that the edit is what you meant (indentation, no duplicated "
                "lines); edit again if not.")

    def _insert(self, path: str, at: int, new: str) -> str:
        text = self._read(path)
        lines, new_lines = text.split("\n"), new.expandtabs().split("\n")
        if not isinstance(at, int) or not 0 <= at <= len(lines):
            raise EditorError(f"insert_line {at!r} is out of range: 0 (the top) to "
                              f"{len(lines)} (after the last line).")
        updated = "\n".join(lines[:at] + new_lines + lines[at:])
        self._write(path, updated)
        self.history.setdefault(path, []).append(text)
        start = max(1, at - CONTEXT_LINES + 1)
        snippet = "\n".join(lines[start - 1:at] + new_lines + lines[at:at + CONTEXT_LINES])
        return (f"Edited {path}. " + numbered(snippet, f"part of {path}", start)
                + "Check that the edit is what you meant (indentation, no duplicated "
                "lines); edit again if not.")

    def _undo(self, path: str) -> str:
        edits = self.history.get(path)
        if not edits:
            raise EditorError(f"No edit of {path} to undo.")
        previous = edits.pop()
        self._write(path, previous)
        return f"Undid the last edit of {path}. " + numbered(previous, path)

    # -- the sandbox -------------------------------------------------------------------
    def _kind(self, path: str) -> str | None:
        q = shlex.quote(path)
        r = self.sandbox.exec(f"if [ -d {q} ]; then echo dir; elif [ -e {q} ]; then echo "
                              "file; else echo none; fi", timeout=30)
        kind = r.stdout.strip()
        return None if kind == "none" else kind

    def _read(self, path: str) -> str:
        try:
            data = self.sandbox.read_file(path)
        except FileNotFoundError:
            raise EditorError(f"{path} does not exist.") from None
        except (OSError, PermissionError) as e:
            raise EditorError(f"Could not read {path}: {e}") from None
        return data.decode("utf-8", errors="replace").expandtabs()

    def _write(self, path: str, text: str) -> None:
        try:
            self.sandbox.write_file(path, text)
        except OSError as e:
            raise EditorError(f"Could not write {path}: {e}") from None


def numbered(text: str, name: str, first: int = 1) -> str:
    """`text` with line numbers as `cat -n` prints them, clipped to MAX_OUTPUT."""
    body = "\n".join(f"{i + first:6}\t{line}"
                     for i, line in enumerate(clip(text.expandtabs()).split("\n")))
    return f"Lines of {name}, numbered as by `cat -n`:\n{body}\n"


def clip(text: str) -> str:
    return text if len(text) <= MAX_OUTPUT else text[:MAX_OUTPUT] + CLIPPED


__all__ = ["COMMANDS", "Editor", "EditorError", "numbered"]
