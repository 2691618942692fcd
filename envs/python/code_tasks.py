"""Coding tasks for `python-code`: the bundled set and the public formats, as one `TaskSet`.

Every row becomes `Task(id, prompt, answer, meta)` where `answer` is a reference program (None
when the dataset has none, as LiveCodeBench) and `meta["tests"]` is what
`skyhub.envs.python.grader.grade` runs, one of:

    {"kind": "asserts", "setup": str, "asserts": [str, ...]}            MBPP
    {"kind": "check", "code": str, "entry_point": str}                 HumanEval
    {"kind": "stdio", "cases": [{"input": str, "output": str}, ...]}   LiveCodeBench, stdin
    {"kind": "functional", "method": str,                               LiveCodeBench, LeetCode
     "cases": [{"input": str, "output": str}, ...]}

(functional: `input` is one JSON argument per line, `output` is JSON; the program defines
`class Solution` with that method). `meta["source"]` names the dataset. Rows of different
formats may share a file; the format is told by its keys.
"""

from __future__ import annotations

import ast
import base64
import io
import json
import pickle
import re
import zlib
from pathlib import Path
from typing import Any

from skyhub.errors import DataNotFound, UsageError
from skyhub.task import Task, TaskSet, read_rows

BUNDLED = Path(__file__).resolve().parent / "data" / "code.jsonl"
KINDS = ("asserts", "check", "stdio", "functional")
MAX_DECOMPRESSED = 1 << 30  # bytes: LiveCodeBench's largest private test sets are ~100 MB

_EXPECTED_KEYS = ("skyhub {'id', 'prompt', 'meta': {'tests'}}; MBPP {'task_id', 'text', "
                  "'code', 'test_list'}; HumanEval {'task_id', 'prompt', 'canonical_solution', "
                  "'test', 'entry_point'}; LiveCodeBench {'question_id', 'question_content', "
                  "'public_test_cases'}")


def load_code_tasks(data: str | Path | None = None, split: str | None = None) -> TaskSet:
    """The tasks in `data` (a JSONL file, or a directory holding `<split>.jsonl` or a single
    `*.jsonl`); None is the bundled set. `split` keeps the tasks whose `meta["split"]` is
    `split` (MBPP rows get theirs from the official task_id ranges, HumanEval rows "test"),
    unless it already chose a directory's file."""
    path, split_chose_file = _resolve(data, split)
    tasks = [task_from_row(row, where=f"{path}:{lineno}") for lineno, row in read_rows(path)]
    if split is not None and not split_chose_file:
        kept = [t for t in tasks if t.meta.get("split") == split]
        if not kept:
            seen = sorted({str(t.meta["split"]) for t in tasks if "split" in t.meta})
            raise UsageError(f"no task of split {split!r} in {path} (splits there: "
                             f"{', '.join(seen) or 'none'}); pass split=None for all of them")
        tasks = kept
    name = "python-code" if data is None else path.stem
    return TaskSet(tasks, name=name if split is None else f"{name}-{split}")


def _resolve(data: str | Path | None, split: str | None) -> tuple[Path, bool]:
    """The JSONL file to read, and whether `split` picked it (then it is not a filter)."""
    if data is None:
        if not BUNDLED.is_file():
            raise DataNotFound(f"the bundled coding tasks {BUNDLED} are missing (a broken "
                               "install?); reinstall skyhub or pass data=PATH to a JSONL file")
        return BUNDLED, False
    p = Path(data).expanduser()
    if p.is_file():
        return p, False
    if p.is_dir():
        if split is not None and (p / f"{split}.jsonl").is_file():
            return p / f"{split}.jsonl", True
        found = sorted(p.glob("*.jsonl"))
        if len(found) == 1:
            return found[0], False
        raise DataNotFound(f"{p} holds {len(found)} .jsonl files "
                           f"({', '.join(f.name for f in found[:5]) or 'none'}); pass "
                           "data=<one of them>" + ("" if split else " or split=<file stem>"))
    raise DataNotFound(f"coding tasks not found at {p}. Pass data= a JSONL file (skyhub, MBPP, "
                       "HumanEval or LiveCodeBench rows) or a directory holding one, or "
                       "data=None for the bundled tasks")


