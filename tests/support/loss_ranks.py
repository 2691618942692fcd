"""A learner's step gradient under a given split of the batch (one micro-batch, many, two
ranks), for the loss tests (tests/trainer/test_packing_invariance.py, test_reference_losses.py).
It lives here because a spawned rank imports its entry point by module name.

Each run: a tiny policy; a first step with plain SGD (Adam's first step is lr * sign(g), which
would turn rounding noise into a full step and make the runs incomparable) moves the policy away
from its frozen reference, so the KL term has a value and a gradient; then the second step's
gradient, before any optimiser step, and the weights it was taken at.
"""

from __future__ import annotations

from typing import Any

import torch
from trainer_ranks import episodes

GROUP = 4
LR = 0.5  # the first step's SGD learning rate


def run_config(aggregation: str, kl: str | None = "k3", *, advantage: str = "grpo",
               dual_clip: float | None = 3.0, tis_cap: float | None = 2.0,
               reinforce_baseline: bool = False) -> dict[str, Any]:
    return {"aggregation": aggregation, "kl": kl, "advantage": advantage,
            "dual_clip": dual_clip, "tis_cap": tis_cap,
            "reinforce_baseline": reinforce_baseline}


def step_gradient(config: dict[str, Any], *, sharded: bool, micro_batch_tokens: int,
                  pack: bool = True) -> dict[str, Any]:
    """{"before": the weights (checkpoint names) the gradient is taken at, "grads": that
    gradient (the same names), "metrics": the step's metrics, "critic": the critic's weights
    after both steps (gae)}. Sharded: a collective."""
    import torch.distributed as dist

    from skyhub.trainer.config import AlgoConfig, OptimConfig
    from skyhub.trainer.learner import Learner
    from skyhub.trainer.tiny import tiny_model

    if sharded and dist.get_rank() != 0:
        with torch.device("meta"):
            model = tiny_model(300, seed=1)
    else:
        model = tiny_model(300, seed=1)
    algo = AlgoConfig(advantage=config["advantage"], aggregation=config["aggregation"],
                      kl_coef=0.0 if config["kl"] is None else 0.5,
                      kl_estimator=config["kl"] or "k3", dual_clip=config["dual_clip"],
                      tis_cap=config["tis_cap"], reinforce_baseline=config["reinforce_baseline"])
    optim = OptimConfig(lr=LR, micro_batch_tokens=micro_batch_tokens, train_batch_size=3,
                        mini_batch_size=3, grad_clip=1e9)  # the learner sets the lr each step
    learner = Learner(model, algo, optim, shard=sharded, pack=pack)
    learner.opt = torch.optim.SGD(learner.policy.parameters(), lr=LR)
    if learner.critic is not None:
        learner.critic_opt = torch.optim.SGD(learner.critic.parameters(), lr=LR)
    learner.train_step(episodes(seed=0), GROUP)
    before = {k: v.clone() for k, v in learner.full_state_dict().items()}
    learner.opt.step = lambda *a, **k: None
    metrics = learner.train_step(episodes(seed=2), GROUP)
    grads = {}
    for name, p in learner.policy.named_parameters():
        g = p.grad
        if hasattr(g, "full_tensor"):  # a DTensor shard: the whole gradient (a collective)
            g = g.full_tensor()
        grads[name.removeprefix("lm.")] = g.detach().cpu().clone()
    critic = ({} if learner.critic is None else  # after both steps' SGD updates
              {k: v.detach().clone() for k, v in learner.critic.state_dict().items()})
    return {"before": before, "grads": grads, "metrics": metrics, "critic": critic}


def two_rank_gradients(configs: list[dict[str, Any]], micro_batch_tokens: int
                       ) -> list[dict[str, Any]] | None:
    """Inside each of 2 ranks (`skyhub.trainer.dist.launch`): `step_gradient` per config."""
    import torch.distributed as dist

    from skyhub.trainer import dist as D

    torch.set_num_threads(1)
    D.init(300)
    try:
        out = [step_gradient(c, sharded=True, micro_batch_tokens=micro_batch_tokens)
               for c in configs]
        return out if dist.get_rank() == 0 else None
    finally:
        dist.destroy_process_group()
