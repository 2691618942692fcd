"""Learner: the policy's optimisation step on a batch of rollout episodes.

`train_step(episodes, group_size)` does, top to bottom: advantages (per group, over the
episodes that did not hit an infra error), reference logprobs for a KL term when asked, then
for each epoch and mini-batch a gradient-accumulated PPO step over *packed* micro-batches.

Forward passes run over packed micro-batches (`packing.py`): episodes of very different
lengths share rows, so almost no compute goes to padding. `pack=False` pads each micro-batch
instead (the baseline of `benchmarks/trainer.py`).

Precision and memory (`policy.py`): the weights, their gradients and AdamW's moments are
float32; forward and backward run in `dtype` (bf16 on a GPU); logprobs come chunk by chunk of
tokens from the hidden states, never as a whole sequence's full-vocabulary log-softmax.

Sharded (`shard=True`, inside a process group: `dist.py` starts one): every rank holds a
1/world shard of the weights, gradients and optimiser state (FSDP2) and calls `train_step`
with the same whole batch; each mini-batch's episodes are split over the ranks by tokens,
each rank runs the same number of micro-batches (a rank with fewer runs empty ones, since
every forward is a collective), and the gradients reduced over the ranks are those of the
whole mini-batch, so the step equals the single-rank one up to float rounding.

How a mini-batch is split (micro-batches, packing, ranks) does not change the step: every loss
term (policy, KL, value; and the entropy metric) is a sum over tokens or sequences divided by
the *whole mini-batch's* denominator (`algorithms.loss_denominator`: its tokens, or its
sequences), computed before the split; each micro-batch contributes its share and the shares
add up, as OpenRLHF's `batch_num_tokens` / `global_batch_size` do. (SkyRL 0.3.1 divides each
micro-batch's own mean by the number of micro-batches instead, so its step depends on the
split; ours equals its step with one micro-batch per mini-batch.)

Over ~400 lines, for a reason: one job, the optimisation step, read top to bottom (advantages,
references, epochs, mini-batches, micro-batches, one rank or sharded), plus the two small
functions a rank needs to build its learner (`learner_algo`, `serve_learner`).
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from skyhub.errors import UsageError
from skyhub.trainer import algorithms as A
from skyhub.trainer import dist as D
from skyhub.trainer import turn_credit
from skyhub.trainer.checkpoint import load_learner, save_learner
from skyhub.trainer.config import AlgoConfig, OptimConfig, TrainConfig
from skyhub.trainer.packing import MicroBatch, plan_micro_batches
from skyhub.trainer.policy import (
    Gap,
    PolicyLogprobs,
    autocast,
    enable_checkpointing,
    gap_metrics,
    logprob_gap,
    shard_policy,
)
from skyhub.trainer.rollout import Trajectory
from skyhub.trainer.stepwise import check_algo, expand

ESTIMATORS = {"grpo": A.grpo_advantages, "dr_grpo": A.dr_grpo_advantages,
              "rloo": A.rloo_advantages}  # per group; reinforce++ and gae: over the batch


class Learner:
    """Owns the policy (and optional reference model and critic) and its optimiser.

    `model`: a transformers causal LM; its weights become float32 masters (converted in
    place if they are not). `dtype`: the compute precision (None: float32). `shard`: shard
    over the default process group with FSDP2 (a collective: every rank constructs its
    Learner; ranks other than 0 may pass a meta-device model, rank 0's weights are used).
    `self.model` is the module holding the masters (sharded: its parameters are DTensors);
    `full_state_dict()` gives them whole, named as in the checkpoint."""

    def __init__(self, model: Any, algo: AlgoConfig, optim: OptimConfig, *,
                 temperature: float = 1.0, pad_id: int = 0, norm_len: int | None = None,
                 pack: bool = True, dtype: torch.dtype | None = None, shard: bool = False,
                 logprob_chunk: int | None = None) -> None:
        self.algo, self.optim = algo, optim
        self.temperature, self.pad_id, self.norm_len, self.pack = (temperature, pad_id,
                                                                   norm_len, pack)
        self.dtype = dtype or torch.float32
        self.sharded = shard
        self.world, self.rank = D.world_and_rank() if shard else (1, 0)
        if shard:
            if algo.advantage == "gae":
                raise UsageError("algo.advantage=gae (a critic) is not sharded yet: use "
                                 "dist.learner_ranks=1, or a critic-free estimator (grpo, rloo, "
                                 "dr_grpo, reinforce++)")
            self.device = D.device()
            self.policy = shard_policy(model, self.device, self.dtype, logprob_chunk)
            self.model = self.policy.lm
        else:
            if any(p.dtype != torch.float32 for p in model.parameters()):
                model.float()  # the masters: an update below bf16's resolution is not lost
            self.device = next(model.parameters()).device
            self.policy = PolicyLogprobs(model, logprob_chunk)
            self.model = model
        self.opt = torch.optim.AdamW(self.policy.parameters(), lr=optim.lr,
                                     weight_decay=optim.weight_decay)
        self.steps = 0
        self.ref: PolicyLogprobs | None = None
        if algo.kl_coef > 0:
            self.ref = (shard_policy(model, self.device, self.dtype, logprob_chunk) if shard
                        else PolicyLogprobs(copy.deepcopy(model), logprob_chunk))
            self.ref.eval().requires_grad_(False)
        self.critic: Critic | None = None
        if algo.advantage == "gae":
            self.critic = Critic(model).to(self.device)
            self.critic_opt = torch.optim.AdamW(self.critic.parameters(), lr=optim.critic_lr)

    # ------------------------------------------------------------------ forward passes
    def _forward(self, policy: PolicyLogprobs, mb: MicroBatch | None
                 ) -> tuple[list[Tensor], list[Tensor]]:
        """Per episode, the logprob of each token t >= 1 given tokens < t ([len - 1]) and the
        policy's entropy there. `mb=None`: an empty pass (a rank with fewer micro-batches than
        the others still joins every collective), returning one zero-weight row."""
        if mb is None:
            ids = torch.full((1, 2), self.pad_id, dtype=torch.long)
            mb = MicroBatch([], ids, torch.arange(2).view(1, 2), None, [(0, 0, 2)])
        ids = mb.input_ids.to(self.device)
        # sharded, FSDP's mixed-precision policy casts; unsharded, autocast does
        with autocast(self.device, self.dtype if not self.sharded else torch.float32):
            lp, ent = policy(ids, mb.position_ids.to(self.device),
                             None if mb.attention_mask is None else
                             mb.attention_mask.to(self.device), ids.roll(-1, dims=-1),
                             self.temperature)
        return ([lp[r, s:s + n - 1] for r, s, n in mb.spans],
                [ent[r, s:s + n - 1] for r, s, n in mb.spans])

    def _forward_logprobs(self, model: Any, mb: MicroBatch) -> list[Tensor]:
        return self._forward(model, mb)[0]

    @torch.no_grad()
    def logprobs(self, episodes: list[Trajectory], model: Any = None) -> list[Tensor]:
        """The learner's logprobs of every episode's tokens (aligned with token_ids[1:]), in the
        order of `episodes`. Sharded, each rank computes its share and all get every one."""
        policy = self.policy if model is None else model
        was = policy.training
        policy.eval()
        index = {id(e): i for i, e in enumerate(episodes)}
        mine = self._mine(episodes)
        plan = self._plan(mine)
        n = D.all_max(len(plan)) if self.world > 1 else len(plan)
        out: dict[int, Tensor] = {}
        for i in range(n):
            mb = plan[i] if i < len(plan) else None
            lps = self._forward_logprobs(policy, mb)
            if mb is not None:
                out.update({index[id(e)]: lp.cpu() for e, lp in zip(mb.episodes, lps,
                                                                   strict=True)})
        policy.train(was)
        if self.world > 1:
            out = {k: v for part in D.all_gather(out) for k, v in part.items()}
        return [out[i] for i in range(len(episodes))]  # packing reorders; callers zip

    def _mine(self, episodes: list[Trajectory]) -> list[Trajectory]:
        """This rank's share of `episodes` (all of them unsharded)."""
        if self.world == 1:
            return episodes
        return [episodes[i] for i in D.split([len(e.token_ids) for e in episodes],
                                             self.world)[self.rank]]

    def _plan(self, episodes: list[Trajectory]) -> list[MicroBatch]:
        return plan_micro_batches(episodes, self.optim.micro_batch_tokens, self.pack,
                                  self.pad_id)

    # ------------------------------------------------------------------ the step
    def train_step(self, episodes: list[Trajectory], group_size: int) -> dict[str, float]:
        valid = [e for e in episodes if not e.infra_error and e.agent_tokens > 0]
        metrics: dict[str, float] = {"infra_errors": float(sum(e.infra_error for e in
                                                               episodes))}
        if not valid:
            return {**metrics, "skipped": 1.0}
        stepwise = any(e.parts for e in valid)
        if stepwise:
            check_algo(self.algo)
        ref_lp = self.logprobs(valid, self.ref) if self.ref is not None and not stepwise \
            else None
        rewards = {id(e): torch.tensor(float(e.reward)) for e in valid}
        penalties: dict[int, Tensor] = {}
        if ref_lp is not None and self.algo.kl_in_reward:
            # KL as a per-token penalty in the reward (summed for episode-level estimators)
            for e, lp, ref in zip(valid, self.logprobs(valid), ref_lp, strict=True):
                mask = torch.tensor(e.loss_mask[1:]).bool()
                kl = torch.where(mask, A.kl_estimate(lp, ref, self.algo.kl_estimator), 0.0)
                penalties[id(e)] = self.algo.kl_coef * kl
                rewards[id(e)] = rewards[id(e)] - penalties[id(e)].sum()
            metrics["kl_penalty"] = float(sum(p.sum() for p in penalties.values()) / len(valid))
        adv = self._episode_advantages(valid, group_size, rewards)
        if self.algo.turn_weight:  # plus each request's own (turn_credit), per token
            valid, adv = turn_credit.expand(valid, adv, weight=self.algo.turn_weight,
                                            gamma=self.algo.turn_gamma)
        elif stepwise:  # the episodes' advantages, each on every sample of its episode
            valid, adv = expand(valid, adv)
        if stepwise:
            metrics["samples"] = float(len(valid))
            if self.ref is not None:
                ref_lp = self.logprobs(valid, self.ref)
        extra = {id(e): {"adv": adv[id(e)]} for e in valid}
        if ref_lp is not None:
            for e, lp in zip(valid, ref_lp, strict=True):
                extra[id(e)]["ref"] = lp
        if self.critic is not None:
            self._gae(valid, extra, penalties)
        share = min(1.0, self.optim.mini_batch_size / self.optim.train_batch_size)
        single_pass = self.optim.epochs == 1 and share == 1.0
        if not single_pass:  # PPO's old policy: the weights before this step's updates
            for e, lp in zip(valid, self.logprobs(valid), strict=True):
                extra[id(e)]["old"] = lp
        n_mini = max(1, math.ceil(len(valid) * share))
        stats: dict[str, list[float]] = {}
        self._gap: Gap = (0.0, 0.0, 0.0)  # engine vs learner logprobs, filled by _update
        for _ in range(self.optim.epochs):
            for s in range(0, len(valid), n_mini):
                for k, v in self._update(valid[s:s + n_mini], extra).items():
                    stats.setdefault(k, []).append(v)
        self.steps += 1
        metrics.update({k: sum(v) / len(v) for k, v in stats.items()})
        metrics.update(gap_metrics(D.all_gather(self._gap) if self.world > 1 else [self._gap]))
        return metrics

    def _episode_advantages(self, episodes: list[Trajectory], group_size: int,
                            rewards: dict[int, Tensor] | None = None) -> dict[int, Tensor]:
        """Scalar advantage per valid episode, computed within its group over the group's
        valid episodes only (an infra error neither scores 0 nor shifts its group's mean).
        `rewards` (by episode id) replaces `episode.reward`, e.g. with a KL penalty in it."""
        out: dict[int, Tensor] = {}
        if self.algo.advantage == "gae":
            return {id(e): torch.tensor(0.0) for e in episodes}

        def reward(e: Trajectory) -> Tensor:
            return torch.tensor(float(e.reward)) if rewards is None else rewards[id(e)]

        groups: dict[int, list[Trajectory]] = {}
        for e in episodes:
            if not e.infra_error and e.agent_tokens > 0:
                groups.setdefault(e.group, []).append(e)
        if self.algo.advantage == "reinforce++":
            # One normalisation over the whole batch's agent tokens (Hu, 2025; OpenRLHF), so a
            # prompt whose samples all fail still gets a (negative) signal, unlike GRPO. With
            # reinforce_baseline, each prompt's mean reward is subtracted first.
            x = {id(e): reward(e) for g in groups.values() for e in g}
            if self.algo.reinforce_baseline:
                for members in groups.values():
                    mean = torch.stack([x[id(e)] for e in members]).mean()
                    for e in members:
                        x[id(e)] = x[id(e)] - mean
            eps = [e for g in groups.values() for e in g]
            width = max(len(e.loss_mask) for e in eps)
            mask = torch.tensor([e.loss_mask[1:] + [0] * (width - len(e.loss_mask))
                                 for e in eps]).bool()
            adv = A.reinforce_pp_advantages(torch.stack([x[id(e)] for e in eps]), mask=mask)
            return {id(e): a for e, a in zip(eps, adv, strict=True)}
        estimator = ESTIMATORS[self.algo.advantage]
        for members in groups.values():
            group_rewards = torch.stack([reward(e) for e in members])
            for e, a in zip(members, estimator(group_rewards, len(members)), strict=True):
                out[id(e)] = a
        return out

    def _gae(self, episodes: list[Trajectory], extra: dict[int, dict[str, Tensor]],
             penalties: dict[int, Tensor]) -> None:
        """PPO's advantages: the episode's reward on its last agent token, minus any per-token
        KL penalty, through GAE with the critic's values; whitened over the batch."""
        assert self.critic is not None
        with torch.no_grad(), autocast(self.device, self.dtype):
            for mb in self._plan(episodes):
                for e, v in zip(mb.episodes, self.critic.values(mb, self.device), strict=True):
                    mask = torch.tensor(e.loss_mask[1:], dtype=torch.float)
                    rewards = -penalties[id(e)] if id(e) in penalties else torch.zeros_like(mask)
                    last = int(mask.nonzero().max()) if mask.any() else 0
                    rewards[last] += e.reward
                    adv, ret = A.gae(rewards, v.float().cpu(), mask, self.algo.gamma,
                                   self.algo.lam)
                    extra[id(e)].update(adv=adv, ret=ret, old_v=v.float().cpu())
        # whiten over the batch's agent tokens, as OpenRLHF does (population variance,
        # rsqrt(max(var, 1e-8))); masked-out tokens come back 0
        advs = torch.cat([extra[id(e)]["adv"] for e in episodes])
        masks = torch.cat([torch.tensor(e.loss_mask[1:]) for e in episodes]).bool()
        white = A.masked_whiten(advs, masks).split([len(e.loss_mask) - 1 for e in episodes])
        for e, a in zip(episodes, white, strict=True):
            extra[id(e)]["adv"] = a

    def _update(self, episodes: list[Trajectory], extra: dict[int, dict[str, Tensor]]
                ) -> dict[str, float]:
        """One optimiser step on a mini-batch, accumulating over its micro-batches (sharded:
        over this rank's share of them; the ranks' gradients are summed). Every loss term of a
        micro-batch is divided by the whole mini-batch's denominator, so the micro-batches'
        terms add up to the mini-batch's loss whatever the split."""
        self.policy.train()
        self.opt.zero_grad(set_to_none=True)
        lengths = [sum(e.loss_mask[1:]) for e in episodes]
        total_tokens = max(sum(lengths), 1)
        # seq-mean-token-sum-norm without a generation budget: the longest episode of the
        # mini-batch (not of a micro-batch, whose width depends on the split)
        norm_len = self.norm_len or max(len(e.token_ids) - 1 for e in episodes)
        denom = A.loss_denominator(lengths, self.algo.aggregation, norm_len)
        sums: dict[str, float] = {}
        plan = self._plan(self._mine(episodes))
        n = D.all_max(len(plan)) if self.world > 1 else len(plan)
        for i in range(n):
            if i >= len(plan):  # an empty pass: this rank's share has run out
                lps, _ = self._forward(self.policy, None)
                (lps[0].sum() * 0.0).backward()
                continue
            mb = plan[i]
            lps, ents = self._forward(self.policy, mb)
            width = max(len(lp) for lp in lps)

            def pad(rows: list[Tensor], width: int = width) -> Tensor:
                return torch.stack([torch.nn.functional.pad(r.to(self.device),
                                                            (0, width - len(r))) for r in rows])

            logp = pad(lps)
            mask = pad([torch.tensor(e.loss_mask[1:], dtype=torch.float) for e in mb.episodes])
            old = pad([extra[id(e)].get("old", lp.detach()) for e, lp in
                       zip(mb.episodes, lps, strict=True)])
            eng = pad([torch.tensor(e.logprobs[1:]) for e in mb.episodes])
            # `old`: the learner's logprobs under the weights that sampled (this step's start)
            self._gap = logprob_gap(getattr(self, "_gap", (0.0, 0.0, 0.0)), old, eng, mask)
            adv_list = [extra[id(e)]["adv"] for e in mb.episodes]
            adv = (pad(adv_list) if adv_list[0].dim() else
                   torch.stack(adv_list).to(self.device))
            # each term below is this micro-batch's share of the mini-batch's term
            loss, stats = A.policy_loss(
                logp, old, adv, mask, clip_low=self.algo.clip_low,
                clip_high=self.algo.clip_high, dual_clip=self.algo.dual_clip,
                aggregation=self.algo.aggregation, norm_len=norm_len,
                engine_logp=eng if self.algo.tis_cap is not None else None,
                tis_cap=self.algo.tis_cap, denominator=denom)
            # token-mean statistics (clip fraction, ratio, ...) weigh by the share of tokens
            share = float(mask.sum()) / total_tokens
            stats = {k: v * share for k, v in stats.items()}
            stats["entropy"] = A.aggregate(pad(ents).detach(), mask, denominator=total_tokens)
            if self.ref is not None and not self.algo.kl_in_reward:
                ref = pad([extra[id(e)]["ref"] for e in mb.episodes])
                kl = A.aggregate(A.kl_estimate(logp, ref, self.algo.kl_estimator), mask,
                                 self.algo.aggregation, norm_len, denom)
                loss = loss + self.algo.kl_coef * kl
                stats["kl"] = kl.detach()
            # FSDP averages gradients over the ranks; each rank's terms are already its part
            # of the whole mini-batch, so scale by the world size to get their sum.
            (loss * self.world).backward()
            for k, v in {"loss": loss.detach(), **stats}.items():
                sums[k] = sums.get(k, 0.0) + float(v)
            if self.critic is not None:
                self._critic_backward(mb, extra, pad, mask, total_tokens, sums)
        if self.world > 1:  # each rank summed its share of the mini-batch
            parts = D.all_gather(sums)
            sums = {k: sum(p.get(k, 0.0) for p in parts) for k in
                    dict.fromkeys(k for p in parts for k in p)}
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(),
                                                   self.optim.grad_clip)
        if hasattr(grad_norm, "full_tensor"):  # a DTensor: the norm over every rank's shard
            grad_norm = grad_norm.full_tensor()
        for group in self.opt.param_groups:
            group["lr"] = self.lr()
        self.opt.step()
        if self.critic is not None:
            torch.nn.utils.clip_grad_norm_(self.critic.parameters(), self.optim.grad_clip)
            self.critic_opt.step()
            self.critic_opt.zero_grad(set_to_none=True)
        return {**sums, "grad_norm": float(grad_norm), "lr": self.lr()}

    def _critic_backward(self, mb: MicroBatch, extra: dict[int, dict[str, Tensor]],
                         pad: Any, mask: Tensor, total_tokens: int,
                         sums: dict[str, float]) -> None:
        """The critic's share of the mini-batch's value loss (a token mean over the whole
        mini-batch's agent tokens), backward."""
        assert self.critic is not None
        with autocast(self.device, self.dtype):
            values = pad(self.critic.values(mb, self.device)).float()
        ret = pad([extra[id(e)]["ret"] for e in mb.episodes])
        old_v = pad([extra[id(e)]["old_v"] for e in mb.episodes])
        vloss, _ = A.value_loss(values, old_v, ret, mask, clip=0.2, denominator=total_tokens)
        vloss.backward()
        sums["value_loss"] = sums.get("value_loss", 0.0) + float(vloss.detach())

    def lr(self) -> float:
        """Linear warmup over `warmup_steps`, then constant."""
        w = self.optim.warmup_steps
        return self.optim.lr * (min(1.0, (self.steps + 1) / w) if w else 1.0)

    # ------------------------------------------------------------------ weights, checkpoints
    def full_state_dict(self) -> dict[str, Tensor]:
        """The float32 masters, whole, under the transformers model's names. Sharded: a
        collective; rank 0 gets them on the CPU, the other ranks an empty dict."""
        if not self.sharded:
            return self.model.state_dict()
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        full = get_model_state_dict(self.policy, options=StateDictOptions(
            full_state_dict=True, cpu_offload=True))
        return {k.removeprefix("lm."): v for k, v in full.items()}

    def save(self, path: Path) -> None:
        """`path/model/` (transformers' format, float32) and the state to resume from exactly
        (see `checkpoint.py`). Sharded: a collective."""
        save_learner(self, path)

    def load(self, path: Path) -> None:
        load_learner(self, path)


