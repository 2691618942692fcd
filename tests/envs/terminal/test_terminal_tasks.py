"""Terminal tasks run for real: setup, verifier and reference solution in a bubblewrap sandbox.

For every generated task (first 30 of seed 0) and every bundled task directory, the verifier
must reject the state setup leaves and accept the state the reference solution leaves: a
verifier that passes untouched would reward doing nothing, one that fails after the solution
could never be satisfied. Without bwrap these tests skip, unless SKYHUB_REQUIRE_BWRAP=1.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import pytest

import skyhub.sandbox
from skyhub.envs.terminal import synth
from skyhub.envs.terminal.tasks import BUNDLED_DIR, load_task_dir, load_tasks
from skyhub.errors import DataNotFound
from skyhub.sandbox import Sandbox, Snapshot
from skyhub.task import Task

GENERATED = synth.generate(0, 30)
BUNDLED = list(load_tasks(BUNDLED_DIR))


@pytest.fixture(scope="module")
def sandbox(bwrap: str) -> Iterator[tuple[Sandbox, Snapshot]]:
    sb = skyhub.sandbox.create(backend="local")
    try:
        yield sb, sb.snapshot()
    finally:
        sb.close()


def _bash(sb: Sandbox, script: str, what: str, task: Task) -> int:
    r = sb.exec(["bash", "-c", script], timeout=30)
    assert not r.timed_out, f"{task.id}: {what} timed out"
    print(f"{what}: exit {r.exit_code}\n{r.stdout}{r.stderr}")  # shown when a test fails
    return r.exit_code


def _check(sandbox: tuple[Sandbox, Snapshot], task: Task) -> None:
    sb, snap = sandbox
    sb.restore(snap)
    assert _bash(sb, task.meta["setup"], "setup", task) == 0, f"{task.id}: setup failed"
    assert _bash(sb, task.meta["verify"], "verify", task) != 0, \
        f"{task.id}: the verifier accepts the untouched setup state"
    sb.restore(snap)
    assert _bash(sb, task.meta["setup"], "setup", task) == 0
    assert _bash(sb, task.answer, "solution", task) == 0, f"{task.id}: the solution failed"
    assert _bash(sb, task.meta["verify"], "verify", task) == 0, \
        f"{task.id}: the verifier rejects the reference solution"


@pytest.mark.parametrize("task", GENERATED, ids=lambda t: t.id)
def test_generated_task_fails_untouched_and_passes_after_solution(sandbox, task: Task) -> None:
    _check(sandbox, task)


@pytest.mark.parametrize("task", BUNDLED, ids=lambda t: t.id)
def test_bundled_task_fails_untouched_and_passes_after_solution(sandbox, task: Task) -> None:
    _check(sandbox, task)


# -- the generator ----------------------------------------------------------------------------
def test_same_seed_gives_identical_tasks() -> None:
    assert synth.generate(0, 30) == GENERATED
    assert list(islice(synth.task_stream(0), 30)) == GENERATED


def test_different_seeds_give_different_tasks() -> None:
    other = synth.generate(1, 30)
    assert [t.prompt for t in other] != [t.prompt for t in GENERATED]
    def scripts(t: Task) -> tuple[str, str]:
        return t.meta["setup"], t.meta["verify"]

    assert {scripts(t) for t in other}.isdisjoint(scripts(t) for t in GENERATED)


def test_first_30_cover_every_family_and_most_templates() -> None:
    assert {t.meta["family"] for t in GENERATED} == set(synth.FAMILIES)
    templates = {f.__name__ for fs in synth.TEMPLATES.values() for f in fs}
    assert len(templates) >= 12
    assert len({t.meta["template"] for t in synth.generate(0, 120)}) == len(templates)


def test_ids_are_unique_and_name_seed_index_family() -> None:
    tasks = synth.generate(5, 60)
    assert len({t.id for t in tasks}) == 60
    assert all(t.id == f"synth-5-{i}-{t.meta['family']}" for i, t in enumerate(tasks))


def test_meta_has_what_the_env_needs() -> None:
    for t in GENERATED[:6]:
        assert {"setup", "verify", "family", "timeout_s", "source"} <= t.meta.keys()
        assert t.meta["timeout_s"] > 0 and isinstance(t.answer, str)


# -- the directory loader ---------------------------------------------------------------------
def _write_task(d: Path, **files: str) -> Path:
    d.mkdir(parents=True)
    for name, text in files.items():
        (d / name.replace("_", ".")).write_text(text)
    return d


def test_bundled_tasks_load_with_their_config() -> None:
    ts = load_tasks(BUNDLED_DIR)
    assert ts.ids() == ["count-words", "fix-script", "hello-file"]
    hello = ts.get("hello-file")
    assert hello.meta["timeout_s"] == 120.0 and hello.meta["difficulty"] == "easy"
    assert hello.meta["setup"] and hello.meta["verify"] and hello.answer


def test_loader_takes_a_single_task_dir_and_fills_defaults(tmp_path: Path) -> None:
    d = _write_task(tmp_path / "t1", instruction_md="Do it.\n", verify_sh="exit 0\n")
    ts = load_tasks(d)
    assert ts.ids() == ["t1"]
    t = ts[0]
    assert t.prompt == "Do it.\n" and t.answer is None
    assert t.meta["setup"] == "" and t.meta["timeout_s"] == 600.0


def test_loader_skips_dirs_without_instruction_and_sorts(tmp_path: Path) -> None:
    _write_task(tmp_path / "b", instruction_md="B", verify_sh="exit 0")
    _write_task(tmp_path / "a", instruction_md="A", verify_sh="exit 0")
    _write_task(tmp_path / "assets", data_txt="not a task")
    assert load_tasks(tmp_path).ids() == ["a", "b"]


def test_missing_verify_is_an_error_naming_dir_and_file(tmp_path: Path) -> None:
    d = _write_task(tmp_path / "broken", instruction_md="Do it.")
    with pytest.raises(ValueError, match=r"broken.*verify\.sh"):
        load_task_dir(d)
    with pytest.raises(ValueError, match=r"verify\.sh"):
        load_tasks(tmp_path)


def test_no_tasks_is_data_not_found_saying_what_a_task_needs(tmp_path: Path) -> None:
    with pytest.raises(DataNotFound, match=r"instruction\.md and verify\.sh"):
        load_tasks(tmp_path)
    with pytest.raises(DataNotFound, match="does not exist"):
        load_tasks(tmp_path / "nope")


def test_bad_task_toml_is_an_error_naming_the_file(tmp_path: Path) -> None:
    d = _write_task(tmp_path / "t", instruction_md="x", verify_sh="exit 0",
                    task_toml="[agent]\ntimeout_sec = -1\n")
    with pytest.raises(ValueError, match=r"task\.toml.*timeout_sec"):
        load_task_dir(d)
    (d / "task.toml").write_text("[agent\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_task_dir(d)
