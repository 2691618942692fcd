"""python-code and python-math end to end: real kernels, real grading sandboxes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import skyhub
from skyhub.eval.checks import check_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def code_env(backend: str) -> Iterator[skyhub.TextEnv]:
    env = skyhub.make("python-code", backend=backend, max_turns=4, cell_timeout_s=5,
                      test_timeout_s=5)
    yield env
    env.close()


@pytest.fixture(scope="module")
def math_env(backend: str) -> Iterator[skyhub.TextEnv]:
    env = skyhub.make("python-math", backend=backend, max_turns=3, cell_timeout_s=5)
    yield env
    env.close()


def first_task(env: skyhub.TextEnv, kind: str) -> str:
    return next(t.id for t in env.tasks if t.meta["tests"]["kind"] == kind)


def test_reference_solutions_score_one(code_env: skyhub.TextEnv) -> None:
    for kind in ("asserts", "check", "stdio"):
        code_env.reset(options={"task_id": first_task(code_env, kind)})
        _obs, reward, terminated, _truncated, info = code_env.step(code_env.reference_action())
        assert (reward, terminated, info["outcome"], info["infra_error"]) == (
            1.0, True, "success", False), info
        assert info["reward_breakdown"]["fraction"] == 1.0


def test_cells_run_then_the_answer_is_graded(code_env: skyhub.TextEnv) -> None:
    _prompt, _ = code_env.reset(options={"task_id": first_task(code_env, "asserts")})
    obs, reward, terminated, _truncated, info = code_env.step("<python>print(6 * 7)</python>")
    assert "<output>\n42\n</output>" in obs and not terminated and reward == 0.0
    assert "3 turns left" in obs
    obs, reward, *_ , info = code_env.step("<answer>def nothing():\n    pass</answer>")
    assert reward == 0.0 and info["outcome"] == "failure" and not info["infra_error"]
    assert info["reward_breakdown"]["cells"] == 1.0


def test_kernel_state_cannot_fake_a_pass(code_env: skyhub.TextEnv) -> None:
    """The agent defines the solution only in its kernel and leaves a file behind; the
    submitted program relies on both. Grading runs elsewhere, so it fails."""
    task_id = first_task(code_env, "asserts")
    code_env.reset(options={"task_id": task_id})
    reference = code_env.tasks.get(task_id).answer
    code_env.step(f"<python>{reference}\nopen('helper.py', 'w').write({reference!r})</python>")
    _obs, reward, terminated, _, info = code_env.step(
        "<answer>from helper import *</answer>")
    assert terminated and reward == 0.0 and info["reward_breakdown"]["passed"] == 0.0


def test_partial_credit_is_in_the_breakdown(backend: str, tmp_path: Path) -> None:
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps({"id": "half", "prompt": "Write inc(x).", "answer": None,
                                "meta": {"tests": {"kind": "asserts", "setup": "", "asserts": [
                                    "assert inc(1) == 2", "assert inc(2) == 3"]}}}) + "\n")
    for partial, want in ((False, 0.0), (True, 0.5)):
        with skyhub.make("python-code", backend=backend, data_dir=str(data),
                         partial_credit=partial) as env:
            env.reset()
            *_, info = env.step("<answer>def inc(x):\n    return 3 if x == 2 else 0</answer>")
            assert info["reward_breakdown"]["fraction"] == 0.5
            assert info["reward_breakdown"]["passed"] == 1.0
            assert _reward(env) == want


def _reward(env: skyhub.TextEnv) -> float:
    env.reset()
    _, reward, *_ = env.step("<answer>def inc(x):\n    return 3 if x == 2 else 0</answer>")
    return reward


def test_malformed_turns_and_running_out_of_turns(code_env: skyhub.TextEnv) -> None:
    code_env.reset(seed=0)
    obs, reward, terminated, truncated, info = code_env.step("I think I will wait.")
    assert "<python>" in obs and not terminated and not truncated
    for _ in range(2):
        code_env.step("<python>1</python>")
    obs, reward, terminated, truncated, info = code_env.step("<python>2</python>")
    assert truncated and not terminated and reward == 0.0
    assert info["outcome"] == "failure" and "4 turns" in info["error"]
    assert info["reward_breakdown"]["format_errors"] == 1.0


def test_math_reference_and_wrong_answers(math_env: skyhub.TextEnv) -> None:
    math_env.reset(seed=1)
    gold = math_env.task.answer
    *_, reward, terminated, _, info = math_env.step(math_env.reference_action())
    assert (reward, terminated, info["outcome"]) == (1.0, True, "success"), (gold, info)
    math_env.reset(seed=1)
    _, reward, terminated, _, info = math_env.step("<answer>-123456789</answer>")
    assert (reward, terminated, info["outcome"]) == (0.0, True, "failure")


def test_math_with_a_python_cell_and_a_boxed_answer(math_env: skyhub.TextEnv) -> None:
    task = next(t for t in math_env.tasks if t.answer.lstrip("-").isdigit())
    math_env.reset(options={"task_id": task.id})
    obs, reward, terminated, *_ = math_env.step(f"<python>print({task.answer})</python>")
    assert task.answer in obs and not terminated
    # a \boxed inside code is not an answer; outside code it is
    obs, reward, terminated, *_ = math_env.step("```python\ns = '\\\\boxed{0}'\nprint(s)\n```")
    assert not terminated
    _, reward, terminated, _, _info = math_env.step(f"So the answer is $\\boxed{{{task.answer}}}$.")
    assert (reward, terminated) == (1.0, True)


@pytest.mark.parametrize("env_id", ["python-code", "python-math"])
def test_contract_checker_passes(env_id: str, local_backend: str) -> None:
    """The contract does not depend on the backend; each check costs ~30 s of kernels, so it
    runs on the local one only."""
    report = check_env(env_id, env_kwargs={"backend": local_backend}, episodes=1)
    assert report.ok, [r for r in report.results if not r.passed]


def test_python_math_forks_on_docker(docker_backend: str) -> None:
    """The fork check on Docker (the contract test above runs the local backend only): a
    kernel's episode forked mid-way goes on as the original and as a fresh replay."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
    from fork_checks import fork_check

    message = fork_check("python-math", backend=docker_backend, max_turns=6, cell_timeout_s=10)
    assert "went on as the original" in message
