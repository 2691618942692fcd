"""Math grading and task loading for python-math: what an agent's answer must look like to
score, what it may differ in, and that hostile answers cannot crash or stall the reward."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from skyhub.envs.python.math_extract import extract_answer, gold_from_solution
from skyhub.envs.python.math_grade import is_equiv, score
from skyhub.envs.python.math_tasks import BUNDLED_MATH, load_math_tasks
from skyhub.errors import DataNotFound
from skyhub.task import Task, TaskSet

# ---------------------------------------------------------------------------- extraction


@pytest.mark.parametrize(("text", "expected"), [
    ("The answer is <answer>42</answer>.", "42"),
    ("<answer>1</answer> then I changed my mind <answer>2</answer>", "2"),
    ("<answer> $\\frac{1}{2}$ </answer>", "\\frac{1}{2}"),
    ("<answer>so \\boxed{7} it is</answer>", "7"),
    ("<answer>3</answer> and later <answer>  9 ", "9"),  # unclosed trailing tag
    ("<ANSWER>5</ANSWER>", "5"),
    ("so $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
    ("\\boxed{1} first, finally \\boxed{\\sqrt{\\frac{3}{4}}}", "\\sqrt{\\frac{3}{4}}"),
    ("\\fbox{3}", "3"),
    ("so the answer is $\\boxed 5$", "5"),
    ("\\boxed{(1, 2)}", "(1, 2)"),
])
def test_extract_answer_takes_the_last_answer(text: str, expected: str) -> None:
    assert extract_answer(text) == expected


@pytest.mark.parametrize("text", ["", "no answer here", "\\boxed{unclosed", "<answer></answer>",
                                  "\\boxed{}", "</answer>", "\\boxed"])
def test_extract_answer_returns_none_without_an_answer(text: str) -> None:
    assert extract_answer(text) is None


def test_extract_answer_skips_an_unclosed_box_for_an_earlier_complete_one() -> None:
    assert extract_answer("\\boxed{4} and then \\boxed{oops") == "4"


def test_extract_answer_is_fast_on_many_unclosed_boxes() -> None:
    start = time.perf_counter()
    assert extract_answer("\\boxed{" * 20000) is None
    assert time.perf_counter() - start < 1.0


def test_gold_from_solution_reads_math_and_gsm8k() -> None:
    assert gold_from_solution("so $x = \\boxed{\\frac{3}{4}}$.") == "\\frac{3}{4}"
    assert gold_from_solution("\\boxed{1} then \\boxed{2}") == "2"
    assert gold_from_solution("She has 3 + 4 = 7 apples.\n#### 42") == "42"
    assert gold_from_solution("no final answer") is None


# ---------------------------------------------------------------------------- equivalence

EQUIVALENT = [
    ("42", "42"),
    ("42.0", "42"),
    ("0.1", "1e-1"),
    ("1e-3", "0.001"),
    ("3.0000001", "3"),  # within rel 1e-6
    ("1,000", "1000"),
    ("76,127", "76127"),
    ("10{,}000", "10000"),
    ("\\$5", "5"),
    ("$5$", "5"),
    ("50%", "50"),
    ("50\\%", "50"),
    ("\\frac{1}{2}", "0.5"),
    ("\\dfrac{1}{2}", "1/2"),
    ("\\tfrac{1}{2}", "0.5"),
    ("\\frac12", "1/2"),
    ("0.5", "\\frac12"),
    ("-\\frac{1}{2}", "-0.5"),
    ("\\frac{3}{8}", "0.375"),
    ("\\sqrt{2}", "2^{1/2}"),
    ("2\\sqrt{3}", "\\sqrt{12}"),
    ("\\sqrt[3]{8}", "2"),
    ("\\frac{\\sqrt{2}}{2}", "1/\\sqrt{2}"),
    ("2\\pi", "2*pi"),
    ("3 \\cdot 4", "12"),
    ("3\\times 4", "12"),
    ("2^{10}", "1024"),
    ("\\left(1, 2\\right)", "(1,2)"),
    ("5 \\text{ cm}", "5"),
    ("5 cm", "5"),
    ("\\text{Yes}", "yes"),
    ("90^\\circ", "90"),
    ("90^{\\circ}", "90"),
    ("x = 3", "3"),
    ("y = 2x + 1", "2x+1"),
    ("(1, 2)", "(1,2)"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("1, 2, 3", "3, 2, 1"),
    ("[0, 1)", "[0,1)"),
    ("\\left[2, 5\\right)", "[2, 5)"),
    ("(-\\infty, 0) \\cup (1, \\infty)", "(1,\\infty)\\cup(-\\infty,0)"),
    ("yes", "Yes"),
    ("TRUE", "true"),
    ("x^2+2x+1", "(x+1)^2"),
    ("x(x+1)", "x^2+x"),
    ("\\alpha + 1", "1 + \\alpha"),
    ("-2 + e", "e - 2"),
    ("e^{i\\pi}", "-1"),
    ("3+4i", "4i+3"),
    ("10!", "3628800"),
    ("\\binom{5}{2}", "10"),
    ("\\text{(C)}", "C"),
    ("\\boxed{5}", "5"),
    ("3 + 2\\sqrt{3}", "2\\sqrt3+3"),
]


@pytest.mark.parametrize(("pred", "gold"), EQUIVALENT)
def test_equivalent_answers_match(pred: str, gold: str) -> None:
    assert is_equiv(pred, gold)
    assert is_equiv(gold, pred)


NOT_EQUIVALENT = [
    ("1/2", "0.51"),
    ("3.01", "3"),
    ("(1,2)", "(2,1)"),
    ("(1,2)", "[1,2]"),
    ("[0,1)", "[0,1]"),
    ("(1, 2)", "(1, 2, 3)"),
    ("\\{1,2\\}", "\\{1,2,3\\}"),
    ("yes", "no"),
    ("x+1", "x+2"),
    ("x", "3"),
    ("\\pi", "3.14"),
    ("2\\sqrt{3}", "3\\sqrt{2}"),
    ("e - 3", "e - 2"),
    ("\\frac{1}{0}", "1"),
    ("", "1"),
    ("1", ""),
]


@pytest.mark.parametrize(("pred", "gold"), NOT_EQUIVALENT)
def test_different_answers_do_not_match(pred: str, gold: str) -> None:
    assert not is_equiv(pred, gold)
    assert not is_equiv(gold, pred)


@pytest.mark.parametrize("hostile", [
    "9**9**9**9", "9^{9^{9^{9}}}", "(9^9)^(9^9)", "10^{10^{10}}", "2^{2^{2^{2^{2^{2}}}}}",
    "99999999!", "\\binom{10^9}{5 \\cdot 10^8}", "x^{100000}", "1e999999999",
])
def test_huge_numbers_are_refused_quickly(hostile: str) -> None:
    start = time.perf_counter()
    assert is_equiv(hostile, "1") is False
    assert time.perf_counter() - start < 2.0


def test_power_tower_answer_is_false_within_two_seconds() -> None:
    start = time.perf_counter()
    assert is_equiv("9**9**9**9", "1") is False
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize("garbage", [
    "", " ", "\\", "{", "}", "\\frac{", "\\frac{1}{", "\\sqrt[", "(((", ")))", "(,)", "\\{",
    "\\left(", "<answer>", "__import__('os').system('true')", "lambda: 1", "x.__class__",
    "()", "[]", "1/0", "0/0", "=", "==", "a=b=c", "\\unknown{3}", "((" * 300 + "1" + "))" * 300,
    "1" * 5000, "x" * 50000, "\x00", "∞", "−3", None, 3,
])
def test_garbage_never_raises(garbage: object) -> None:
    for pred, gold in ((garbage, "1"), ("1", garbage), (garbage, garbage)):
        assert is_equiv(pred, gold) in (True, False)  # type: ignore[arg-type]
    if isinstance(garbage, str):
        found = extract_answer(garbage)
        assert found is None or isinstance(found, str)


def test_code_injection_is_not_evaluated(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    assert not is_equiv(f"__import__('os').system('touch {marker}')", "0")
    assert not is_equiv(f"open('{marker}', 'w')", "0")
    assert not marker.exists()


def test_score_is_one_or_zero() -> None:
    assert score("\\frac{1}{2}", "0.5") == 1.0
    assert score("0.6", "0.5") == 0.0
    assert score(None, "0.5") == 0.0


def test_score_of_an_extracted_answer() -> None:
    message = "I ran the code: it prints 5736396.\n<answer>5,736,396</answer>"
    assert score(extract_answer(message), "5736396") == 1.0


# ---------------------------------------------------------------------------- bundled tasks


def test_bundled_tasks_load_with_source_and_topic() -> None:
    tasks = load_math_tasks()
    assert isinstance(tasks, TaskSet)
    assert len(tasks) == 20
    for t in tasks:
        assert t.prompt and isinstance(t.answer, str)
        assert t.meta["source"] == "skyhub" and t.meta["topic"]


@pytest.mark.parametrize("task", list(load_math_tasks()), ids=lambda t: t.id)
def test_every_bundled_answer_grades_as_itself(task: Task) -> None:
    assert is_equiv(task.answer, task.answer)
    assert score(extract_answer(f"<answer>{task.answer}</answer>"), task.answer) == 1.0
    assert score(extract_answer(f"so $\\boxed{{{task.answer}}}$"), task.answer) == 1.0


def test_bundled_file_and_license_exist() -> None:
    assert BUNDLED_MATH.is_file()
    license_text = (BUNDLED_MATH.parent / "LICENSE-data.md").read_text(encoding="utf-8")
    assert "CC0" in license_text and "math.jsonl" in license_text


# ---------------------------------------------------------------------------- loaders


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_loads_skyhub_format(tmp_path: Path) -> None:
    p = _write_jsonl(tmp_path / "mine.jsonl", [
        {"id": "a", "prompt": "1+1?", "answer": "2", "meta": {"topic": "arith"}}])
    (t,) = load_math_tasks(p)
    assert (t.id, t.prompt, t.answer, t.meta["topic"]) == ("a", "1+1?", "2", "arith")
    assert t.meta["source"] == "mine"


def test_loads_gsm8k_rows(tmp_path: Path) -> None:
    p = _write_jsonl(tmp_path / "gsm8k_test.jsonl", [
        {"question": "Tom has 70 apples and buys 2. How many?",
         "answer": "70 + 2 = <<70+2=72>>72\n#### 72"},
        {"question": "How many?", "answer": "#### 1,000"}])
    tasks = load_math_tasks(p, split="test")
    assert tasks.ids() == ["gsm8k_test-0", "gsm8k_test-1"]
    assert tasks[0].answer == "72" and tasks[0].prompt.startswith("Tom has")
    assert tasks[0].meta["source"] == "gsm8k_test" and tasks[0].meta["split"] == "test"
    assert is_equiv("1000", tasks[1].answer)


def test_loads_math_rows_with_gold_from_the_solution(tmp_path: Path) -> None:
    p = _write_jsonl(tmp_path / "math.jsonl", [
        {"problem": "Compute $\\frac{1}{2}+\\frac{1}{4}$.",
         "solution": "We get $\\boxed{\\frac{3}{4}}$.", "level": "Level 2", "type": "Algebra"}])
    (t,) = load_math_tasks(p)
    assert t.answer == "\\frac{3}{4}"
    assert t.meta["level"] == "Level 2" and t.meta["type"] == "Algebra"


def test_loads_math500_rows(tmp_path: Path) -> None:
    p = _write_jsonl(tmp_path / "math500.jsonl", [
        {"problem": "What is 2+2?", "solution": "\\boxed{4}", "answer": "4",
         "subject": "Prealgebra", "level": 1, "unique_id": "test/prealgebra/1.json"}])
    (t,) = load_math_tasks(p)
    assert t.id == "test/prealgebra/1.json" and t.answer == "4"
    assert t.meta["subject"] == "Prealgebra" and t.meta["level"] == 1


def test_loads_generic_rows_and_json_lists(tmp_path: Path) -> None:
    p = tmp_path / "generic.json"
    p.write_text(json.dumps([{"question": "q1", "answer": 3},
                             {"problem": "q2", "answer": "(1, 2)"},
                             {"prompt": "q3", "answer": "x"}]), encoding="utf-8")
    tasks = load_math_tasks(str(p))
    assert [t.prompt for t in tasks] == ["q1", "q2", "q3"]
    assert [t.answer for t in tasks] == ["3", "(1, 2)", "x"]
    assert tasks.ids() == ["generic-0", "generic-1", "generic-2"]


def test_missing_file_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(DataNotFound, match="data=PATH"):
        load_math_tasks(tmp_path / "nope.jsonl")


def test_unrecognised_row_names_the_line_and_expected_keys(tmp_path: Path) -> None:
    p = _write_jsonl(tmp_path / "bad.jsonl", [{"question": "ok", "answer": "1"},
                                               {"text": "what?", "label": 3}])
    with pytest.raises(ValueError, match=r"bad\.jsonl:2.*'question', 'answer'"):
        load_math_tasks(p)


def test_math_row_without_a_boxed_answer_is_an_error(tmp_path: Path) -> None:
    p = _write_jsonl(tmp_path / "nobox.jsonl", [{"problem": "p", "solution": "no box"}])
    with pytest.raises(ValueError, match=r"nobox\.jsonl:1.*boxed"):
        load_math_tasks(p)


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "broken.jsonl"
    p.write_text('{"question": "q", "answer": "1"}\n{not json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.jsonl:2"):
        load_math_tasks(p)
