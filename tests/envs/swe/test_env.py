"""A SWE-bench-format instance built here (a small git repository with a bug, an issue, a
test patch) played end to end in a sandbox: the oracle resolves it, doing nothing does not,
the editor works as text tags and as tool calls, and an agent that cheats on the tests
(edits them, plants a conftest.py or sitecustomize, kills pytest) gets no reward."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import skyhub
from skyhub.envs.swe.env import SWEEnv
from skyhub.envs.swe.protocol import edit_text
from skyhub.tools import ToolCall

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from fork_checks import fork_check

CORE = '''\
def add(a, b):
    """The sum of a and b."""
    return a + b


def scale(xs, k):
    return [x * k for x in xs]


class Stack:
    def __init__(self):
        self.items = []

    def push(self, x):
        self.items.append(x)

    def top(self):
        return self.items[0]
'''
TESTS = '''\
from calc.core import Stack, add, scale


def test_add():
    assert add(2, 3) == 5


def test_scale():
    assert scale([1, 2], 3) == [3, 6]
'''
TEST_PATCH_TEST = '''

def test_top_is_the_last_pushed():
    s = Stack()
    s.push(1)
    s.push(2)
    assert s.top() == 2, "top() should give the last item pushed"
'''


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def _diff(repo: Path, path: str, new: str) -> str:
    """The git diff that turns the committed `path` into `new` (the tree is left as it was)."""
    old = (repo / path).read_text() if (repo / path).exists() else None
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(new)
    _git(repo, "add", "-N", path)
    out = _git(repo, "diff", "--", path)
    if old is None:
        _git(repo, "rm", "-q", "--cached", path)
        (repo / path).unlink()
    else:
        (repo / path).write_text(old)
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """instances.jsonl and repos/acme__calc (a git repository with a history)."""
    root = tmp_path_factory.mktemp("swe")
    repo = root / "repos" / "acme__calc"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    _git(root, "init", "-q", str(repo))
    (repo / "calc" / "__init__.py").write_text("")
    (repo / "calc" / "core.py").write_text(CORE.replace("self.items[0]", "self.items[-1]"))
    (repo / "tests" / "test_core.py").write_text(TESTS)
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    (repo / "calc" / "core.py").write_text(CORE)  # the regression
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "refactor")
    base = _git(repo, "rev-parse", "HEAD").strip()
    patch = _diff(repo, "calc/core.py", CORE.replace("self.items[0]", "self.items[-1]"))
    test_patch = _diff(repo, "tests/test_core.py", TESTS + TEST_PATCH_TEST)
    (repo / "calc" / "core.py").write_text(CORE.replace("self.items[0]", "self.items[-1]"))
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "the fix")
    record = {"instance_id": "acme__calc-1", "repo": "acme/calc", "base_commit": base,
              "patch": patch, "test_patch": test_patch, "version": "0.1",
              "problem_statement": "Stack.top() returns the first item pushed, not the last.",
              "FAIL_TO_PASS": json.dumps(["tests/test_core.py::test_top_is_the_last_pushed"]),
              "PASS_TO_PASS": json.dumps(["tests/test_core.py::test_add",
                                          "tests/test_core.py::test_scale"])}
    (root / "instances.jsonl").write_text(json.dumps(record) + "\n")
    return root


@pytest.fixture(scope="module")
def env(data: Path, backend: str) -> Iterator[SWEEnv]:
    """One env per backend (local, docker), shared by the module's tests."""
    e = skyhub.make("swe", data_dir=data / "instances.jsonl", backend=backend,
                    command_timeout_s=60)
    yield e
    e.close()


def _play(env: SWEEnv, actions: list[str]) -> tuple[float, dict]:
    env.reset(options={"task_id": "acme__calc-1"})
    reward, info = 0.0, {}
    for a in actions:
        _, reward, terminated, truncated, info = env.step(a)
        if terminated or truncated:
            return reward, info
    _, reward, _, _, info = env.step("<done/>")
    return reward, info


