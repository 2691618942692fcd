"""skyhub envs as skyrl-gym `BaseTextEnv`s (skyrl-gym, the real package), made through
skyrl-gym's own `make` and stepped as SkyRL's generator steps them: `make(env_class,
env_config=..., extras=<the dataset row>)`, `init(prompt)`, `step(text)` until `done`,
`get_metrics()`, `close()`."""

from __future__ import annotations

import contextlib
import io
import json
import re
import runpy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skyhub.errors import EnvNotFound, InfraError, UsageError
from skyhub.registry import register

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from skyhub_testenvs import FlakyEnv

SNIPPET = Path(__file__).parents[2] / "docs" / "snippets" / "adapter_skyrl_gym.py"


@pytest.fixture(scope="module")
def sg(need: Callable[[str, str, str], None]) -> Any:
    try:
        import skyrl_gym  # noqa: F401

        from skyhub.adapters import skyrl_gym as adapter

        adapter.SkyhubTextEnv  # noqa: B018 - loads skyrl-gym (MissingDependency)
    except ImportError as e:
        need("skyrl-gym", "SKYHUB_REQUIRE_SKYRL_GYM",
             f"it is not installed ({e}): pip install 'skyrl-gym==0.4.*'")
    return adapter





def test_snippet_plays_toy_lookup_to_a_reward(sg: Any) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(SNIPPET), run_name="__main__")
    words = out.getvalue().split(maxsplit=2)
    assert words[:2] == ["1.0", "True"]
    assert "'success': 1.0" in words[2] and "'infra_error': 0.0" in words[2]


def test_generator_style_episode_through_skyrl_gym_make(sg: Any) -> None:
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    env_class = sg.register("toy-lookup")
    assert env_class == "skyhub-toy-lookup" and env_class in skyrl_gym.registry
    # SkyRL's generator passes the row's extra columns, and sets max_turns itself
    env = skyrl_gym.make(env_class, env_config={}, extras={
        "task_id": "lookup-0-7", "reward_spec": {"method": "rule"}, "max_turns": 9})
    assert isinstance(env, BaseTextEnv)
    chat, meta = env.init([{"role": "user", "content": "(a stale prompt from the dataset)"}])
    assert meta["task_id"] == "lookup-0-7"
    assert chat[0]["role"] == "system" and "<lookup>KEY</lookup>" in chat[0]["content"]
    assert chat[1]["role"] == "user" and chat[1]["content"].startswith("What is the value")
    assert env.stop_strings == ["</lookup>", "</answer>"]
    assert env.max_turns == 3  # the env's own budget rules, not the generator's 9
    key = chat[1]["content"].split()[-1].rstrip("?")

    out = env.step(f"<lookup>{key}</lookup>")
    assert (out["reward"], out["done"]) == (0.0, False)
    assert [m["role"] for m in out["observations"]] == ["user"]
    value = re.search(r"<result>(.*?)</result>", out["observations"][0]["content"]).group(1)
    out = env.step(f"<answer>{value}</answer>")
    assert (out["reward"], out["done"], out["observations"]) == (1.0, True, [])
    assert out["metadata"]["outcome"] == "success"
    json.dumps(out["metadata"])  # crosses Ray as plain data
    assert env.get_metrics() == {"infra_error": 0.0, "success": 1.0, "turns": 2.0,
                                 "reward/correct": 1.0, "reward/format_errors": 0.0}
    assert [m["role"] for m in env.chat_history] == ["system", "user", "assistant", "user",
                                                     "assistant"]
    with pytest.raises(UsageError, match="after the episode ended"):
        env.step("<answer>again</answer>")
    env.close()


def test_env_config_section_and_kwargs_reach_the_env(sg: Any) -> None:
    import skyrl_gym

    env_class = sg.register("toy-lookup", name="lookup-short", max_turns=2)
    env = skyrl_gym.make(env_class, env_config={"n_tasks": 5}, extras={"seed": 3})
    chat, _ = env.init([])
    assert "You have 2 turns" in chat[0]["content"] and len(env.env.tasks) == 5
    env.close()
    with pytest.raises(EnvNotFound):
        sg.register("toy-nope")


def test_infra_errors_end_the_episode_and_show_in_metrics(sg: Any, tmp_env_id: str) -> None:
    import skyrl_gym

    register(tmp_env_id, FlakyEnv)
    env_class = sg.register(tmp_env_id)
    for task in ("t-flag", "t-raise"):
        env = skyrl_gym.make(env_class, env_config={}, extras={"extra_info": {"task_id": task}})
        env.init([])
        out = env.step("ok")
        assert (out["reward"], out["done"], out["metadata"]["infra_error"]) == (0.0, True, True)
        assert env.get_metrics()["infra_error"] == 1.0
    assert "sandbox host went away" in out["metadata"]["error"]
    # a run that skips failed rollouts gets an exception instead
    strict = sg.register(tmp_env_id, name=f"{tmp_env_id}-strict", on_infra_error="raise")
    env = skyrl_gym.make(strict, env_config={}, extras={"task_id": "t-flag"})
    env.init([])
    with pytest.raises(InfraError, match="container died"):
        env.step("ok")
    with pytest.raises(UsageError, match="on_infra_error"):
        sg.register(tmp_env_id, on_infra_error="ignore")


def test_dataset_rows_follow_skyrls_layout(sg: Any) -> None:
    rows = sg.dataset_rows("toy-arith", n=3)
    assert [r["extra_info"]["task_id"] for r in rows] == ["arith-0-0", "arith-0-1", "arith-0-2"]
    row = rows[0]
    assert set(row) == {"data_source", "prompt", "env_class", "reward_spec", "extra_info"}
    assert row["env_class"] == "skyhub-toy-arith"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert sg.generator_stop("toy-arith") == ["</answer>"]