def learner_algo(cfg: TrainConfig) -> AlgoConfig:
    """`cfg.algo` as the learner applies it: truncated importance sampling only where the
    engine's weights can differ from the learner's (see `AlgoConfig.tis_cap`). The hf engine
    in a synchronous loop samples with the weights the learner is about to train, so the
    learner's logprobs are the sampling distribution's (every rank builds its learner with
    this, so all agree)."""
    same_weights = cfg.rollout.engine == "hf" and cfg.loop.mode == "sync"
    return replace(cfg.algo, tis_cap=None) if same_weights else cfg.algo


def serve_learner(cfg: TrainConfig) -> None:
    """A rank other than 0 of a sharded run: build this rank's shard of the learner from rank
    0's description of the model (its class and config: the weights come from rank 0), then
    serve rank 0's calls on it (`dist.serve`) until rank 0 says stop."""
    msg = D.receive()
    if D.is_stop(msg):
        return
    cls, config, kwargs = msg
    with torch.device("meta"):
        lm = cls(config)
    if cfg.model.gradient_checkpointing:
        enable_checkpointing(lm)
    D.serve(Learner(lm, learner_algo(cfg), cfg.optim, shard=True, **kwargs))


class Critic(torch.nn.Module):
    """PPO's value model: a copy of the policy's transformer body with a scalar head. The value
    aligned with token t is the one computed at position t - 1 (the state before t)."""

    def __init__(self, policy: Any) -> None:
        super().__init__()
        self.body = copy.deepcopy(policy.get_decoder() if hasattr(policy, "get_decoder")
                                  else policy.base_model)
        self.head = torch.nn.Linear(policy.config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def values(self, mb: MicroBatch, device: torch.device) -> list[Tensor]:
        h = self.body(input_ids=mb.input_ids.to(device), position_ids=mb.position_ids.to(device),
                      attention_mask=None if mb.attention_mask is None else
                      mb.attention_mask.to(device), use_cache=False).last_hidden_state
        v = self.head(h).squeeze(-1)
        return [v[r, s:s + n - 1] for r, s, n in mb.spans]
