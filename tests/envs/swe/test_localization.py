"""Localization scores (CodeScout's levels and F1) on crafted patches and answers, and the
patch reader they rest on, checked against `git apply` on a real repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from skyhub.envs.swe.diffs import parse_patch
from skyhub.envs.swe.localization import Locations, parse_answer, patch_locations, score
from skyhub.errors import UsageError

CALC = '''\
import math


class Calculator:
    """Adds and divides."""

    precision = 2

    def __init__(self, scale=1):
        self.scale = scale

    def add(self, a, b):
        return round((a + b) * self.scale, self.precision)

    @staticmethod
    def divide(a, b):
        def check(x):
            if x == 0:
                raise ZeroDivisionError("b is 0")
        check(b)
        return a / b


def mean(xs):
    return sum(xs) / len(xs)


TAU = 2 * math.pi
'''

UTIL = '''\
def clamp(x, lo, hi):
    return max(lo, min(x, hi))
'''


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository holding the two files above."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/calc.py").write_text(CALC)
    (tmp_path / "pkg/util.py").write_text(UTIL)
    (tmp_path / "README.md").write_text("calc\n")
    for cmd in (["init", "-q"], ["add", "."],
                ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]):
        subprocess.run(["git", *cmd], cwd=tmp_path, check=True)
    return tmp_path


def edit(repo: Path, changes: dict[str, str | None]) -> str:
    """The `git diff` of `changes` (path -> new text, None: delete), then the tree reset."""
    for path, text in changes.items():
        if text is None:
            (repo / path).unlink()
        else:
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    diff = subprocess.run(["git", "diff", "--cached"], cwd=repo, check=True,
                          capture_output=True, text=True).stdout
    subprocess.run(["git", "reset", "-q", "--hard"], cwd=repo, check=True)
    return diff


def gold(repo: Path, changes: dict[str, str | None]) -> Locations:
    return patch_locations(edit(repo, changes), lambda p: (repo / p).read_text()
                           if (repo / p).exists() else None)


def test_patch_reader_rebuilds_every_new_file_as_git_does(repo: Path) -> None:
    changes = {"pkg/calc.py": CALC.replace("a / b", "a // b").replace("import math\n", "")
               + "\n\ndef extra():\n    return 1\n",
               "pkg/util.py": None, "pkg/new.py": "X = 1\n", "README.md": "calc\nmore\n"}
    diff = edit(repo, changes)
    files = {f.path: f for f in parse_patch(diff)}
    assert set(files) == {"pkg/calc.py", "pkg/util.py", "pkg/new.py", "README.md"}
    assert files["pkg/util.py"].new_path is None and files["pkg/new.py"].old_path is None
    for path in ("pkg/calc.py", "pkg/new.py", "README.md"):
        old = (repo / path).read_text() if (repo / path).exists() else ""
        assert files[path].apply(old) == changes[path]
    calc = files["pkg/calc.py"]
    assert calc.removed_lines() == [1, 21]  # `import math`, `return a / b`
    new_lines = changes["pkg/calc.py"].splitlines()
    assert [new_lines[n - 1] for n in calc.added_lines()] == [
        "        return a // b", "", "", "def extra():", "    return 1"]


def test_a_patch_that_does_not_fit_is_refused(repo: Path) -> None:
    diff = edit(repo, {"pkg/util.py": UTIL.replace("max", "min")})
    with pytest.raises(UsageError, match="does not match"):
        parse_patch(diff)[0].apply(UTIL.replace("return", "yield"))


def test_a_method_a_nested_helper_and_a_function(repo: Path) -> None:
    # a line in a helper nested in a method counts as the method
    g = gold(repo, {"pkg/calc.py": CALC.replace("if x == 0", "if not x")
                    .replace("sum(xs)", "sum(xs, 0.0)")})
    assert g.files == {"pkg/calc.py"}
    assert g.entities == {"pkg/calc.py:Calculator.divide", "pkg/calc.py:mean"}
    assert g.modules == {"pkg/calc.py:Calculator"}  # mean is not a class


def test_class_body_init_decorators_and_module_level(repo: Path) -> None:
    g = gold(repo, {"pkg/calc.py": CALC.replace("precision = 2", "precision = 3")
                    .replace("self.scale = scale", "self.scale = float(scale)")
                    .replace("    @staticmethod\n", "    @classmethod\n")
                    .replace("2 * math.pi", "math.tau")})
    # the class body and __init__ both stand for the class; the decorator is divide's;
    # TAU is module level: the file only
    assert g.entities == {"pkg/calc.py:Calculator", "pkg/calc.py:Calculator.divide"}
    assert g.modules == {"pkg/calc.py:Calculator"}


def test_added_and_deleted_code_counts_where_it_lives(repo: Path) -> None:
    g = gold(repo, {"pkg/calc.py": CALC + "\n\ndef median(xs):\n    return sorted(xs)[0]\n",
                    "pkg/util.py": None})
    assert g.entities == {"pkg/calc.py:median", "pkg/util.py:clamp"}
    assert g.files == {"pkg/calc.py", "pkg/util.py"} and not g.modules
    docs = gold(repo, {"README.md": "other\n"})
    assert docs == Locations(frozenset({"README.md"}))


ANSWER = """```
pkg/calc.py
class: Calculator
function: divide

pkg/calc.py
function: mean
method: Calculator.add
```"""


def test_the_answer_format() -> None:
    a = parse_answer(ANSWER)
    assert a.files == {"pkg/calc.py"}
    assert a.entities == {"pkg/calc.py:Calculator.divide", "pkg/calc.py:mean",
                          "pkg/calc.py:Calculator.add"}
    assert a.modules == {"pkg/calc.py:Calculator"}
    # a blank line ends the class; a function before any file and a class alone name nothing
    b = parse_answer("function: lost\npkg/a.py\nclass: A\nfunction: f\n\nfunction: g\n"
                     "pkg/b.py\nclass: B\n")
    assert b.entities == {"pkg/a.py:A.f", "pkg/a.py:g"}
    assert b.files == {"pkg/a.py", "pkg/b.py"} and b.modules == {"pkg/a.py:A"}
    assert parse_answer("method: Calculator.__init__\n") == Locations()
    init = parse_answer("pkg/calc.py\nclass: Calculator\nfunction: __init__()\n")
    assert init.entities == {"pkg/calc.py:Calculator"}


def test_crafted_predictions_score_as_expected(repo: Path) -> None:
    g = gold(repo, {"pkg/calc.py": CALC.replace("a / b", "a // b")})  # Calculator.divide
    both_right = score(parse_answer("pkg/calc.py\nclass: Calculator\nfunction: divide\n"), g)
    assert both_right["reward"] == 1.0
    assert all(both_right[f"{lv}_f1"] == 1.0 for lv in ("file", "module", "entity"))

    wrong_function = score(parse_answer("pkg/calc.py\nfunction: mean\n"), g)
    assert wrong_function["file_precision"] == wrong_function["file_recall"] == 1.0
    assert wrong_function["entity_precision"] == wrong_function["entity_recall"] == 0.0
    assert wrong_function["module_f1"] == 0.0  # gold has a class, the answer none
    assert wrong_function["reward"] == pytest.approx(1 / 3)

    unrelated = score(parse_answer("pkg/util.py\nfunction: clamp\n"), g)
    assert unrelated["reward"] == 0.0

    # the right location among wrong ones: recall 1, precision 1/2 (files), 1/3 (entities)
    extra = score(parse_answer("pkg/calc.py\nclass: Calculator\nfunction: divide\n"
                               "function: add\n\npkg/util.py\nfunction: clamp\n"), g)
    assert (extra["file_precision"], extra["file_recall"]) == (0.5, 1.0)
    assert (extra["entity_precision"], extra["entity_recall"]) == (pytest.approx(1 / 3), 1.0)
    assert extra["entity_f1"] == pytest.approx(0.5)
    assert extra["module_f1"] == 1.0

    # a fix touching no class: modules are perfect only when none is named
    g2 = gold(repo, {"pkg/util.py": UTIL.replace("max", "min")})
    assert score(parse_answer("pkg/util.py\nfunction: clamp\n"), g2)["reward"] == 1.0
    named_class = score(parse_answer("pkg/util.py\nclass: X\nfunction: clamp\n"), g2)
    assert named_class["module_f1"] == 0.0
    # (so an empty answer gets the module level's 1.0 there, as CodeScout scores it)
    empty = score(Locations(), g2)
    assert (empty["file_f1"], empty["module_f1"], empty["entity_f1"]) == (0.0, 1.0, 0.0)
    weighted = score(parse_answer("pkg/calc.py\nfunction: mean\n"), g, weights=(1, 0, 0))
    assert weighted["reward"] == 1.0


def test_edits_score_like_answers(repo: Path) -> None:
    """An agent's edits (its working tree's diff) are located as the gold patch is."""
    g = gold(repo, {"pkg/calc.py": CALC.replace("a / b", "a // b")})
    agent = gold(repo, {"pkg/calc.py": CALC.replace("raise ZeroDivisionError",
                                                    "raise ValueError")
                        .replace("self.precision)", "3)")})
    s = score(agent, g)
    assert (s["entity_precision"], s["entity_recall"]) == (0.5, 1.0)
    assert s["file_f1"] == 1.0 and s["module_f1"] == 1.0
