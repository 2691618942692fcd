"""executor="ray": envs in Ray actors behave like envs in threads, and dead actors are replaced.

One local Ray instance with 2 CPUs serves the whole module (starting Ray takes ~5 s, each actor
~0.5 s), hence the `slow` mark.
"""

from __future__ import annotations

import copy
import functools
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

import skyhub  # noqa: E402
from skyhub.errors import InfraError  # noqa: E402
from skyhub.vector import EnvFactory, VectorEnv, WorkerDied, get_executor  # noqa: E402
from skyhub.vector.ray_executor import RayExecutor, RayWorker  # noqa: E402

# Envs built in actors must be importable by module name there (see test_vector.py).
sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from skyhub_testenvs import count_env  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    if ray.is_initialized():  # another module's Ray: ours must have 2 CPUs
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


def env_actors() -> set[str]:
    """Names of the env actors alive in the cluster."""
    return {n for n in ray.util.list_named_actors() if n.startswith("skyhub-env-")}


def worker(venv: VectorEnv, i: int) -> RayWorker:
    w = venv._slots[i].runner.worker
    assert isinstance(w, RayWorker)
    return w


def lookup_action(t: int, i: int, reference: str) -> str:
    """The oracle's action, except a malformed one now and then (failures must match too)."""
    return "no tags here" if (t + i) % 5 == 4 else reference


# ------------------------------------------------------------------------ same as threads
def lockstep_trace(executor: str) -> list[Any]:
    trace: list[Any] = []
    with skyhub.make_vec("toy-lookup", 3, executor=executor, max_turns=3) as venv:
        obs, infos = venv.reset(seed=11)
        trace.append((obs, infos))
        for t in range(10):
            refs = venv.call("reference_action")
            acts = [lookup_action(t, i, r or "") for i, r in enumerate(refs)]
            obs, rewards, terms, truncs, infos = venv.step(acts)
            trace.append((obs, rewards.tolist(), terms.tolist(), truncs.tolist(), infos))
    return trace


def test_ray_lockstep_episodes_match_threads_for_the_same_seed() -> None:
    ours, ref = lockstep_trace("ray"), lockstep_trace("threads")
    assert ours == ref
    assert any(r == 1.0 for step in ref[1:] for r in step[1])  # episodes did finish


def async_trace(executor: str) -> dict[int, list[Any]]:
    """Each env's results in order, from an envpool-style loop (the order across envs varies
    from run to run; each env's own sequence must not)."""
    per_env: dict[int, list[Any]] = {i: [] for i in range(3)}
    with skyhub.make_vec("toy-lookup", 3, executor=executor, max_turns=3) as venv:
        venv.async_reset(seed=5)
        running = 3
        while running:
            ids, obs, rewards, terms, truncs, infos = venv.recv()
            acts, again = [], []
            for k, i in enumerate(ids.tolist()):
                per_env[i].append((obs[k], rewards[k], terms[k], truncs[k], infos[k]))
                if len(per_env[i]) == 10:  # this env is done; the others carry on
                    running -= 1
                    continue
                ref = venv.call("reference_action", env_ids=[i])[0] or ""
                acts.append(lookup_action(len(per_env[i]), i, ref))
                again.append(i)
            if again:
                venv.send(acts, again)
    return per_env


def test_ray_send_recv_gives_each_env_the_same_results_as_threads() -> None:
    assert async_trace("ray") == async_trace("threads")


def test_make_vec_with_ray_runs_registered_env_end_to_end() -> None:
    with skyhub.make_vec("toy-lookup", 2, executor="ray", max_turns=2) as venv:
        assert "executor=ray" in repr(venv)
        venv.reset(seed=0)
        assert venv.get_attr("max_turns") == (2, 2)
        venv.step(list(venv.call("reference_action")))
        _, rewards, terms, _, infos = venv.step(list(venv.call("reference_action")))
        assert rewards.tolist() == [1.0, 1.0] and terms.all()
        assert all(i["outcome"] == "success" for i in infos)
        pids = {worker(venv, i).pid for i in range(2)}
        assert len(pids) == 2 and None not in pids  # one actor process per env


# ------------------------------------------------------------------------ failures
def test_killed_actor_mid_episode_is_infra_error_and_env_is_recreated() -> None:
    with VectorEnv([functools.partial(count_env)] * 3, executor="ray") as venv:
        venv.reset(options={"task_id": "t2"})  # t2 episodes last 3 steps
        venv.step(["a"] * 3)
        victim = worker(venv, 1)
        ray.kill(victim.actor)
        # ray.kill is asynchronous: under load the next call could still reach the actor
        deadline = time.monotonic() + 60
        while victim.name in env_actors() and time.monotonic() < deadline:
            time.sleep(0.05)
        obs, rewards, terms, truncs, infos = venv.step(["b"] * 3)
        assert infos[1]["infra_error"] is True and infos[1]["outcome"] == "error"
        assert "died" in infos[1]["error"] and truncs[1] and not terms[1] and rewards[1] == 0.0
        assert infos[1]["task_id"] == "t2" and infos[1]["turn"] == 1
        assert obs[0] == obs[2] == "t2:2:b"  # the other envs did not notice
        obs, *_ = venv.step(["c"] * 3)
        assert obs[1].startswith("start ") and worker(venv, 1).name != victim.name
        obs, *_ = venv.step(["d"] * 3)
        assert obs[1].endswith(":1:d")
        assert victim.name not in env_actors()
        assert env_actors() >= {worker(venv, i).name for i in range(3)}


