"""Module size: no module of skyhub (`hub/`, `envs/`, `trainer/`) is over 600 lines, and
every one over 400 says in its module docstring why it is that long, in a paragraph that
starts "Over ~400 lines, for a reason:" and names the one job that takes the length (a
module doing several jobs is split instead). Read from the source: nothing is imported."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("hub", "envs", "trainer")
HARD_LIMIT = 600
EXPLAIN_ABOVE = 400
REASON = "Over ~400 lines, for a reason:"


def _modules() -> list[Path]:
    return sorted(p for d in PACKAGES for p in (ROOT / d).rglob("*.py")
                  if "__pycache__" not in p.parts)


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def reason(path: Path) -> str | None:
    """The words after REASON in the module docstring (whitespace folded), or None."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    folded = " ".join(doc.split())
    at = folded.find(REASON)
    return None if at < 0 else folded[at + len(REASON):].strip()


def test_the_scan_sees_the_packages() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _modules()}
    assert {"hub/env.py", "hub/sandbox/docker.py", "trainer/loop.py"} <= names
    assert any(n.startswith("envs/") for n in names)


def test_no_module_is_over_600_lines() -> None:
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in _modules()
            if (n := _lines(p)) > HARD_LIMIT]
    assert not long, (f"split these by job (each module one job, at most {HARD_LIMIT} "
                      "lines):\n" + "\n".join(long))


def test_every_module_over_400_lines_says_why() -> None:
    missing = []
    for p in _modules():
        if _lines(p) <= EXPLAIN_ABOVE:
            continue
        why = reason(p)
        if why is None or len(re.findall(r"[A-Za-z]+", why)) < 6:
            missing.append(f"{p.relative_to(ROOT)} ({_lines(p)} lines)")
    assert not missing, (f"say in the module docstring why these are over {EXPLAIN_ABOVE} "
                         f"lines, in a paragraph starting {REASON!r} that names the one job "
                         "(or split them by job):\n" + "\n".join(missing))


@pytest.mark.parametrize(("doc", "found"), [
    ('"""A module.\n\nOver ~400 lines, for a reason: one parser whose rules build on each\n'
     'other."""\n', "one parser whose rules build on each other."),
    ('"""A module that does two things."""\n', None),
    ('# Over ~400 lines, for a reason: a comment is not the docstring\nx = 1\n', None),
])
def test_the_reason_is_read_from_the_docstring_only(tmp_path: Path, doc: str,
                                                    found: str | None) -> None:
    path = tmp_path / "m.py"
    path.write_text(doc, encoding="utf-8")
    assert reason(path) == found
