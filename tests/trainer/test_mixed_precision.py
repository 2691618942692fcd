"""Mixed precision done right: float32 master weights, gradients and AdamW moments; forward and
backward in the compute dtype; checkpoints in float32; logprobs chunk-wise, exactly."""

from __future__ import annotations

import json
import random

import pytest
import torch

from skyhub.trainer.config import AlgoConfig, OptimConfig, load_config
from skyhub.trainer.learner import Learner
from skyhub.trainer.loop import train
from skyhub.trainer.model_memory import measure_peak
from skyhub.trainer.policy import chunked_logprobs
from skyhub.trainer.rollout import Trajectory
from skyhub.trainer.tiny import tiny_model


def episodes(n=8, vocab=300, seed=0):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        e = Trajectory(group=i // 4, task_id=str(i), reward=float(i % 2))
        e.add([rng.randrange(6, vocab) for _ in range(12)], agent=False)
        e.add([rng.randrange(6, vocab) for _ in range(8)], agent=True, logprobs=[-5.0] * 8,
              versions=[0] * 8)
        out.append(e)
    return out


def changed_fraction(before: dict, after: dict) -> float:
    return (sum(int((after[k] != before[k]).sum()) for k in before)
            / sum(v.numel() for v in before.values()))


def test_bf16_compute_updates_float32_masters_that_small_steps_do_move():
    model = tiny_model(300, seed=1).bfloat16()  # even a bf16 model gets float32 masters
    learner = Learner(model, AlgoConfig(), OptimConfig(lr=1e-5, train_batch_size=2,
                                                       mini_batch_size=2),
                      dtype=torch.bfloat16)
    seen = []
    hook = model.model.layers[0].mlp.down_proj.register_forward_hook(
        lambda mod, args, out: seen.append((mod.weight.dtype, out.dtype)))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    learner.train_step(episodes(), 4)
    hook.remove()
    assert seen and set(seen) == {(torch.float32, torch.bfloat16)}  # fp32 kept, bf16 computed
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert {v.dtype for s in learner.opt.state.values() for v in s.values()
            if v.numel() > 1} == {torch.float32}
    # lr 1e-5 on weights of ~1e-2: below bf16's resolution there, kept by float32
    assert changed_fraction(before, model.state_dict()) >= 0.5


def test_the_tiny_recipe_in_bf16_saves_float32_checkpoints_that_move_every_step(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    # the recipe's batch (256 episodes): its first steps have a few rewarded episodes, so the
    # gradient is not zero
    cfg = load_config("tiny-cpu", [
        f"loop.out={tmp_path}", "model.dtype=bfloat16", "optim.lr=1e-5", "loop.max_steps=2",
        "loop.save_every=1", "loop.eval_every=0", "loop.tensorboard=false"])
    train(cfg, live=False)
    ck = [tmp_path / f"checkpoints/step_{i:06d}/model" for i in (1, 2)]
    first, second = (load_file(str(c / "model.safetensors")) for c in ck)
    assert {v.dtype for v in second.values()} == {torch.float32}
    assert changed_fraction(first, second) >= 0.5
    loaded = AutoModelForCausalLM.from_pretrained(ck[1])
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["world_size"] for r in rows] == [1, 1] and all(r["entropy"] > 0 for r in rows)


def test_chunked_logprobs_and_entropy_equal_the_full_log_softmax_with_gradients():
    torch.manual_seed(0)
    head = torch.nn.Linear(32, 500, bias=False)
    hidden = torch.randn(3, 20, 32, requires_grad=True)
    targets = torch.randint(0, 500, (3, 20))
    lp, ent = chunked_logprobs(hidden, head, targets, temperature=0.7, chunk=7)
    full = torch.log_softmax(head(hidden).float() / 0.7, -1)
    ref = full.gather(-1, targets[..., None])[..., 0]
    assert torch.allclose(lp, ref, atol=1e-5)
    assert torch.allclose(ent, -(full.exp() * full).sum(-1), atol=1e-4)
    (g_ours,) = torch.autograd.grad(lp.sum(), hidden)
    (g_ref,) = torch.autograd.grad(ref.sum(), hidden)
    assert torch.allclose(g_ours, g_ref, atol=1e-5)


def test_chunked_logprobs_never_hold_a_whole_sequences_logits():
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 20_000, bias=False)
    hidden = torch.randn(1, 2048, 16, requires_grad=True)
    targets = torch.randint(0, 20_000, (1, 2048))

    def ours():
        chunked_logprobs(hidden, head, targets, chunk=128)[0].sum().backward()

    def whole():
        lg = head(hidden).float()
        (lg.gather(-1, targets[..., None])[..., 0] - lg.logsumexp(-1)).sum().backward()

    _, peak_ours = measure_peak(ours)
    _, peak_whole = measure_peak(whole)
    logits_bytes = 2048 * 20_000 * 4
    assert peak_whole > logits_bytes and peak_ours < logits_bytes / 2
    assert peak_ours * 4 < peak_whole


@pytest.mark.parametrize("name", ["auto", "bfloat16", "float32"])
def test_model_dtype_names_the_compute_precision(name):
    from skyhub.trainer.policy import compute_dtype

    expected = {"auto": torch.float32, "bfloat16": torch.bfloat16, "float32": torch.float32}
    assert compute_dtype(name, "cpu") == expected[name]
    assert compute_dtype("auto", "cuda") == torch.bfloat16
