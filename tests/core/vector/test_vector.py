"""VectorEnv: gymnasium-equivalent lockstep, autoreset modes, send/recv, failure isolation."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest

import skyhub
from skyhub.errors import DataNotFound, SkyhubError
from skyhub.vector import VectorEnv

# Envs for executor="processes" must be importable by module name in the worker process (the
# test module itself is not, under pytest's importlib mode): they live in tests/support.
sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from skyhub_testenvs import CountEnv, count_env


def fns(n: int, **kw: Any) -> list[Any]:
    import functools
    return [functools.partial(count_env, **kw) for _ in range(n)]


def actions(t: int, n: int) -> list[str]:
    return ["x" * ((t + i) % 4) for i in range(n)]


@pytest.fixture(params=["threads", "processes"])
def executor(request: pytest.FixtureRequest) -> str:
    return request.param


# ------------------------------------------------------------------------ lockstep semantics
@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_lockstep_matches_gymnasium_sync_vector_env(mode: str) -> None:
    """Same envs, seeds and actions: identical obs, rewards, terminations and truncations to
    gymnasium's own SyncVectorEnv, and the same final_obs in same_step mode."""
    n, steps = 4, 12
    ours = VectorEnv(fns(n), autoreset_mode=mode, info_format="dict")
    ref = gymnasium.vector.SyncVectorEnv(fns(n), autoreset_mode=gymnasium.vector.AutoresetMode(
        {"next_step": "NextStep", "same_step": "SameStep", "disabled": "Disabled"}[mode]))
    try:
        o1, _ = ours.reset(seed=7)
        o2, _ = ref.reset(seed=7)
        assert tuple(o1) == tuple(o2)
        done = np.zeros(n, bool)
        for t in range(steps):
            acts = actions(t, n)
            if mode == "disabled" and done.any():
                ours.reset(options={"reset_mask": done})
                ref.reset(options={"reset_mask": done})
            a = ours.step(acts)
            b = ref.step(tuple(acts))
            assert tuple(a[0]) == tuple(b[0]), f"obs differ at step {t}"
            np.testing.assert_array_equal(a[1], b[1])
            np.testing.assert_array_equal(a[2], b[2])
            np.testing.assert_array_equal(a[3], b[3])
            if mode == "same_step" and "final_obs" in b[4]:
                np.testing.assert_array_equal(a[4]["_final_obs"], b[4]["_final_obs"])
                mask = b[4]["_final_obs"]
                assert list(a[4]["final_obs"][mask]) == list(b[4]["final_obs"][mask])
            done = a[2] | a[3]
    finally:
        ours.close()
        ref.close()


def test_next_step_autoreset_ignores_action_and_returns_reset_obs() -> None:
    with VectorEnv(fns(1)) as venv:
        venv.reset(options={"task_id": "t0"})
        obs, rew, term, _, _ = venv.step(["ab"])
        assert term[0] and rew[0] == 2.0
        obs, rew, term, trunc, infos = venv.step(["ignored"])
        assert obs[0].startswith("start ") and rew[0] == 0.0 and not term[0] and not trunc[0]
        assert infos[0]["turn"] == 0


def test_same_step_autoreset_puts_final_obs_and_info_in_info() -> None:
    with VectorEnv(fns(1), autoreset_mode="same_step") as venv:
        venv.reset(options={"task_id": "t0"})
        obs, rew, term, _, infos = venv.step(["abc"])
        assert term[0] and rew[0] == 3.0
        assert obs[0].startswith("start ")
        assert infos[0]["final_obs"] == "t0:1:abc"
        assert infos[0]["final_info"]["outcome"] == "success"


def test_disabled_autoreset_refuses_to_step_a_finished_env() -> None:
    with VectorEnv(fns(2), autoreset_mode="disabled") as venv:
        venv.reset(options=[{"task_id": "t0"}, {"task_id": "t2"}])
        venv.step(["a", "a"])
        with pytest.raises(SkyhubError, match="reset_mask"):
            venv.step(["a", "a"])
        obs, _ = venv.reset(options={"reset_mask": np.array([True, False]), "task_id": "t0"})
        assert obs[0] == "start t0" and obs[1] == "t2:1:a"
        _, _, term, _, _ = venv.step(["a", "a"])
        assert list(term) == [True, False]