def test_oracle_resolves_and_nop_does_not(env: SWEEnv) -> None:
    obs, _ = env.reset(options={"task_id": "acme__calc-1"})
    assert "Stack.top()" in obs and "/testbed" in obs
    reward, info = 0.0, {}
    for _ in range(3):
        action = env.reference_action()
        assert action is not None
        _, reward, terminated, _, info = env.step(action)
        if terminated:
            break
    assert reward == 1.0 and info["outcome"] == "success" and not info["infra_error"]
    rb = info["reward_breakdown"]
    assert rb["resolved"] == 1.0 and rb["fail_to_pass"] == 1.0 and rb["localization"] == 1.0
    assert "self.items[-1]" in info["model_patch"]

    reward, info = _play(env, [])
    assert reward == 0.0 and info["outcome"] == "failure" and not info["infra_error"]
    assert info["reward_breakdown"]["fail_to_pass"] == 0.0
    assert info["reward_breakdown"]["tests_ran"] == 1.0  # graded, not an empty log


def test_testbed_is_one_fresh_commit_at_the_base(env: SWEEnv) -> None:
    env.reset(options={"task_id": "acme__calc-1"})
    obs, *_ = env.step("<bash>git log --oneline | wc -l; git status --short | wc -l; "
                       "grep -c 'items\\[0\\]' calc/core.py</bash>")
    assert "1\n0\n1" in obs  # no history to read the fix from; a clean tree; the bug is there
    obs, *_ = env.step("<bash>ls tests; cat tests/test_core.py | grep -c top_is</bash>")
    assert "test_core.py" in obs and "\n0\n" in obs  # the test patch is not shown


def test_the_editor_as_tags_and_as_tool_calls(env: SWEEnv) -> None:
    env.reset(options={"task_id": "acme__calc-1"})
    obs, *_ = env.step(edit_text({"command": "view", "path": "/testbed/calc/core.py",
                                  "view_range": [17, 18]}))
    assert "self.items[0]" in obs and "    17\t" in obs
    obs, *_ = env.step(edit_text({"command": "str_replace", "path": "/testbed/calc/core.py",
                                  "old_str": "nothing like this", "new_str": "x"}))
    assert obs.startswith("Error: Nothing replaced")
    obs, *_ = env.step("<edit><command>str_replace</command></edit>")
    assert "needs <command>" in obs
    for path in ("/testbed/calc/co\x00re.py", "relative.py", "/testbed/" + "x" * 5000):
        obs, *_ = env.step(edit_text({"command": "view", "path": path}))
        assert obs.startswith("Error"), obs[:200]
    obs, reward, *_ = env.step(ToolCall("c1", "str_replace_editor", {
        "command": "str_replace", "path": "/testbed/calc/core.py",
        "old_str": "return self.items[0]", "new_str": "return self.items[-1]"}))
    assert reward == 0.0
    _, reward, terminated, _, info = env.step(ToolCall("c2", "done", {}))
    assert terminated and reward == 1.0, info.get("test_output")


def test_localization_reward(data: Path, local_backend: str) -> None:
    with skyhub.make("swe", data_dir=data / "instances.jsonl", backend=local_backend,
                     reward="localization") as env:
        # the right file, the wrong function: file F1 1, entity F1 0
        reward, info = _play(env, ["<bash>sed -i 's/x \\* k/k * x/' calc/core.py</bash>"])
        rb = info["reward_breakdown"]
        assert rb["file_f1"] == 1.0 and rb["entity_f1"] == 0.0 and 0 < reward < 1
        # named in CodeScout's answer format: the right method
        reward, info = _play(env, ["calc/core.py\nclass: Stack\nfunction: top\n<done/>"])
        assert info["reward_breakdown"]["entity_f1"] == 1.0 and reward == 1.0
        assert info["reward_breakdown"]["resolved"] == 0.0


