"""What the sharded-learner tests run inside each rank (started by `skyhub.trainer.dist.launch`;
it lives here because a spawned rank imports its entry point by module name, which a test
module under pytest's importlib mode does not have)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch


def episodes(n: int = 12, seed: int = 0, vocab: int = 300) -> list[Any]:
    """Groups of 4 random episodes of mixed lengths: prompt, then 1-3 turns of agent tokens and
    an observation (the batch of the learner tests, in one process and across ranks)."""
    from skyhub.trainer.rollout import Trajectory

    rng = random.Random(seed)
    out = []
    for i in range(n):
        e = Trajectory(group=i // 4, task_id=str(i), reward=float(rng.random() < 0.5))
        e.add([rng.randrange(6, vocab) for _ in range(rng.randint(4, 30))], agent=False)
        for _ in range(rng.randint(1, 3)):
            k = rng.randint(1, 12)
            e.add([rng.randrange(6, vocab) for _ in range(k)], agent=True,
                  logprobs=[-5.0] * k, versions=[0] * k)
            e.add([rng.randrange(6, vocab) for _ in range(rng.randint(2, 8))], agent=False)
        out.append(e)
    return out


def make_learner(sharded: bool, *, seed: int = 1, checkpointing: bool = False,
                 dtype: torch.dtype | None = None, lr: float = 1e-4, kl_coef: float = 0.0,
                 micro_batch_tokens: int = 120) -> Any:
    """The tiny policy's learner; sharded, ranks other than 0 start from a meta-device model
    (rank 0's weights reach them)."""
    import torch.distributed as dist

    from skyhub.trainer.config import AlgoConfig, OptimConfig
    from skyhub.trainer.learner import Learner
    from skyhub.trainer.policy import enable_checkpointing
    from skyhub.trainer.tiny import tiny_model

    if sharded and dist.get_rank() != 0:
        with torch.device("meta"):
            model = tiny_model(300, seed=seed)
    else:
        model = tiny_model(300, seed=seed)
    if checkpointing:
        enable_checkpointing(model)
    return Learner(model, AlgoConfig(kl_coef=kl_coef), OptimConfig(
        lr=lr, micro_batch_tokens=micro_batch_tokens, train_batch_size=3, mini_batch_size=3),
        shard=sharded, dtype=dtype)


def steps(learner: Any, batches: list[int]) -> list[tuple[dict[str, float], dict[str, Any]]]:
    """(metrics, whole weights) after each step, one step per batch seed."""
    out = []
    for seed in batches:
        m = learner.train_step(episodes(seed=seed), 4)
        out.append((m, {k: v.clone() for k, v in learner.full_state_dict().items()}))
    return out


def sharded_learner_checks(out: str) -> dict[str, Any] | None:
    """One launch, everything the 2-rank learner tests compare against one rank: two steps
    (the first saved and resumed by a second learner), with and without activation
    checkpointing; a bf16-compute step; a KL step against a sharded reference."""
    import torch.distributed as dist

    from skyhub.trainer import dist as D

    torch.set_num_threads(1)
    D.init(300)
    try:
        rank = dist.get_rank()
        res: dict[str, Any] = {"world": dist.get_world_size()}
        learner = make_learner(True)
        res["types"] = sorted({type(p).__name__ for p in learner.policy.parameters()})
        res["steps"] = steps(learner, [0])
        learner.save(Path(out) / "ck")
        res["steps"] += steps(learner, [2])
        resumed = make_learner(True, seed=5)
        resumed.load(Path(out) / "ck")
        res["resumed"] = steps(resumed, [2])
        res["resumed_steps"] = resumed.steps
        res["checkpointed"] = steps(make_learner(True, checkpointing=True), [0])
        bf16 = make_learner(True, dtype=torch.bfloat16, lr=1e-5)
        before = {k: v.clone() for k, v in bf16.full_state_dict().items()}
        res["bf16"] = (before, steps(bf16, [0])[0][1])
        res["kl"] = [m for m, _ in steps(make_learner(True, kl_coef=0.1, lr=1e-2), [0, 2])]
        return res if rank == 0 else None
    finally:
        dist.destroy_process_group()