def test_reset_seed_gives_each_env_seed_plus_index(executor: str) -> None:
    with VectorEnv(fns(3), executor=executor) as venv:
        a, _ = venv.reset(seed=10)
        b, _ = venv.reset(seed=10)
        assert a == b
        single = [CountEnv().reset(seed=10 + i)[0] for i in range(3)]
        assert list(a) == single


def test_reset_takes_options_per_env() -> None:
    with VectorEnv(fns(3)) as venv:
        obs, infos = venv.reset(options=[{"task_id": "t2"}, {"task_id": "t0"}, None])
        assert obs[0] == "start t2" and obs[1] == "start t0"
        assert [i["task_id"] for i in infos][:2] == ["t2", "t0"]
        with pytest.raises(ValueError, match="3 envs"):
            venv.reset(options=[{"task_id": "t2"}])


def test_make_vec_builds_registered_envs_with_kwargs(executor: str) -> None:
    with skyhub.make_vec("toy-lookup", 3, executor=executor, max_turns=2) as venv:
        obs, infos = venv.reset(seed=0)
        assert len(obs) == 3 and all("key" in o for o in obs)
        assert venv.get_attr("max_turns") == (2, 2, 2)
        refs = venv.call("reference_action")
        assert all(r.startswith("<lookup>") for r in refs)
        venv.step(list(refs))
        _, rewards, term, _, infos = venv.step(list(venv.call("reference_action")))
        assert rewards.tolist() == [1.0, 1.0, 1.0] and term.all()
        assert all(i["outcome"] == "success" for i in infos)


def test_env_construction_error_is_raised_to_the_caller() -> None:
    with pytest.raises(DataNotFound):
        skyhub.make_vec("toy-arith", 2, tasks_file="/nonexistent/tasks.jsonl")


# ------------------------------------------------------------------------ send / recv
def test_recv_returns_fast_envs_before_slow_ones(executor: str) -> None:
    import functools
    env_fns = [functools.partial(count_env, delay=d) for d in (0.8, 0.0, 0.8, 0.0)]
    with VectorEnv(env_fns, executor=executor) as venv:
        venv.reset(options={"task_id": "t2"})
        venv.send(["a"] * 4)
        ids, _obs, _rewards, *_ = venv.recv(min_ready=1)
        assert set(ids.tolist()) <= {1, 3} and len(ids) >= 1
        rest = [i for i in (1, 3) if i not in ids.tolist()]
        if rest:
            ids2, *_ = venv.recv(min_ready=len(rest))
            assert set(ids2.tolist()) == set(rest)
        ids3, obs3, *_ = venv.recv(min_ready=2)
        assert sorted(ids3.tolist()) == [0, 2]
        assert all(o == "t2:1:a" for o in obs3)


def test_recv_timeout_returns_what_is_ready() -> None:
    import functools
    with VectorEnv([functools.partial(count_env, delay=1.0)] * 2) as venv:
        venv.reset(options={"task_id": "t2"})
        venv.send(["a", "a"])
        ids, obs, *_ = venv.recv(min_ready=1, timeout=0.05)
        assert len(ids) == 0 and obs == ()
        ids, *_ = venv.recv(min_ready=2)
        assert sorted(ids.tolist()) == [0, 1]


def test_send_to_busy_env_and_recv_with_nothing_in_flight_raise() -> None:
    import functools
    with VectorEnv([functools.partial(count_env, delay=0.3)] * 2) as venv:
        venv.reset()
        with pytest.raises(SkyhubError, match="nothing in flight"):
            venv.recv()
        venv.send(["a"], [0])
        with pytest.raises(SkyhubError, match="in flight"):
            venv.send(["b"], [0])
        with pytest.raises(SkyhubError, match="in flight"):
            venv.step(["a", "b"])
        ids, *_ = venv.recv()
        assert ids.tolist() == [0]


