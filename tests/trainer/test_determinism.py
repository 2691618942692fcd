"""The same seed and config give the same weights, bit for bit, on a CPU: run to run, however
the rollout's requests were batched, resumed against uninterrupted, and on 2 learner ranks.

Each case runs `skyhub train --recipe tiny-cpu loop.max_steps=4` (evaluation off, to keep it
short) and compares the sha256 of the step-4 weights file.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)

CLI = [sys.executable, "-m", "skyhub.cli.main", "train", "--recipe", "tiny-cpu"]
FAST = ["loop.eval_every=0", "loop.tensorboard=false"]


def train(out: Path, *extra: str) -> None:
    run = subprocess.run([*CLI, "--out", str(out), *FAST, *extra], capture_output=True,
                         text=True, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]


def weights_sha(out: Path, step: int = 4) -> str:
    path = out / "checkpoints" / f"step_{step:06d}" / "model" / "model.safetensors"
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> str:
    """One uninterrupted 4-step run's weights, which the other runs are compared with."""
    out = tmp_path_factory.mktemp("straight")
    train(out, "loop.max_steps=4")
    return weights_sha(out)


def test_two_runs_with_the_same_seed_give_identical_weights(straight, tmp_path):
    train(tmp_path, "loop.max_steps=4")
    assert weights_sha(tmp_path) == straight


def test_the_weights_do_not_depend_on_how_requests_were_batched(straight, tmp_path):
    # 7 episodes in flight instead of the recipe's 16: the engine's batches differ, and so do
    # its logprobs in their last bits; nothing the learner uses may depend on them (before
    # TIS was left off for an engine holding the learner's own weights, this differed by ~1e-5)
    train(tmp_path, "loop.max_steps=4", "rollout.max_in_flight=7")
    assert weights_sha(tmp_path) == straight


def test_resumed_at_step_2_equals_uninterrupted(straight, tmp_path):
    train(tmp_path, "loop.max_steps=2")
    train(tmp_path, "loop.max_steps=4", "--resume")
    assert weights_sha(tmp_path) == straight
    rng = tmp_path / "checkpoints" / "step_000002" / "rng" / "rank_0.pt"
    assert rng.is_file()  # the random generators the resumed run started from


def test_a_different_seed_gives_different_weights(straight, tmp_path):
    # the comparison can fail: the seed reaches the weights
    train(tmp_path, "loop.max_steps=4", "loop.seed=1")
    assert weights_sha(tmp_path) != straight


def test_two_learner_ranks_give_identical_weights_run_to_run(tmp_path):
    train(tmp_path / "a", "loop.max_steps=4", "dist.learner_ranks=2")
    train(tmp_path / "b", "loop.max_steps=4", "dist.learner_ranks=2")
    assert weights_sha(tmp_path / "a") == weights_sha(tmp_path / "b")
