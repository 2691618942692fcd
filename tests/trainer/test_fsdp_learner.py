"""The sharded learner (FSDP2 over 2 gloo ranks on this CPU) against the single-rank one: the
same batch gives the same step, a sharded checkpoint resumes exactly (with 2 ranks or 1), and
`skyhub train dist.learner_ranks=2` runs the loop with rank 0 rolling out and logging."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from skyhub.trainer import dist as D
from skyhub.trainer.config import load_config
from skyhub.trainer.loop import train

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
import trainer_ranks as T

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """One launch of 2 ranks that runs every check (starting ranks is the slow part)."""
    out = tmp_path_factory.mktemp("fsdp")
    res = D.launch(T.sharded_learner_checks, (str(out),), ranks=2)
    return res, out


@pytest.fixture(scope="module")
def one_rank():
    torch.set_num_threads(1)
    return T.steps(T.make_learner(False), [0, 2])


def test_two_ranks_shard_the_weights(two_ranks):
    res, _ = two_ranks
    assert res["world"] == 2 and res["types"] == ["DTensor"]


def test_a_two_rank_step_equals_the_one_rank_step(two_ranks, one_rank):
    res, _ = two_ranks
    for (m2, w2), (m1, w1) in zip(res["steps"], one_rank, strict=True):
        # the gradient itself (Adam's step hides its scale): a rank that forgot to sum its
        # share with the other's would be off by 2x here
        assert m2["grad_norm"] == pytest.approx(m1["grad_norm"], rel=1e-5)
        assert m2["loss"] == pytest.approx(m1["loss"], rel=1e-5, abs=1e-7)
        assert m2["entropy"] == pytest.approx(m1["entropy"], rel=1e-5)
        assert max_diff(w1, w2) < 1e-5
    assert max_diff(one_rank[0][1], one_rank[1][1]) > 1e-5  # the steps did move the weights


def test_a_sharded_checkpoint_resumes_exactly(two_ranks):
    res, _ = two_ranks
    assert res["resumed_steps"] == 2
    assert max_diff(res["resumed"][0][1], res["steps"][1][1]) < 1e-7


def test_one_rank_resumes_a_two_rank_checkpoint(two_ranks):
    res, out = two_ranks
    learner = T.make_learner(False, seed=7)
    learner.load(out / "ck")  # torch.distributed.checkpoint reshards 2 shards into 1
    assert max_diff(learner.full_state_dict(), res["steps"][0][1]) == 0.0
    (_, weights), = T.steps(learner, [2])
    assert max_diff(weights, res["steps"][1][1]) < 1e-5


def test_a_two_rank_checkpoint_loads_with_from_pretrained_in_float32(two_ranks):
    from transformers import AutoModelForCausalLM

    res, out = two_ranks
    model = AutoModelForCausalLM.from_pretrained(out / "ck" / "model")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert max_diff(model.state_dict(), res["steps"][0][1]) == 0.0


def test_activation_checkpointing_under_fsdp_gives_the_same_step(two_ranks):
    res, _ = two_ranks
    assert max_diff(res["checkpointed"][0][1], res["steps"][0][1]) < 1e-6


def test_bf16_compute_on_two_ranks_keeps_float32_masters_that_move(two_ranks):
    res, _ = two_ranks
    before, after = res["bf16"]
    assert {v.dtype for v in after.values()} == {torch.float32}
    changed = sum(int((after[k] != before[k]).sum()) for k in before)
    assert changed / sum(v.numel() for v in before.values()) >= 0.5


def test_kl_against_a_sharded_reference(two_ranks):
    res, _ = two_ranks
    first, second = res["kl"]
    assert first["kl"] == pytest.approx(0.0, abs=1e-6) and second["kl"] > 0


# ------------------------------------------------------------------------------ the loop
SMALL = ["rollout.samples_per_prompt=4", "optim.train_batch_size=4", "optim.mini_batch_size=4",
         "env.num_envs=4", "loop.eval_every=0", "loop.tensorboard=false",
         "dist.learner_ranks=2"]


def weights(run: Path, step: int) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run / f"checkpoints/step_{step:06d}/model/model.safetensors"))


def test_two_ranks_train_and_resume_exactly(tmp_path):
    # 4 steps straight, through the CLI as a user starts it (the ranks are its business),
    # saving at step 2; then a run that has only that step-2 checkpoint (what a 2-step run
    # leaves: nothing in a run depends on its planned length) resumes to step 4.
    a, b = tmp_path / "a", tmp_path / "b"
    out = subprocess.run([sys.executable, "-m", "skyhub.cli.main", "train", "--recipe",
                          "tiny-cpu", "--out", str(a), *SMALL, "loop.max_steps=4",
                          "loop.save_every=2"], capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "reward (last 3)" in out.stdout
    rows = [json.loads(x) for x in (a / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["world_size"] == 2 and r["episodes"] == 16 for r in rows)
    (b / "checkpoints").mkdir(parents=True)
    shutil.copytree(a / "tokenizer", b / "tokenizer")
    shutil.copytree(a / "checkpoints/step_000002", b / "checkpoints/step_000002")
    (b / "metrics.jsonl").write_text("".join(ln + "\n" for ln in
                                             (a / "metrics.jsonl").read_text().splitlines()[:2]))
    resumed = train(load_config("tiny-cpu", [*SMALL, f"loop.out={b}", "loop.max_steps=4",
                                             "loop.resume=true"]), live=False)
    assert [r["step"] for r in resumed.metrics] == [3, 4]
    for x, y in zip(rows[2:], resumed.metrics, strict=True):
        assert x["reward_mean"] == y["reward_mean"]
        assert x["loss"] == pytest.approx(y["loss"], abs=1e-6)
    assert max_diff(weights(a, 4), weights(b, 4)) < 1e-6
