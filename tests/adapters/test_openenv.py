"""skyhub envs served over OpenEnv's protocol (openenv-core, the real package), played by
OpenEnv's own WebSocket client: a real uvicorn on a free port in a thread of this process."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import runpy
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from skyhub.errors import UsageError
from skyhub.registry import register

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from skyhub_testenvs import FlakyEnv

SNIPPET = Path(__file__).parents[2] / "docs" / "snippets" / "adapter_openenv.py"


@pytest.fixture(scope="module")
def oe(need: Callable[[str, str, str], None]) -> Any:
    try:
        from skyhub.adapters import openenv

        openenv.SkyhubEnvironment  # noqa: B018 - loads openenv-core (MissingDependency)
    except ImportError as e:
        need("openenv-core", "SKYHUB_REQUIRE_ADAPTERS",
             f"it is not installed ({e}): pip install 'skyhub[openenv]'")
    return openenv





@pytest.fixture
def broken_id(tmp_env_id: str) -> str:
    register(tmp_env_id, FlakyEnv)
    return tmp_env_id


@contextlib.contextmanager
def session(oe: Any, env_id: str, **kwargs: Any) -> Iterator[Any]:
    with oe.OpenEnvServer(env_id, **kwargs) as server, \
            oe.SkyhubEnvClient(base_url=server.url).sync() as env:
        yield env


def test_snippet_plays_toy_lookup_to_a_reward(oe: Any) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(SNIPPET), run_name="__main__")
    assert out.getvalue().split() == ["1.0", "True", "success", "False"]


def test_episode_over_an_openenv_session(oe: Any) -> None:
    with session(oe, "toy-lookup") as env:
        first = env.reset(task_id="lookup-0-3")
        obs = first.observation
        assert obs.task_id == "lookup-0-3" and not first.done and first.reward is None
        # the system prompt passes through as the conversation's first message
        assert obs.messages[0] == {"role": "system", "content": obs.system_prompt}
        assert "<lookup>KEY</lookup>" in obs.system_prompt
        assert obs.messages[1] == {"role": "user", "content": obs.text}
        assert obs.stop_strings == ["</lookup>", "</answer>"]
        key = obs.text.split()[-1].rstrip("?")

        wrong = env.step("<lookup>nokey</lookup>")
        assert wrong.reward == 0.0 and not wrong.done
        assert wrong.observation.messages == [{"role": "user", "content": wrong.observation.text}]
        assert "no such key" in wrong.observation.text
        looked = env.step(oe.SkyhubAction(text=f"<lookup>{key}</lookup>"))
        value = re.search(r"<result>(.*?)</result>", looked.observation.text).group(1)
        # the last of 3 turns: the answer ends it, scored by the env's rules
        last = env.step(f"<answer>{value}</answer>")
        assert (last.reward, last.done, last.observation.outcome) == (1.0, True, "success")
        assert last.observation.terminated and not last.observation.infra_error
        assert last.observation.info["reward_breakdown"]["correct"] == 1.0
        state = env.state()
        assert (state.env_id, state.task_id, state.step_count, state.total_reward) == \
            ("toy-lookup", "lookup-0-3", 3, 1.0)
        with pytest.raises(RuntimeError, match="after the episode ended"):
            env.step("<answer>again</answer>")
        # the same session plays on after a reset, and a seed picks the same task again
        a = env.reset(seed=5).observation.task_id
        assert env.reset(seed=5).observation.task_id == a


def test_infra_errors_end_the_episode_marked(oe: Any, broken_id: str) -> None:
    with session(oe, broken_id) as env:
        assert env.reset(task_id="t-ok").observation.stop_strings == ["</ok>"]
        good = env.step("ok")
        assert (good.reward, good.done, good.observation.infra_error) == (1.0, True, False)
        for task in ("t-flag", "t-raise"):
            env.reset(task_id=task)
            bad = env.step("ok")
            o = bad.observation
            assert (bad.reward, bad.done, o.infra_error, o.outcome) == (0.0, True, True, "error")
            assert env.state().infra_error
        assert "sandbox host went away" in o.info["error"]
        # a reset that cannot get its sandbox is an infra error too, not a crash
        r = env.reset(task_id="t-reset")
        assert r.done and r.observation.infra_error
        assert "no Docker daemon" in r.observation.info["error"]


def test_a_client_cannot_choose_env_kwargs(oe: Any) -> None:
    with session(oe, "toy-lookup") as env:
        with pytest.raises(RuntimeError, match="tasks_file are not accepted"):
            env.reset(tasks_file="/etc/passwd")
        with pytest.raises(RuntimeError, match="before reset"):
            env.step("hello")
        assert env.reset(seed=0).observation.text  # the session survives both


def test_sessions_play_apart_at_once(oe: Any) -> None:
    async def play(url: str, task_id: str) -> tuple[str | None, float | None]:
        async with oe.SkyhubEnvClient(base_url=url) as env:
            first = await env.reset(task_id=task_id)
            key = first.observation.text.split()[-1].rstrip("?")
            looked = await env.step(f"<lookup>{key}</lookup>")
            value = re.search(r"<result>(.*?)</result>", looked.observation.text).group(1)
            last = await env.step(f"<answer>{value}</answer>")
            return last.observation.task_id, last.reward

    async def both(url: str) -> list[Any]:
        return await asyncio.gather(play(url, "lookup-0-1"), play(url, "lookup-0-2"))

    with oe.OpenEnvServer("toy-lookup", max_concurrent_envs=2) as server:
        assert asyncio.run(both(server.url)) == [("lookup-0-1", 1.0), ("lookup-0-2", 1.0)]


def test_serving_beyond_loopback_needs_consent(oe: Any) -> None:
    with pytest.raises(UsageError, match="no authentication"):
        oe.OpenEnvServer("toy-lookup", host="0.0.0.0")
