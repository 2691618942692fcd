"""Unified diffs, read and applied in memory: which lines of which files a patch changes.

A patch here is what `git diff` writes and SWE-bench stores (`patch`, `test_patch`): file
headers (`diff --git a/X b/Y`, `--- a/X`, `+++ b/Y`, `/dev/null` for a created or deleted
file) and `@@ -a,b +c,d @@` hunks. Localization (`skyhub.envs.swe.localization`) needs the
old line numbers a patch removes and the new ones it adds, and the new text of each file, so
that both can be mapped to the functions around them; nothing here touches a disk.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from skyhub.errors import UsageError

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class Hunk:
    old_start: int
    new_start: int
    lines: list[str] = field(default_factory=list)  # each with its ' ', '-' or '+' prefix


@dataclass
class FileDiff:
    """One file's part of a patch. `old_path` is None for a created file, `new_path` None for
    a deleted one."""

    old_path: str | None
    new_path: str | None
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        """The file's path in the repository (the new one, or the old one if deleted)."""
        return self.new_path or self.old_path or ""

    def removed_lines(self) -> list[int]:
        """1-based line numbers, in the old file, of the lines this diff removes."""
        return self._marked("-")

    def added_lines(self) -> list[int]:
        """1-based line numbers, in the new file, of the lines this diff adds."""
        return self._marked("+")

    def _marked(self, tag: str) -> list[int]:
        """Line numbers of the lines tagged `tag`, counted in the file that holds them (the
        old one for '-', the new one for '+')."""
        out: list[int] = []
        for h in self.hunks:
            n = h.old_start if tag == "-" else h.new_start
            for line in h.lines:
                if line[:1] == tag:
                    out.append(n)
                if line[:1] in (tag, " "):
                    n += 1
        return out

    def apply(self, old: str) -> str:
        """The new text of the file, from its old text (checked against the hunks' context:
        a patch that does not fit raises UsageError)."""
        src = old.splitlines(keepends=True)
        out: list[str] = []
        at = 0  # lines of src consumed
        for h in self.hunks:
            start = max(h.old_start - 1, 0) if any(x[:1] in "- " for x in h.lines) else h.old_start
            if start < at or start > len(src):
                raise UsageError(f"{self.path}: hunk at line {h.old_start} does not fit the file")
            out += src[at:start]
            at = start
            for line in h.lines:
                tag, text = line[:1], line[1:]
                if tag in (" ", "-"):
                    if at >= len(src) or src[at].rstrip("\r\n") != text.rstrip("\r\n"):
                        raise UsageError(f"{self.path}: the patch's context at line {at + 1} "
                                         "does not match the file")
                    if tag == " ":
                        out.append(src[at])
                    at += 1
                elif tag == "+":
                    out.append(text if text.endswith("\n") else text + "\n")
        out += src[at:]
        return "".join(out)


def parse_patch(patch: str) -> list[FileDiff]:
    """The files of a unified diff, in order. Binary parts and mode changes carry no hunks."""
    files: list[FileDiff] = []
    cur: FileDiff | None = None
    hunk: Hunk | None = None
    remaining = [0, 0]  # old and new lines still expected in the current hunk
    for line in patch.splitlines():
        if hunk is not None and (remaining[0] > 0 or remaining[1] > 0):
            if line.startswith("\\"):  # "\ No newline at end of file"
                continue
            tag = line[:1] or " "  # an empty context line may have lost its space
            hunk.lines.append(tag + line[1:])
            if tag in (" ", "-"):
                remaining[0] -= 1
            if tag in (" ", "+"):
                remaining[1] -= 1
            continue
        if line.startswith("diff --git "):
            m = re.match(r"diff --git a/(.*) b/(.*)$", line)
            cur = FileDiff(m.group(1), m.group(2)) if m else FileDiff(None, None)
            files.append(cur)
            hunk = None
        elif line.startswith("--- "):
            if cur is None or cur.hunks:
                cur = FileDiff(None, None)
                files.append(cur)
            cur.old_path = _strip(line[4:])
        elif line.startswith("+++ ") and cur is not None:
            cur.new_path = _strip(line[4:])
        elif line.startswith("new file mode") and cur is not None:
            cur.old_path = None
        elif line.startswith("deleted file mode") and cur is not None:
            cur.new_path = None
        elif (m := _HUNK.match(line)) and cur is not None:
            old_n = int(m.group(2)) if m.group(2) is not None else 1
            new_n = int(m.group(4)) if m.group(4) is not None else 1
            hunk = Hunk(int(m.group(1)), int(m.group(3)))
            cur.hunks.append(hunk)
            remaining = [old_n, new_n]
    return [f for f in files if f.old_path or f.new_path]


def _strip(name: str) -> str | None:
    name = name.split("\t")[0].strip()
    if name == "/dev/null":
        return None
    return name[2:] if name[:2] in ("a/", "b/") else name



def unified_diff(path: str, old: str, new: str) -> str:
    """A git-style unified diff of one file (`a/path`, `b/path`, 3 lines of context)."""
    body = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                fromfile=f"a/{path}", tofile=f"b/{path}", n=3)
    lines = []
    for line in body:
        lines.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return f"diff --git a/{path} b/{path}\n" + "".join(lines) if lines else ""


def apply_patch(files: dict[str, str], patch: str) -> dict[str, str | None]:
    """The files a patch changes, with their new text (None: deleted), from `files` (path ->
    old text; a path missing there is taken as empty, as for a created file)."""
    out: dict[str, str | None] = {}
    for fd in parse_patch(patch):
        if fd.new_path is None:
            out[fd.path] = None
        else:
            old = out.get(fd.old_path) if fd.old_path in out else files.get(fd.old_path or "", "")
            out[fd.new_path] = fd.apply(old or "")
    return out


__all__ = ["FileDiff", "Hunk", "apply_patch", "parse_patch", "unified_diff"]
