"""Planted bugs: every kind found, each a real change of one function, its patches exact
(checked with `git apply`), and the gold patch localized to the function it broke."""

from __future__ import annotations

import ast
import random
import subprocess
from collections import Counter
from pathlib import Path

from skyhub.envs.swe.diffs import parse_patch
from skyhub.envs.swe.localization import patch_locations
from skyhub.envs.swe.mutations import KINDS, mutations, sample

SOURCE = '''\
"""A module with a bit of everything."""

LIMIT = 10  # module level: never mutated


def clamp(x, lo, hi):
    if x < lo:
        return lo
    return min(x, hi) if x > lo else lo


class Stack:
    def __init__(self):
        self.items = []

    def push(self, x):
        self.items.append(x)
        self.size = len(self.items)

    def top(self):
        return self.items[-1] if self.items and True else None

    def window(self, n):
        out = []
        for i in range(0, n):
            out.append(self.items[i] * 2 + 1)
        return out[1:n]

    def empty(self):
        return len(self.items) == 0


def ratio(a, b):
    s = "ünïcode"; t = s  # two statements on one line: never dropped
    while a % b != 0 and b is not None:
        a, b = b, a // b
    return divmod(a, b) if a in (1, 2) else True


def is_small(x):
    if x < 3:
        return True
    return False
'''


def test_every_kind_is_found_and_each_is_a_real_change() -> None:
    found = list(mutations(SOURCE, "pkg/mod.py"))
    kinds = Counter(m.kind for m in found)
    assert set(kinds) == set(KINDS), kinds
    original = ast.dump(ast.parse(SOURCE))
    for m in found:
        assert ast.dump(ast.parse(m.source)) != original
        assert m.function in {"clamp", "Stack.__init__", "Stack.push", "Stack.top",
                              "Stack.window", "Stack.empty", "ratio", "is_small"}
        # only the site changed: the rest of the file is as it was
        old, new = SOURCE.splitlines(), m.source.splitlines()
        if m.kind == "drop":
            assert new == old[:m.line - 1] + old[m.line - 1 + m.before.count("\n"):]
        else:
            assert [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b] \
                == [m.line - 1]
            assert m.before in old[m.line - 1] and m.after in new[m.line - 1]
        assert "LIMIT = 10" in m.source
    assert not any(m.kind == "drop" and "ünïcode" in m.before for m in found)
    sites = {(m.kind, m.before, m.after) for m in found}
    assert ("operator", "x < lo", "x <= lo") in sites
    assert ("condition", "x < lo", "not (x < lo)") in sites
    assert ("off_by_one", "0", "1") in sites and ("off_by_one", "-1", "0") in sites
    assert ("swap_args", "min(x, hi)", "min(hi, x)") in sites
    assert ("return", "True", "False") in sites and ("return", "out[1:n]", "None") in sites
    assert ("operator", "a // b", "a * b") in sites
    assert not any(m.before == "10" for m in found)  # LIMIT's 10 is module level


def test_patches_apply_as_git_applies_them(tmp_path: Path) -> None:
    for cmd in (["init", "-q"],):
        subprocess.run(["git", *cmd], cwd=tmp_path, check=True)
    (tmp_path / "pkg").mkdir()
    for m in mutations(SOURCE, "pkg/mod.py"):
        (tmp_path / "pkg/mod.py").write_text(SOURCE)
        bug = m.bug_patch(SOURCE)
        (tmp_path / "bug.diff").write_text(bug)
        subprocess.run(["git", "apply", "bug.diff"], cwd=tmp_path, check=True)
        assert (tmp_path / "pkg/mod.py").read_text() == m.source
        fix = m.fix_patch(SOURCE)
        (tmp_path / "fix.diff").write_text(fix)
        subprocess.run(["git", "apply", "fix.diff"], cwd=tmp_path, check=True)
        assert (tmp_path / "pkg/mod.py").read_text() == SOURCE
        [fd] = parse_patch(fix)  # our reader agrees with git
        assert fd.apply(m.source) == SOURCE


def test_the_gold_patch_is_localized_to_the_broken_function() -> None:
    for m in mutations(SOURCE, "pkg/mod.py"):
        gold = patch_locations(m.fix_patch(SOURCE), lambda p, m=m: m.source)
        name = m.function.removesuffix(".__init__")
        assert gold.entities == {f"pkg/mod.py:{name}"}, (m.kind, m.before)


def test_sampling_is_seeded() -> None:
    a = sample(SOURCE, "pkg/mod.py", 5, random.Random(3))
    b = sample(SOURCE, "pkg/mod.py", 5, random.Random(3))
    c = sample(SOURCE, "pkg/mod.py", 5, random.Random(4))
    assert a == b and a != c and len(a) == 5
    only = sample(SOURCE, "pkg/mod.py", 100, random.Random(0), kinds=("swap_args",))
    assert only and all(m.kind == "swap_args" for m in only)
    assert list(mutations("def f(:\n", "bad.py")) == []