def test_async_loop_runs_episodes_to_completion_with_autoreset() -> None:
    with skyhub.make_vec("toy-lookup", 4) as venv:
        venv.async_reset(seed=0)
        finished, rewards = 0, []
        while finished < 12:
            ids, _obs, rew, term, trunc, _infos = venv.recv()
            acts = []
            for i, r, d in zip(ids, rew, term | trunc, strict=True):
                if d:
                    finished += 1
                    rewards.append(r)
                acts.append(venv.call("reference_action", env_ids=[int(i)])[0] or "")
            venv.send(acts, ids)
        venv.recv(min_ready=4)
        assert rewards == [1.0] * len(rewards) and len(rewards) >= 12


# ------------------------------------------------------------------------ failure isolation
def test_crashing_env_is_reported_as_infra_error_and_recreated(executor: str) -> None:
    import functools
    env_fns = [functools.partial(count_env), functools.partial(count_env, crash_at=1),
               functools.partial(count_env)]
    with VectorEnv(env_fns, executor=executor) as venv:
        venv.reset(options={"task_id": "t2"})
        obs, rew, term, trunc, infos = venv.step(["a", "a", "a"])
        assert infos[1]["infra_error"] is True and infos[1]["outcome"] == "error"
        assert "env bug" in infos[1]["error"] and trunc[1] and not term[1] and rew[1] == 0.0
        assert infos[1]["task_id"] == "t2"
        assert obs[0] == "t2:1:a" and obs[2] == "t2:1:a"
        assert not infos[0]["infra_error"] and not infos[2]["infra_error"]
        # next step resets slot 1 with a fresh env (whose step counter starts again)
        obs, *_ = venv.step(["a", "a", "a"])
        assert obs[1].startswith("start ") and obs[0] == "t2:2:a"
        assert venv.get_attr("steps_total", env_ids=[1]) == (0,)


@pytest.mark.parametrize("how", ["task_id", "seeded"])
def test_a_failed_reset_is_reported_for_the_task_it_was_for(executor: str, how: str) -> None:
    """The infra error of a reset that failed (a task whose image does not build)
    names that task, never the one the slot ran before."""
    import functools

    with VectorEnv([functools.partial(count_env, reset_crash_task="t1")],
                   executor=executor) as venv:
        venv.reset(options={"task_id": "t0"})
        _, _, term, _, infos = venv.step(["a"])
        assert term[0] and infos[0]["task_id"] == "t0"
        if how == "task_id":
            _, infos = venv.reset(options={"task_id": "t1"})
        else:  # a seeded choice that draws t1
            seed = next(s for s in range(100) if np.random.default_rng(s).integers(3) == 1)
            _, infos = venv.reset(seed=seed)
        assert infos[0]["infra_error"] is True and "cannot prepare t1" in infos[0]["error"]
        assert infos[0]["task_id"] == "t1"


def test_env_process_that_dies_is_isolated_and_replaced(tmp_path: Path) -> None:
    import functools
    env_fns = [functools.partial(count_env),
               functools.partial(count_env, exit_once=str(tmp_path / "died"))]
    with VectorEnv(env_fns, executor="processes") as venv:
        venv.reset(options={"task_id": "t2"})
        obs, _, _, trunc, infos = venv.step(["a", "a"])
        assert infos[1]["infra_error"] and "died" in infos[1]["error"] and trunc[1]
        assert obs[0] == "t2:1:a"
        obs, *_ = venv.step(["a", "a"])
        assert obs[1].startswith("start ")
        obs, *_ = venv.step(["a", "a"])
        assert obs[1].endswith(":1:a")