def task_from_row(row: Any, *, where: str = "<row>") -> Task:
    """One row of any supported format as a Task; ValueError naming `where` and the keys each
    format needs when the row is none of them."""
    if not isinstance(row, dict):
        raise UsageError(f"{where}: a row must be a JSON object, got {type(row).__name__}; "
                         f"expected one of: {_EXPECTED_KEYS}")
    try:
        if "id" in row and isinstance(row.get("meta"), dict) and "tests" in row["meta"]:
            return _skyhub(row)
        if "test_list" in row:
            return _mbpp(row)
        if "canonical_solution" in row or {"test", "entry_point"} <= row.keys():
            return _humaneval(row)
        if "question_content" in row:
            return _livecodebench(row)
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"{where}: malformed row ({type(e).__name__}: {e}); expected one of: "
                         f"{_EXPECTED_KEYS}") from None
    raise UsageError(f"{where}: unrecognised row with keys {sorted(row)[:8]}; expected one of: "
                     f"{_EXPECTED_KEYS}")


def validate_tests(tests: Any) -> dict[str, Any]:
    """`tests` if it has one of the shapes the grader runs; ValueError saying what is wrong."""
    if not isinstance(tests, dict) or tests.get("kind") not in KINDS:
        kind = tests.get("kind") if isinstance(tests, dict) else tests
        raise UsageError(f"meta.tests.kind is {kind!r}, expected one of {KINDS}")
    kind = tests["kind"]

    def strings(value: Any, what: str) -> None:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UsageError(f"{kind} tests need {what} as a list of strings")

    if kind == "asserts":
        strings(tests.get("asserts"), "'asserts'")
        if not isinstance(tests.get("setup", ""), str):
            raise UsageError("asserts tests need 'setup' as a string")
    elif kind == "check":
        if not isinstance(tests.get("code"), str) or not isinstance(tests.get("entry_point"),
                                                                      str):
            raise UsageError("check tests need 'code' and 'entry_point' as strings")
    else:
        cases = tests.get("cases")
        if not isinstance(cases, list) or not all(
                isinstance(c, dict) and isinstance(c.get("input"), str)
                and isinstance(c.get("output"), str) for c in cases):
            raise UsageError(f"{kind} tests need 'cases' as a list of "
                             "{'input': str, 'output': str}")
        if kind == "functional" and not isinstance(tests.get("method"), str):
            raise UsageError("functional tests need 'method' as a string")
    return tests


def _skyhub(row: dict[str, Any]) -> Task:
    task = Task.from_dict(row)
    validate_tests(task.meta["tests"])
    return task


# -- MBPP ----------------------------------------------------------------------------------
def _mbpp_split(task_id: int) -> str:
    """The official MBPP split of a task id (prompt 1-10, test 11-510, validation 511-600,
    train 601-974)."""
    if task_id <= 10:
        return "prompt"
    if task_id <= 510:
        return "test"
    return "validation" if task_id <= 600 else "train"


def _mbpp(row: dict[str, Any]) -> Task:
    text = row.get("text", row.get("prompt"))  # the sanitized variant calls it "prompt"
    if not isinstance(text, str):
        raise KeyError("text")
    asserts = [str(a) for a in row["test_list"]]
    setup = row.get("test_setup_code", "")
    if isinstance(setup, list):
        setup = "\n".join(setup)
    imports = row.get("test_imports") or []  # sanitized MBPP
    setup = "\n".join([*map(str, imports), str(setup or "")]).strip("\n")
    code = str(row["code"]).replace("\r\n", "\n")
    prompt = (f"{text.strip()}\nYour code should pass these tests:\n\n" + "\n".join(asserts))
    meta: dict[str, Any] = {"tests": {"kind": "asserts", "setup": setup, "asserts": asserts},
                            "source": "mbpp"}
    entry = _entry_point(code, asserts)
    if entry:
        meta["entry_point"] = entry
    task_id = row["task_id"]
    if isinstance(task_id, int):
        meta["split"] = _mbpp_split(task_id)
    return Task(id=f"mbpp/{task_id}", prompt=prompt, answer=code, meta=meta)


