"""Task, TaskSet and skyhub's JSONL task format."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from skyhub import Task, TaskSet
from skyhub.errors import DataNotFound
from skyhub.task import load_jsonl


def make_tasks(n: int, prefix: str = "t") -> list[Task]:
    return [Task(id=f"{prefix}{i}", prompt=f"question {i}", answer=i, meta={"i": i})
            for i in range(n)]


# ----------------------------------------------------------------------------- Task
def test_task_round_trips_through_dict() -> None:
    task = Task(id="q1", prompt="What is 2+2?", answer=["4", "four"], meta={"split": "dev"})
    assert Task.from_dict(task.to_dict()) == task
    assert Task.from_dict(json.loads(json.dumps(task.to_dict()))) == task


def test_task_from_dict_fills_optional_fields_and_coerces_id() -> None:
    task = Task.from_dict({"id": 7, "prompt": "p"})
    assert task == Task(id="7", prompt="p", answer=None, meta={})


def test_task_is_immutable() -> None:
    task = Task(id="a", prompt="p")
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.id = "b"  # type: ignore[misc]


# ----------------------------------------------------------------------------- TaskSet
def test_taskset_looks_up_tasks_by_id() -> None:
    tasks = TaskSet(make_tasks(4), name="demo")
    assert tasks.get("t2") is tasks[2]
    assert tasks.ids() == ["t0", "t1", "t2", "t3"]
    assert "t3" in tasks
    assert "t9" not in tasks
    assert tasks[1] in tasks
    assert Task(id="zz", prompt="p") not in tasks


def test_taskset_behaves_as_a_sequence() -> None:
    tasks = TaskSet(make_tasks(3))
    assert len(tasks) == 3
    assert [t.id for t in tasks] == ["t0", "t1", "t2"]
    assert tasks[-1].id == "t2"
    assert tasks.index(tasks[1]) == 1
    with pytest.raises(IndexError):
        tasks[3]


def test_taskset_slice_is_a_taskset_with_lookup_and_name() -> None:
    tasks = TaskSet(make_tasks(10), name="demo")
    head = tasks[2:5]
    assert isinstance(head, TaskSet)
    assert head.ids() == ["t2", "t3", "t4"]
    assert head.get("t4").answer == 4
    assert head.name == "demo"
    assert "t5" not in head
    assert tasks[::-3].ids() == ["t9", "t6", "t3", "t0"]


def test_taskset_rejects_duplicate_ids_naming_the_id() -> None:
    tasks = [*make_tasks(3), Task(id="t1", prompt="again")]
    with pytest.raises(ValueError, match=r"duplicate task id 't1'.*demo"):
        TaskSet(tasks, name="demo")


def test_unknown_task_id_error_names_known_ids() -> None:
    tasks = TaskSet(make_tasks(3), name="demo")
    with pytest.raises(KeyError) as e:
        tasks.get("nope")
    message = str(e.value)
    assert "'nope'" in message
    assert all(f"'t{i}'" in message for i in range(3))


def test_unknown_task_id_error_abbreviates_long_task_sets() -> None:
    tasks = TaskSet(make_tasks(12), name="demo")
    with pytest.raises(KeyError, match="and 7 more") as e:
        tasks.get("nope")
    assert "'t4'" in str(e.value)
    assert "'t5'" not in str(e.value)


def test_taskset_accepts_any_iterable_and_freezes_it() -> None:
    source = make_tasks(3)
    tasks = TaskSet(t for t in source)
    source.append(Task(id="late", prompt="p"))
    assert len(tasks) == 3


# ----------------------------------------------------------------------------- load_jsonl
def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def test_load_jsonl_round_trips_tasks_written_with_to_dict(tmp_path: Path) -> None:
    original = [Task(id="a", prompt="¿Cuánto es 2+2?", answer="4", meta={"lang": "es"}),
                Task(id="b", prompt="東京の人口は？", answer={"value": 14}, meta={}),
                Task(id="c", prompt="multi\nline \"quoted\"", answer=None, meta={"n": [1, 2]})]
    path = write_jsonl(tmp_path / "mytasks.jsonl", [t.to_dict() for t in original])
    loaded = load_jsonl(path)
    assert list(loaded) == original
    assert loaded.name == "mytasks"
    assert load_jsonl(str(path), name="custom").name == "custom"


def test_load_jsonl_skips_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('\n{"id": "a", "prompt": "p"}\n   \n{"id": "b", "prompt": "q"}\n\n',
                    encoding="utf-8")
    assert load_jsonl(path).ids() == ["a", "b"]


def test_load_jsonl_missing_file_raises_data_not_found_naming_path(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "tasks.jsonl"
    with pytest.raises(DataNotFound) as e:
        load_jsonl(path)
    assert str(path) in str(e.value)
    assert isinstance(e.value, FileNotFoundError)


def test_load_jsonl_directory_is_not_a_task_file(tmp_path: Path) -> None:
    with pytest.raises(DataNotFound, match=str(tmp_path)):
        load_jsonl(tmp_path)


@pytest.mark.parametrize("bad_line", [
    '{"id": "b", "prompt": ',          # truncated JSON
    '{"id": "b"}',                     # no prompt
    '{"prompt": "p"}',                 # no id
    '["b", "p"]',                      # not an object
    '"just a string"',
    "null",
    '{"id": "b", "prompt": "p", "meta": "not a dict"}',
])
def test_load_jsonl_malformed_line_raises_value_error_naming_file_and_line(
        tmp_path: Path, bad_line: str) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "a", "prompt": "p"}\n\n' + bad_line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"not a task|not valid JSON") as e:
        load_jsonl(path)
    assert f"{path}:3:" in str(e.value)


def test_load_jsonl_rejects_duplicate_ids(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "dups.jsonl", [{"id": "a", "prompt": "p"},
                                                 {"id": "a", "prompt": "q"}])
    with pytest.raises(ValueError, match="duplicate task id 'a'"):
        load_jsonl(path)