def test_env_raising_in_step_is_infra_error_as_with_threads() -> None:
    env_fns = [functools.partial(count_env), functools.partial(count_env, crash_at=1)]
    with VectorEnv(env_fns, executor="ray") as venv:
        venv.reset(options={"task_id": "t2"})
        obs, rewards, _, truncs, infos = venv.step(["a", "a"])
        assert infos[1]["infra_error"] is True and infos[1]["outcome"] == "error"
        assert "RuntimeError: env bug" in infos[1]["error"] and truncs[1] and rewards[1] == 0.0
        assert obs[0] == "t2:1:a" and not infos[0]["infra_error"]
        obs, *_ = venv.step(["a", "a"])
        assert obs[1].startswith("start ") and venv.get_attr("steps_total", env_ids=[1]) == (0,)


def test_hanging_env_actor_is_killed_after_step_timeout() -> None:
    env_fns = [functools.partial(count_env), functools.partial(count_env, hang_at=1)]
    # the timeout also covers the reset that starts the replacement actor (~0.5-2 s here, over
    # 5 s beside two busy loops on 2 cores), and stays well below the hang (60 s)
    with VectorEnv(env_fns, executor="ray", step_timeout=20.0) as venv:
        venv.reset(options={"task_id": "t2"})
        hung = worker(venv, 1).name
        obs, _, _, truncs, infos = venv.step(["a", "a"])
        assert infos[1]["infra_error"] and "step_timeout" in infos[1]["error"] and truncs[1]
        assert obs[0] == "t2:1:a"
        obs, *_ = venv.step(["a", "a"])
        assert obs[1].startswith("start ")
        assert hung not in env_actors()


def test_env_construction_error_is_raised_with_its_type_and_message() -> None:
    with pytest.raises(InfraError, match=r"DataNotFound: .*tasks\.jsonl"):
        skyhub.make_vec("toy-arith", 2, executor="ray", tasks_file="/nonexistent/tasks.jsonl")
    assert env_actors() == set()


def test_close_leaves_no_actor_behind() -> None:
    venv = skyhub.make_vec("toy-lookup", 3, executor="ray")
    venv.reset(seed=0)
    names = {worker(venv, i).name for i in range(3)}
    assert names <= env_actors()
    venv.close()
    venv.close()
    assert env_actors() == set()


# ------------------------------------------------------------------------ resources
def lookup_with_resources(resources: dict[str, Any]) -> EnvFactory:
    spec = copy.copy(skyhub.registry.spec("toy-lookup"))
    spec.resources = resources  # type: ignore[attr-defined]
    return EnvFactory(spec, {})


def test_actor_resources_come_from_the_env_spec() -> None:
    too_big = lookup_with_resources({"num_cpus": 3})  # the cluster has 2
    with pytest.raises(WorkerDied, match=r"did not start within 2 s.*'num_cpus': 3"):
        VectorEnv([too_big], executor=RayExecutor(start_timeout=2))
    assert env_actors() == set()
    # the executor's resources override the spec's
    with VectorEnv([too_big] * 2, executor=RayExecutor(resources={"num_cpus": 0.5})) as venv:
        obs, _ = venv.reset(seed=0)
        assert len(obs) == 2 and worker(venv, 0).options == {"num_cpus": 0.5}


def test_env_without_declared_resources_reserves_a_quarter_cpu() -> None:
    ex = RayExecutor()
    assert ex.actor_options(lookup_with_resources({})) == {"num_cpus": 0.25}
    assert ex.actor_options(lookup_with_resources({"num_gpus": 1, "memory": 2**30})) == {
        "num_cpus": 0.25, "num_gpus": 1, "memory": 2**30}
    assert ex.actor_options(functools.partial(count_env)) == {"num_cpus": 0.25}


def test_unknown_resource_key_says_where_custom_resources_go() -> None:
    with pytest.raises(ValueError, match=re.escape("'resources': {'num_cpu': 1}")):
        RayExecutor(resources={"num_cpu": 1})


def test_executor_by_name_is_ray() -> None:
    assert isinstance(get_executor("ray"), RayExecutor)


def test_executor_starts_ray_when_needed_and_it_outlives_the_vector_env() -> None:
    """Ray started by the executor must survive the VectorEnv: its local processes die with
    the thread that starts them, so that must not be an env's dispatch thread."""
    ray.shutdown()  # the module's Ray; this test leaves the executor's for the teardown
    with skyhub.make_vec("toy-lookup", 2, executor=RayExecutor(num_cpus=2)) as venv:
        assert ray.is_initialized() and ray.cluster_resources()["CPU"] == 2
        venv.reset(seed=0)
    with skyhub.make_vec("toy-lookup", 2, executor="ray") as venv:
        obs, _ = venv.reset(seed=0)
        venv.close()  # dispatch threads end here
        assert ray.get(ray.put(obs)) == obs  # Ray still answers


def test_resources_declared_at_registration_reach_the_actor_options() -> None:
    import skyhub
    from skyhub.registry import spec, unregister
    from skyhub.vector import EnvFactory

    skyhub.register("test-ray-heavy", "skyhub.envs.toy.env:LookupEnv",
                    resources={"num_cpus": 0.5, "memory": 2**28}, override=True)
    try:
        options = RayExecutor().actor_options(EnvFactory(spec("test-ray-heavy"), {}))
        assert options == {"num_cpus": 0.5, "memory": 2**28}
    finally:
        unregister("test-ray-heavy")
