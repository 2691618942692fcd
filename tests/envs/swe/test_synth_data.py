"""swe-synth from a real project: its pinned sdist comes from PyPI and is checked, tasks are
made by running its own tests in a sandbox, each task's FAIL_TO_PASS fails with the bug and
passes with the gold patch (the oracle resolves it in the env, doing nothing does not), and
the same seed makes the same tasks."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

import skyhub
from skyhub.envs.swe.env import SWEEnv
from skyhub.envs.swe.instances import load_instances
from skyhub.envs.swe.synth_data import PROJECTS, fetch, make_tasks, sources, to_record
from skyhub.errors import ChecksumMismatch, DataNotFound


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("swe-synth") / "repos"
    fetch(PROJECTS["inflection"], root)
    return root


def test_fetch_unpacks_the_pinned_sdist_once(repos: Path) -> None:
    tree = repos / "inflection"
    assert (tree / "inflection" / "__init__.py").is_file()
    assert (tree / "test_inflection.py").is_file()
    assert list(sources(PROJECTS["inflection"], tree)) == ["inflection/__init__.py"]
    stamp = (repos / ".inflection.sha256").stat().st_mtime_ns
    assert fetch(PROJECTS["inflection"], repos) == tree  # already there: nothing fetched
    assert (repos / ".inflection.sha256").stat().st_mtime_ns == stamp


def test_a_download_that_does_not_match_is_refused(repos: Path, tmp_path: Path) -> None:
    fake = tmp_path / "inflection-0.5.1.tar.gz"
    with tarfile.open(fake, "w:gz") as tar:
        tar.add(repos / "inflection" / "setup.py", arcname="inflection-0.5.1/setup.py")
    with pytest.raises(ChecksumMismatch, match="nothing was unpacked"):
        fetch(PROJECTS["inflection"], tmp_path / "out", url=fake.as_uri())
    assert not (tmp_path / "out" / "inflection").exists()


@pytest.fixture(scope="module")
def tasks(repos: Path, local_backend: str) -> list:
    return list(make_tasks(PROJECTS["inflection"], repos / "inflection", n=4, seed=3,
                           backend=local_backend))


def test_tasks_are_seeded_and_well_formed(tasks: list, repos: Path, local_backend: str) -> None:
    assert len(tasks) == 4
    again = list(make_tasks(PROJECTS["inflection"], repos / "inflection", n=2, seed=3,
                            backend=local_backend))
    assert [(t.instance_id, t.patch) for t in again] == [(t.instance_id, t.patch)
                                                        for t in tasks[:2]]
    for t in tasks:
        assert t.fail_to_pass and len(t.pass_to_pass) > 100
        assert not set(t.fail_to_pass) & set(t.pass_to_pass)
        assert "inflection/__init__.py" not in t.problem_statement  # the location is not named
        assert t.extra["test_cmd"].endswith("test_inflection.py")
        record = to_record(t)
        assert json.loads(json.dumps(record))["FAIL_TO_PASS"] == list(t.fail_to_pass)


def test_every_task_fails_before_the_gold_patch_and_passes_after(
        tasks: list, repos: Path, local_backend: str, tmp_path: Path) -> None:
    (tmp_path / "instances.jsonl").write_text("".join(json.dumps(to_record(t)) + "\n"
                                                      for t in tasks))
    loaded = load_instances(tmp_path / "instances.jsonl")
    assert [i.instance_id for i in loaded] == [t.instance_id for t in tasks]
    with SWEEnv(instances=loaded, repos=repos, backend=local_backend) as env:
        for t in tasks:
            env.reset(options={"task_id": t.instance_id})
            _, reward, _, _, info = env.step("<done/>")
            rb = info["reward_breakdown"]
            assert reward == 0.0 and rb["fail_to_pass"] == 0.0 and rb["tests_ran"] == 1.0
            env.reset(options={"task_id": t.instance_id})
            # the original text of the file the bug is in is in no git object of /testbed
            path = t.extra["mutation"]["path"]
            original = (repos / "inflection" / path).read_bytes()
            sha = hashlib.sha1(b"blob %d\0" % len(original) + original).hexdigest()
            obs, *_ = env.step(f"<bash>git cat-file -e {sha} && echo LEAK; "
                               "git log --oneline | wc -l; git status --short | wc -l</bash>")
            assert "LEAK" not in obs and "1\n0" in obs, obs
            env.step(env.reference_action())
            _, reward, terminated, _, info = env.step(env.reference_action())
            assert terminated and reward == 1.0, info.get("test_output")
            assert not info["infra_error"]


def test_swe_synth_reads_the_data_root(tasks: list, repos: Path, local_backend: str,
                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKYHUB_DATA", str(tmp_path))
    with pytest.raises(DataNotFound, match="skyhub swe data get swe-synth"):
        skyhub.make("swe-synth", backend=local_backend)
    data = tmp_path / "swe-synth"
    data.mkdir()
    (data / "repos").symlink_to(repos)
    (data / "instances.jsonl").write_text(json.dumps(to_record(tasks[0])) + "\n")
    with skyhub.make("swe-synth", backend=local_backend) as env:
        obs, _ = env.reset()
        assert "tests fail" in obs or "test fails" in obs
        assert env.instance.instance_id == tasks[0].instance_id