def _entry_point(code: str, asserts: list[str]) -> str | None:
    """The reference's top-level function that the tests call (None when unclear)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    tests = "\n".join(asserts)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and re.search(rf"\b{node.name}\s*\(", tests):
            return node.name
    return None


# -- HumanEval -----------------------------------------------------------------------------
def _humaneval(row: dict[str, Any]) -> Task:
    stub, entry = str(row["prompt"]), str(row["entry_point"])
    prompt = ("Complete the following Python function. Reply with the whole program: the "
              f"imports, the signature and the body of `{entry}`.\n\n```python\n{stub}```")
    return Task(id=str(row["task_id"]), prompt=prompt,
                answer=stub + str(row.get("canonical_solution") or ""),
                meta={"tests": {"kind": "check", "code": str(row["test"]), "entry_point": entry},
                      "source": "humaneval", "entry_point": entry, "split": "test"})


# -- LiveCodeBench -------------------------------------------------------------------------
class _StringsOnly(pickle.Unpickler):
    """An unpickler that builds no objects: LiveCodeBench's compressed test cases are a
    pickled JSON string, and anything that names a class or function (the way a malicious
    pickle runs code) is refused before it is looked up."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: test cases must be a "
                                     "pickled string")


def decode_test_cases(value: Any) -> list[dict[str, Any]]:
    """LiveCodeBench's test cases: a JSON list, a JSON string of one, or
    base64(zlib(pickle(JSON string))) as in its private_test_cases."""
    if isinstance(value, list):
        return value
    if not value:
        return []
    text = str(value)
    try:
        cases = json.loads(text)
    except ValueError:
        cases = json.loads(_unpickle_string(text))
    if not isinstance(cases, list):
        raise UsageError(f"test cases must be a list, got {type(cases).__name__}")
    return cases


def _unpickle_string(text: str) -> str:
    """The JSON string inside base64(zlib(pickle(...))), unpickled without building objects."""
    try:
        d = zlib.decompressobj()
        data = d.decompress(base64.b64decode(text, validate=False), MAX_DECOMPRESSED)
        too_big = bool(d.unconsumed_tail)
        obj = None if too_big else _StringsOnly(io.BytesIO(data)).load()
    except Exception as e:  # binascii/zlib/Unpickling errors, EOF, a malformed pickle
        raise UsageError(f"test cases are neither JSON nor base64(zlib(pickle)) "
                         f"({type(e).__name__}: {e})") from None
    if too_big:
        raise UsageError(f"compressed test cases exceed {MAX_DECOMPRESSED} bytes")
    if isinstance(obj, bytes):
        obj = obj.decode("utf-8")
    if not isinstance(obj, str):
        raise UsageError(f"compressed test cases hold a {type(obj).__name__}, expected a "
                         "JSON string")
    return obj


def _livecodebench(row: dict[str, Any]) -> Task:
    public = decode_test_cases(row.get("public_test_cases"))
    private = decode_test_cases(row.get("private_test_cases"))
    cases = public + private
    if not cases:
        raise UsageError("no test cases")
    testtype = cases[0].get("testtype", "stdin")
    pairs = [{"input": str(c["input"]), "output": str(c["output"])} for c in cases]
    qid = row.get("question_id") or row.get("question_title")
    if not qid:
        raise KeyError("question_id")
    content = str(row["question_content"]).strip()
    starter = str(row.get("starter_code") or "")
    meta: dict[str, Any] = {"source": "livecodebench", "n_public": len(public)}
    for key in ("difficulty", "platform", "contest_date", "question_title"):
        if row.get(key):
            meta[key] = row[key]
    if testtype == "functional":
        method = _method_name(row, starter)
        meta["tests"] = {"kind": "functional", "method": method, "cases": pairs}
        meta["entry_point"] = method
        prompt = (f"{content}\n\nWrite a Python program that defines `class Solution` with "
                  f"the method `{method}`, starting from:\n\n```python\n{starter.strip()}\n```")
    else:
        meta["tests"] = {"kind": "stdio", "cases": pairs}
        prompt = (f"{content}\n\nWrite a Python program that reads the input from standard "
                  "input and writes the answer to standard output.")
    return Task(id=f"lcb/{qid}", prompt=prompt, answer=None, meta=meta)


def _method_name(row: dict[str, Any], starter: str) -> str:
    metadata = row.get("metadata")
    if isinstance(metadata, str) and metadata.strip():
        try:
            metadata = json.loads(metadata)
        except ValueError:
            metadata = None
    if isinstance(metadata, dict) and isinstance(metadata.get("func_name"), str):
        return metadata["func_name"]
    m = re.search(r"def\s+(\w+)\s*\(\s*self", starter)
    if not m:
        raise UsageError("functional test cases but no method name in starter_code or "
                         "metadata.func_name")
    return m.group(1)


__all__ = ["BUNDLED", "KINDS", "decode_test_cases", "load_code_tasks", "task_from_row",
           "validate_tests"]
