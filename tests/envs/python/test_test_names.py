"""python-code: the tests' names for modules come by import, never from the program.
MBPP tests use `math` without importing it (the original harness ran them in
the program's namespace); a program that bound `math` to a fake whose methods say yes passed
them. Run on every backend the grader runs on."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from skyhub.envs.python.grader import GradeResult, grade

pytestmark = [pytest.mark.hostile]

#: MBPP's shape: the tests use `math` and the reference imports it.
AREA = {"kind": "asserts", "setup": "", "asserts": [
    "assert math.isclose(area(1), 3.14159, rel_tol=1e-3)",
    "assert math.isclose(area(2), 12.56637, rel_tol=1e-3)",
    "assert math.floor(area(3)) == 28",
]}
AREA_REFERENCE = "import math\ndef area(r):\n    return math.pi * r * r\n"
#: HumanEval's shape: a check function that uses `math` it never imports.
CHECK = {"kind": "check", "entry_point": "area", "code": textwrap.dedent("""\
    def check(candidate):
        assert math.isclose(candidate(1), 3.14159, rel_tol=1e-3)
        assert math.floor(candidate(3)) == 28
    """)}
#: A conventional alias the tests use.
NUMPY = {"kind": "asserts", "setup": "",
         "asserts": ["assert np.allclose(area(1), 3.14159, rtol=1e-3)"]}

_YES = """\
class _Yes:
    def __getattr__(self, name):
        return lambda *a, **k: True
    def __call__(self, *a, **k):
        return True
"""
FAKES = {
    # an object whose every method returns what the tests expect
    "fake_object": "class Fake:\n    def isclose(self, *a, **k):\n        return True\n"
                   "    def floor(self, x):\n        return 28\n    def allclose(self, *a, **k):\n"
                   "        return True\nmath = Fake()\nnp = Fake()\n",
    # a callable one (reported as a function, not a value)
    "callable_fake": _YES + "math = _Yes()\nnp = _Yes()\n",
    # a class (its attributes are functions)
    "fake_class": "class math:\n    isclose = staticmethod(lambda *a, **k: True)\n"
                  "    floor = staticmethod(lambda x: 28)\nclass np:\n"
                  "    allclose = staticmethod(lambda *a, **k: True)\n",
    # a real module under a module's name
    "other_module_as_math": "import types\nmath = types.SimpleNamespace(isclose=lambda *a, **k: "
                            "True, floor=lambda x: 28)\nimport cmath as np\n",
    # a module object of its own making
    "module_object": "import types\nmath = types.ModuleType('math')\n"
                     "math.isclose = lambda *a, **k: True\nmath.floor = lambda x: 28\n"
                     "np = math\n",
}
WRONG = "def area(r):\n    return 0.0\n"


def run(grader: Any, program: str, tests: dict[str, Any]) -> GradeResult:
    sb, python = grader()
    return grade(sb, program, tests, python=python, timeout=10.0)


@pytest.mark.parametrize("fake", sorted(FAKES))
@pytest.mark.parametrize("tests", [AREA, CHECK], ids=["mbpp_asserts", "humaneval_check"])
def test_a_program_s_fake_module_scores_zero(grader: Any, fake: str,
                                             tests: dict[str, Any]) -> None:
    r = run(grader, FAKES[fake] + WRONG, tests)
    assert r.passed == 0 and not r.infra_error, r


@pytest.mark.parametrize("fake", sorted(FAKES))
def test_a_fake_under_a_conventional_alias_scores_zero(grader: Any, fake: str) -> None:
    r = run(grader, FAKES[fake] + WRONG, NUMPY)
    assert r.passed == 0 and not r.infra_error, r


@pytest.mark.parametrize("tests", [AREA, CHECK], ids=["mbpp_asserts", "humaneval_check"])
def test_the_reference_that_imports_the_module_still_passes(grader: Any,
                                                            tests: dict[str, Any]) -> None:
    assert run(grader, AREA_REFERENCE, tests).all_passed
    # the tests get the real module even when the program's copy was changed
    patched = AREA_REFERENCE + "math.isclose = lambda *a, **k: False\n"
    assert run(grader, patched, tests).all_passed


def test_what_programs_bind_to_module_names_legitimately_still_works(grader: Any) -> None:
    program = textwrap.dedent("""\
        import math as m
        import os.path
        from collections import Counter as C
        def array(n):
            return [0] * n
        def string(s):
            return s.upper()
        """)
    tests = {"kind": "asserts", "setup": "", "asserts": [
        "assert array(3) == [0, 0, 0]",  # the program's function, though `array` is stdlib
        "assert string ('ab') == 'AB'",
        "assert m.floor(2.5) == 2 and os.path.basename('/a/b') == 'b'",
        "assert C('aab') == {'a': 2, 'b': 1}",
    ]}
    r = run(grader, program, tests)
    assert r.all_passed, r


def test_a_name_the_program_never_bound_stays_unknown(grader: Any) -> None:
    r = run(grader, "def area(r):\n    return 3.14159 * r * r\n", AREA)
    assert r.passed == 0 and "NameError" in r.error, r