def test_hanging_env_is_abandoned_after_step_timeout(executor: str) -> None:
    import functools
    env_fns = [functools.partial(count_env), functools.partial(count_env, hang_at=1)]
    with VectorEnv(env_fns, executor=executor, step_timeout=1.0) as venv:
        venv.reset(options={"task_id": "t2"})
        obs, _, _, trunc, infos = venv.step(["a", "a"])
        assert infos[1]["infra_error"] and "step_timeout" in infos[1]["error"] and trunc[1]
        assert obs[0] == "t2:1:a"
        obs, *_ = venv.step(["a", "a"])
        assert obs[1].startswith("start ")


def test_same_step_mode_reports_crash_in_final_info() -> None:
    import functools
    with VectorEnv([functools.partial(count_env, crash_at=1)], autoreset_mode="same_step") as v:
        v.reset(options={"task_id": "t2"})
        obs, _, _, trunc, infos = v.step(["a"])
        assert trunc[0] and obs[0].startswith("start ")
        assert infos[0]["final_info"]["infra_error"] is True


# ------------------------------------------------------------------------ housekeeping
def test_fast_envs_step_inline_and_slow_ones_go_back_to_threads() -> None:
    envs = [CountEnv() for _ in range(2)]
    with VectorEnv([lambda e=e: e for e in envs]) as venv:
        venv.reset(seed=0)
        main = threading.current_thread().name
        seen = []
        for t in range(12):
            _, _, _, _, infos = venv.step(["a", "a"])
            seen.append(infos[0].get("thread"))
            if t == 7:
                for e in envs:
                    e.delay = 0.01  # now slow: must leave the caller's thread
        assert main in seen[:8], "a fast env should have been stepped inline"
        # at most the first slow step ran inline; after it, every call is back in its thread
        assert seen[-2:].count(main) == 0 and None not in seen


def test_inline_fast_steps_off_keeps_every_step_in_the_env_thread() -> None:
    with VectorEnv(fns(2), inline_fast_steps=False) as venv:
        venv.reset(options={"task_id": "t2"})
        main = threading.current_thread().name
        threads = set()
        for _ in range(8):
            threads |= {i["thread"] for i in venv.step(["a", "a"])[4]}
        assert main not in threads and len(threads) == 2


def test_close_is_idempotent_and_leaves_no_thread_or_process(executor: str) -> None:
    before = {t.ident for t in threading.enumerate()}
    # (children other tests of this process left, e.g. multiprocessing's helpers, are theirs)
    kids_before = set(_children())
    venv = VectorEnv(fns(3), executor=executor)
    venv.reset()
    venv.step(["a"] * 3)
    venv.close()
    venv.close()
    time.sleep(0.1)
    left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert left == []
    assert sorted(set(_children()) - kids_before) == []
    with pytest.raises(SkyhubError, match="closed"):
        venv.step(["a"] * 3)


def _children() -> list[str]:
    """This process's child processes (pids, from /proc)."""
    return [p for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == os.getpid()]


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def test_info_format_dict_masks_envs_returned_by_recv() -> None:
    import functools
    env_fns = [functools.partial(count_env, delay=d) for d in (0.0, 0.5)]
    with VectorEnv(env_fns, info_format="dict") as venv:
        venv.reset(options={"task_id": "t2"})
        venv.send(["a", "a"])
        ids, _, _, _, _, infos = venv.recv(min_ready=1, timeout=0.3)
        assert ids.tolist() == [0]
        assert infos["_task_id"].tolist() == [True, False]
        assert infos["task_id"][0] == "t2"
        venv.recv()


def test_unknown_autoreset_mode_and_executor_are_rejected() -> None:
    with pytest.raises(ValueError, match="autoreset_mode"):
        VectorEnv(fns(1), autoreset_mode="sometimes")
    with pytest.raises(ValueError, match="executor"):
        VectorEnv(fns(1), executor="gpus")


def test_lambda_env_fn_with_processes_says_how_to_fix() -> None:
    with pytest.raises(ValueError, match="picklable"):
        VectorEnv([lambda: CountEnv()], executor="processes")