FIX = "sed -i 's/self.items\\[0\\]/self.items[-1]/' calc/core.py"
CHEATS = {
    "edits the test": "sed -i 's/assert s.top() == 2/assert True/' tests/test_core.py; "
                      "printf '\\ndef test_top_is_the_last_pushed():\\n    pass\\n' "
                      ">> tests/test_core.py",
    "plants a conftest.py": "cat > conftest.py <<'EOF'\nimport pytest\n"
                            "@pytest.hookimpl(hookwrapper=True)\n"
                            "def pytest_runtest_makereport(item, call):\n"
                            "    out = yield\n    r = out.get_result()\n"
                            "    r.outcome = 'passed'\nEOF",
    # a fix that would run at interpreter start-up, were the file loaded then
    "plants a sitecustomize": "echo 'import calc.core as c; "
                              "c.Stack.top = lambda self: self.items[-1]' > sitecustomize.py",
    "edits pytest's configuration": "printf '[pytest]\\naddopts = -p no:python\\n' > pytest.ini",
    "kills pytest": "(while true; do pkill -f pytest; sleep 0.05; done) >/dev/null 2>&1 &",
    "fills the tree": "head -c 9000000 /dev/zero > calc/big.bin",
}


SET_ASIDE = {"edits the test": ["tests/test_core.py"], "plants a conftest.py": ["conftest.py"],
             "fills the tree": ["calc/big.bin"],
             "plants a sitecustomize": ["sitecustomize.py"],
             "edits pytest's configuration": ["pytest.ini"], "kills pytest": []}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_a_cheating_agent_gets_no_reward(env: SWEEnv, cheat: str) -> None:
    reward, info = _play(env, [f"<bash>{CHEATS[cheat]}</bash>"])
    assert reward == 0.0 and not info["infra_error"], info.get("test_output")
    assert info["reward_breakdown"]["tests_ran"] == 1.0, info.get("test_output")
    assert info["set_aside"] == SET_ASIDE[cheat]


def test_the_planted_conftest_would_pass_a_failing_test(env: SWEEnv) -> None:
    """The conftest cheat is a real one: where it is left in place, a failing test passes."""
    env.reset(options={"task_id": "acme__calc-1"})
    obs, *_ = env.step(f"<bash>{CHEATS['plants a conftest.py']}\n"
                       "printf 'def test_probe():\\n    assert 1 == 2\\n' > tests/test_probe.py\n"
                       "python3 -m pytest -q -p no:cacheprovider tests/test_probe.py</bash>")
    assert "1 passed" in obs, obs


def test_a_fix_still_counts_beside_a_cheat(env: SWEEnv) -> None:
    reward, info = _play(env, [f"<bash>{CHEATS['plants a conftest.py']}\n{FIX}</bash>"])
    assert reward == 1.0, info.get("test_output")
    assert info["set_aside"] == ["conftest.py"]


def test_an_instance_runs_in_the_image_it_names(data: Path, docker_backend: str) -> None:
    """SWE-Gym's and SWE-smith's records name their environment image (`image_name`): the
    episode runs there, and the next instance's image gets a sandbox of its own."""
    from skyhub.envs.swe.instances import load_instances
    from skyhub.sandbox import images

    plain = load_instances(data / "instances.jsonl")[0]
    named = type(plain)(**{**plain.__dict__, "instance_id": "acme__calc-default-image",
                           "image_name": images.image_tag("default")})
    with SWEEnv(instances=[plain, named], repos=data / "repos", backend=docker_backend) as env:
        env.reset(options={"task_id": named.instance_id})
        obs, *_ = env.step("<bash>python3 -c 'import pytest' 2>&1 | tail -1</bash>")
        assert "No module named 'pytest'" in obs  # skyhub's default image has no pytest
        env.reset(options={"task_id": plain.instance_id})
        obs, *_ = env.step("<bash>python3 -c 'import pytest; print(\"ok\")'</bash>")
        assert "ok" in obs  # the swe image again


def test_the_fork_check_passes(data: Path, backend: str) -> None:
    """An SWE episode forked mid-way (by replay) goes on as the original: the repository's
    edits and the grading of the continuation alike."""
    message = fork_check("swe", data_dir=data / "instances.jsonl", backend=backend,
                         command_timeout_s=60)
    assert "by replay" in message and "went on as the original" in message
