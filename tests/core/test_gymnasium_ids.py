"""skyhub's ids in gymnasium's registry under `skyhub/`, whichever package is imported first."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

PROGRAM = """
{first}
import gymnasium
from gymnasium.utils.env_checker import check_env
env = gymnasium.make("skyhub/toy-lookup")
check_env(env.unwrapped)
obs, info = env.reset(seed=0)
assert "What is the value" in obs, obs
print(sorted(k for k in gymnasium.registry if k.startswith("skyhub/")))
"""


@pytest.mark.parametrize("first", [
    "import gymnasium\nimport skyhub",
    "import skyhub\nimport sys\nassert 'gymnasium' not in sys.modules\nimport gymnasium",
    "import skyhub\nskyhub.make('toy-arith').close()",
], ids=["gymnasium-first", "skyhub-first", "skyhub-make-first"])
def test_gymnasium_make_finds_skyhub_ids_in_a_fresh_interpreter(first: str) -> None:
    out = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c",
                          PROGRAM.format(first=first)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    ids = eval(out.stdout.strip().splitlines()[-1])
    assert {"skyhub/toy-lookup", "skyhub/sql-spider", "skyhub/python-math"} <= set(ids)


def test_the_gymnasium_env_is_a_skyhub_env_that_passes_check_env() -> None:
    import gymnasium
    from gymnasium.utils.env_checker import check_env

    import skyhub

    env = gymnasium.make("skyhub/toy-lookup", max_turns=4)
    try:
        assert isinstance(env.unwrapped, skyhub.TextEnv)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env.unwrapped)
        env.reset(seed=1)
        _, reward, terminated, _, info = env.step("<answer>nothing</answer>")
        assert terminated and reward == 0.0 and info["outcome"] == "failure"
    finally:
        env.close()


def test_ids_registered_later_follow_into_gymnasium() -> None:
    import gymnasium

    import skyhub
    from skyhub.registry import unregister

    skyhub.register("gymtest-lookup", "skyhub.envs.toy.env:LookupEnv", kwargs={"max_turns": 5})
    try:
        env = gymnasium.make("skyhub/gymtest-lookup")
        assert env.unwrapped.max_turns == 5  # the registered default reached the env
        env.close()
    finally:
        unregister("gymtest-lookup")
    assert "skyhub/gymtest-lookup" not in gymnasium.registry
    with pytest.raises(gymnasium.error.Error):
        gymnasium.make("skyhub/gymtest-lookup")
